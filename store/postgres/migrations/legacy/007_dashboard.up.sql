-- The dashboard's counts (store.Dashboard) read index ranges, never the whole
-- orders table: cancels and payments per minute over the last hour walk
-- orders by cancelled_at and paid_at, the refund_required count and the
-- refunds per minute walk only the flagged rows. The partial indexes hold
-- only the rows they serve (an order pending has neither time; few orders
-- are ever flagged), so a write pays for them only when it sets the column.
--
-- CREATE INDEX (not CONCURRENTLY: migrations run in a transaction) blocks
-- writes to orders while it builds: about a second per million orders here.
CREATE INDEX orders_cancelled_at ON orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX orders_paid_at ON orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX orders_refund_required ON orders (id) WHERE refund_required;
CREATE INDEX payments_refund_required ON payments (updated_at) WHERE status = 'REFUND_REQUIRED';
