-- The dashboard's counts read index ranges, never the whole orders table (see
-- the PostgreSQL migration of the same name).
CREATE INDEX orders_cancelled_at ON orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX orders_paid_at ON orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX orders_refund_required ON orders (id) WHERE refund_required <> 0;
CREATE INDEX payments_refund_required ON payments (updated_at) WHERE status = 'REFUND_REQUIRED';
