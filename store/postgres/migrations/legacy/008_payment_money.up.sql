-- Money paths. An attempt that has ended (SUCCEEDED, REFUND_REQUIRED) is
-- terminal: a later report that disagrees with it is counted in conflicts and
-- changes nothing. Each attempt records the currency its success was
-- reported in ('' before this version: read as the order's), so the audit can
-- check that a PAID order's paying attempt paid its amount in its currency.
-- The migration runs in one transaction: a failure leaves the schema as it was.
ALTER TABLE payments ADD COLUMN currency text NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN conflicts integer NOT NULL DEFAULT 0;

-- The paying attempt of a PAID order paid before attempts were recorded.
INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
SELECT o.id, o.payment_id, 'SUCCEEDED', o.amount_cents, o.currency, o.paid_at, o.paid_at
FROM orders o
WHERE o.status = 'PAID' AND o.payment_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.payment_id = o.payment_id);

-- Attempts earlier versions left open on finished orders: superseded by the
-- one that paid, or closed unpaid by the gateway check that cancelled.
UPDATE payments p SET status = 'SUPERSEDED'
FROM orders o WHERE o.id = p.order_id AND p.status = 'PENDING' AND o.status = 'PAID';
UPDATE payments p SET status = 'FAILED'
FROM orders o WHERE o.id = p.order_id AND p.status = 'PENDING' AND o.status = 'CANCELLED';

-- One payment id, one order (a Stripe PaymentIntent id comes from the
-- buyer's client: two orders naming one must not both be paid by it). A
-- database where earlier versions let two orders share one refuses this
-- index: `lapse audit` names them (payment_id_on_one_order); settle them,
-- then migrate again.
DROP INDEX payments_payment_id;
CREATE UNIQUE INDEX payments_payment_id_unique ON payments (payment_id);
