-- pgbench script: one order created per transaction, shaped like lapse's
-- (store/postgres CreateOrder: insert_order, reserve_sku, insert_items,
-- then the reserve ledger row and the order.created event): the
-- transaction each lapse timer on the sql backend starts from. The SKU is
-- one of 1000, at random. Run by scripts/ceiling.sh, which creates the
-- tables, in simple query mode.
\set sku random(0, 999)
BEGIN;
SELECT quote_literal('n' || nextval('ceiling_order')) AS id,
       quote_literal(CAST(now() + interval '15 minutes' AS text)) AS deadline \gset
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
VALUES (:id, 'PENDING', 1000, 'USD', now(), :deadline, :deadline);
UPDATE lapse_skus SET available = available - 1, locked = locked + 1, updated_at = now()
WHERE sku = 'sku-' || lpad(CAST(:sku AS text), 4, '0') AND available >= 1;
INSERT INTO lapse_order_items (order_id, sku, qty) VALUES (:id, 'sku-' || lpad(CAST(:sku AS text), 4, '0'), 1);
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT order_id, sku, 'reserve', qty, now() FROM lapse_order_items WHERE order_id = :id;
INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at)
VALUES (gen_random_uuid(), 'order.created', :id, json_build_object('id', :id, 'status', 'PENDING'), now());
END;
