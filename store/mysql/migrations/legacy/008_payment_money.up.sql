-- Money paths (see the PostgreSQL migration of the same name). One statement
-- per section, each safe to run again (see 001_init.up.sql).

-- name: add_payments_currency
ALTER TABLE payments ADD COLUMN currency VARCHAR(16) NOT NULL DEFAULT '';

-- name: add_payments_conflicts
ALTER TABLE payments ADD COLUMN conflicts INT NOT NULL DEFAULT 0;

-- name: backfill_paying_attempts
-- The paying attempt of a PAID order paid before attempts were recorded.
INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
SELECT o.id, o.payment_id, 'SUCCEEDED', o.amount_cents, o.currency, o.paid_at, o.paid_at
FROM orders o
WHERE o.status = 'PAID' AND o.payment_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.payment_id = o.payment_id);

-- name: supersede_open_on_paid
-- Attempts earlier versions left open on finished orders: superseded by the
-- one that paid, or closed unpaid by the gateway check that cancelled.
UPDATE payments p JOIN orders o ON o.id = p.order_id SET p.status = 'SUPERSEDED'
WHERE p.status = 'PENDING' AND o.status = 'PAID';

-- name: fail_open_on_cancelled
UPDATE payments p JOIN orders o ON o.id = p.order_id SET p.status = 'FAILED'
WHERE p.status = 'PENDING' AND o.status = 'CANCELLED';

-- name: add_payments_payment_id_unique
-- One payment id, one order. A database where earlier versions let two
-- orders share one refuses this key: `lapse audit` names them
-- (payment_id_on_one_order); settle them, then migrate again.
ALTER TABLE payments ADD UNIQUE KEY payments_payment_id_unique (payment_id);

-- name: drop_payments_payment_id
ALTER TABLE payments DROP KEY payments_payment_id;
