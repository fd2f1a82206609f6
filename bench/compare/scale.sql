-- name: pending
-- Both are bulk loads: rows are inserted in id order (random ids inserted
-- in any order split index pages all over), and the caller skips the
-- foreign-key triggers (session_replication_role replica): the rows are
-- consistent by construction.
--
-- $1 how many PENDING orders, $2 an id prefix. Each due a day from now plus
-- its number in milliseconds, one item. Written as lapse's create writes the
-- orders and order_items rows a seed reads (the seed reads orders only).
WITH o AS (
  INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
  SELECT $2 || md5(g::text), 'PENDING', 1000, 'USD', now(),
         now() + interval '1 day' + g * interval '1 millisecond',
         now() + interval '1 day' + g * interval '1 millisecond'
  FROM generate_series(1, $1::bigint) g
  ORDER BY 1
  RETURNING id)
INSERT INTO lapse_order_items (order_id, sku, qty) SELECT id, 'sku-0001', 1 FROM o ORDER BY 1;

-- name: history
-- $1 how many settled orders, $2 an id prefix: a shop's past, half PAID and
-- half CANCELLED over the last 30 days, each with its item and the ledger
-- rows of its reserve and of its commit or release. Ids are random, as
-- UUIDs are, so the indexes hold them in no particular order.
WITH o AS (
  INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after,
                      paid_at, cancelled_at, cancel_reason, payment_id, version)
  SELECT $2 || md5(g::text),
         CASE WHEN g % 2 = 0 THEN 'PAID' ELSE 'CANCELLED' END, 1000, 'USD',
         now() - interval '30 days' + g * (interval '30 days' / $1::bigint),
         now() - interval '30 days' + g * (interval '30 days' / $1::bigint) + interval '15 minutes',
         now() - interval '30 days' + g * (interval '30 days' / $1::bigint) + interval '15 minutes',
         CASE WHEN g % 2 = 0 THEN now() - interval '30 days' + g * (interval '30 days' / $1::bigint) + interval '1 minute' END,
         CASE WHEN g % 2 = 1 THEN now() - interval '30 days' + g * (interval '30 days' / $1::bigint) + interval '15 minutes' END,
         CASE WHEN g % 2 = 1 THEN 'timeout' END,
         CASE WHEN g % 2 = 0 THEN 'pay-' || g END,
         2
  FROM generate_series(1, $1::bigint) g
  ORDER BY 1
  RETURNING id, status, created_at),
i AS (
  INSERT INTO lapse_order_items (order_id, sku, qty)
  SELECT id, 'sku-' || lpad((abs(hashtext(id)) % 1000)::text, 4, '0'), 1 FROM o ORDER BY 1)
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT id, 'sku-' || lpad((abs(hashtext(id)) % 1000)::text, 4, '0'), a, 1, created_at
FROM o, LATERAL (VALUES ('reserve'), (CASE WHEN status = 'PAID' THEN 'commit' ELSE 'release' END)) v(a)
ORDER BY 1, 3;
