-- Money paths (see the PostgreSQL migration of the same name): each attempt
-- records the currency a success was reported in and counts the reports that
-- disagreed with how it had ended; a payment id belongs to one order.
ALTER TABLE payments ADD COLUMN currency TEXT NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN conflicts INTEGER NOT NULL DEFAULT 0;

-- The paying attempt of a PAID order paid before attempts were recorded.
INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
SELECT o.id, o.payment_id, 'SUCCEEDED', o.amount_cents, o.currency, o.paid_at, o.paid_at
FROM orders o
WHERE o.status = 'PAID' AND o.payment_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.payment_id = o.payment_id);

-- Attempts earlier versions left open on finished orders: superseded by the
-- one that paid, or closed unpaid by the gateway check that cancelled.
UPDATE payments SET status = 'SUPERSEDED'
WHERE status = 'PENDING' AND order_id IN (SELECT id FROM orders WHERE status = 'PAID');
UPDATE payments SET status = 'FAILED'
WHERE status = 'PENDING' AND order_id IN (SELECT id FROM orders WHERE status = 'CANCELLED');

-- One payment id, one order. A database where earlier versions let two
-- orders share one refuses this index: `lapse audit` names them
-- (payment_id_on_one_order); settle them, then migrate again.
DROP INDEX payments_payment_id;
CREATE UNIQUE INDEX payments_payment_id_unique ON payments (payment_id);
