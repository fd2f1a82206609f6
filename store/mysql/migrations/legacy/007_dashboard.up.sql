-- The dashboard's counts read index ranges, never the whole orders table (see
-- the PostgreSQL migration of the same name). MySQL has no partial indexes:
-- a NULL cancelled_at or paid_at sorts first and the ranges skip it;
-- refund_required is the prefix of (refund_required, id), and REFUND_REQUIRED
-- payments the prefix of (status, updated_at). One statement per section,
-- each safe to run again (see 001_init.up.sql).

-- name: add_orders_cancelled_at
ALTER TABLE orders ADD KEY orders_cancelled_at (cancelled_at);

-- name: add_orders_paid_at
ALTER TABLE orders ADD KEY orders_paid_at (paid_at);

-- name: add_orders_refund_required
ALTER TABLE orders ADD KEY orders_refund_required (refund_required, id);

-- name: add_payments_refund_required
ALTER TABLE payments ADD KEY payments_refund_required (status, updated_at);
