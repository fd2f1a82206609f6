-- A gateway's notification may name only the payment: its order is found by
-- payment id (see the PostgreSQL migration of the same name).
CREATE INDEX payments_payment_id ON payments (payment_id);
