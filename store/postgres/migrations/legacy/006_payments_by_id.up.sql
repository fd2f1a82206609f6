-- A gateway's notification may name only the payment (a Stripe
-- PaymentIntent without metadata.order_id): its order is found by payment id.
CREATE INDEX payments_payment_id ON payments (payment_id);
