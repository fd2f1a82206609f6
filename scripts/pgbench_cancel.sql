-- pgbench script: one batched timeout cancel, shaped like lapse's
-- (store/postgres CancelDue with a batch of timer ids, queries.sql
-- cancel_due, ledger_insert, lock_skus, release_stock, insert_events):
-- 200 orders cancelled by id list in one transaction, their stock released
-- with a ledger row per item, the SKU counters updated, one outbox event
-- per order. Each transaction takes the next 200 order ids of the seed
-- (sequence ceiling_batch), so every batch cancels 200 PENDING orders.
-- Run by scripts/ceiling.sh (which creates the tables) in simple query mode:
-- the ids variable is substituted as a quoted array literal: the list lapse sends.
BEGIN;
SELECT quote_literal(CAST(array_agg('o' || g) AS text)) AS ids
FROM (SELECT nextval('ceiling_batch') * 200 AS lo) AS b, generate_series(b.lo, b.lo + 199) AS g \gset
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = now(), cancel_reason = 'timeout', version = version + 1
WHERE id = ANY (CAST(:ids AS text[])) AND cancel_after <= now() AND status = 'PENDING'
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, cancelled_at, version;
SELECT order_id, sku, qty FROM lapse_order_items WHERE order_id = ANY (CAST(:ids AS text[]));
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT order_id, sku, 'release', qty, now() FROM lapse_order_items WHERE order_id = ANY (CAST(:ids AS text[]));
SELECT sku FROM lapse_skus
WHERE sku = ANY (ARRAY(SELECT DISTINCT sku FROM lapse_order_items WHERE order_id = ANY (CAST(:ids AS text[]))))
ORDER BY sku FOR UPDATE;
UPDATE lapse_skus SET locked = lapse_skus.locked - d.qty, available = lapse_skus.available + d.qty, updated_at = now()
FROM (SELECT sku, sum(qty) AS qty FROM lapse_order_items WHERE order_id = ANY (CAST(:ids AS text[])) GROUP BY sku) AS d
WHERE lapse_skus.sku = d.sku;
INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at)
SELECT gen_random_uuid(), 'order.cancelled', o, json_build_object('id', o, 'status', 'CANCELLED', 'amount_cents', 1000, 'currency', 'USD'), now()
FROM unnest(CAST(:ids AS text[])) AS o;
END;
