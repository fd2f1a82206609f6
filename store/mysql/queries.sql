-- Queries of the MySQL/MariaDB driver. Times are DATETIME(3) in UTC. Which
-- of them a transaction runs, and in which order, is store/core's decision;
-- executor methods (orders.go, stock.go) run them.
--
-- Placeholders are positional (`?`), in text order. A placeholder or tuple
-- written right after the marker /*each*/ is repeated once per element of a
-- list (`IN (?, ?, ?)`, `VALUES (?, ?), (?, ?)`): the driver expands the
-- marker into placeholders only, never into values. With one element each
-- query runs as written, so a DBA can EXPLAIN it by filling in one value.
--
-- Every state change is one conditional UPDATE whose affected-row count decides
-- who won (the connection sets CLIENT_FOUND_ROWS, and every guarded UPDATE also
-- bumps version, so matched and changed rows are the same count). MySQL has no
-- UPDATE … RETURNING: a winner reads its row back in the same transaction.

-- name: db_now
-- The database's clock, read once per transaction when no Clock is configured.
SELECT UTC_TIMESTAMP(3);

-- name: get_order
-- Order columns, then one row per item (LEFT JOIN: items in the same round trip).
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM lapse_orders o LEFT JOIN lapse_order_items i ON i.order_id = o.id
WHERE o.id = ?
ORDER BY i.sku;

-- name: lock_order
-- get_order as a locking read: explains an UPDATE that matched nothing with
-- the row as it is now, and holds it so that a retried UPDATE cannot lose again.
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM lapse_orders o LEFT JOIN lapse_order_items i ON i.order_id = o.id
WHERE o.id = ?
ORDER BY i.sku
FOR UPDATE;

-- name: get_orders
-- Params: the order ids. Ids not found are left out.
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM lapse_orders o LEFT JOIN lapse_order_items i ON i.order_id = o.id
WHERE o.id IN (/*each*/?)
ORDER BY o.id, i.sku;

-- name: list_orders
-- Params: status or '' (twice), then the (created_at, id) of the last row of
-- the previous page (created_at twice), then the page size. The page is cut in
-- the derived table, then joined with its items.
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM (SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
             cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
      FROM lapse_orders
      WHERE (? = '' OR status = ?)
        AND (created_at < ? OR (created_at = ? AND id < ?))
      ORDER BY created_at DESC, id DESC
      LIMIT ?) o
LEFT JOIN lapse_order_items i ON i.order_id = o.id
ORDER BY o.created_at DESC, o.id DESC, i.sku;

-- name: idempotency_put
-- Params: key, request hash, order id, now. Written first in a create: a
-- concurrent request with the same key waits here for the first one, then
-- fails with a duplicate key (which does not abort its transaction) and replays.
INSERT INTO lapse_idempotency_keys (idempotency_key, request_hash, order_id, created_at) VALUES (?, ?, ?, ?);

-- name: idempotency_get
-- Param: key.
SELECT request_hash, order_id FROM lapse_idempotency_keys WHERE idempotency_key = ?;

-- name: insert_order
-- Params: id, amount, currency, created_at, expires_at, cancel_after, the
-- remote reservation or ''.
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, reservation_id)
VALUES (?, 'PENDING', ?, ?, ?, ?, ?, NULLIF(?, ''));

-- name: insert_items
-- Params: (order id, sku, qty) per item.
INSERT INTO lapse_order_items (order_id, sku, qty) VALUES /*each*/(?, ?, ?);

-- name: reserve_sku
-- Params: qty, qty, now, sku, qty. No row matched means not enough stock (or
-- no such SKU). A create reserves its items one by one in SKU byte order, so
-- two orders sharing SKUs lock them in the same order.
UPDATE lapse_skus SET available = available - ?, locked = locked + ?, updated_at = ?
WHERE sku = ? AND available >= ?;

-- name: ledger_insert
-- Params: action, now, then the order ids. One ledger row per item; the
-- primary key (order_id, sku, action) refuses a second row of the same action.
-- FORCE INDEX here and below: items are always found by order id, one range
-- per order, even when the statistics of a young table suggest a scan.
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT order_id, sku, ?, qty, ? FROM lapse_order_items FORCE INDEX (PRIMARY)
WHERE order_id IN (/*each*/?);

-- name: lock_skus
-- Params: the SKUs, in byte order. Locks the SKU rows a stock movement
-- touches, in primary-key order, before the set-based UPDATE below (whose
-- join order MySQL chooses). utf8mb4_bin orders by code point, which is
-- UTF-8's byte order, the order a create reserves in, so every transaction
-- takes SKU locks in one order and they queue instead of deadlocking. (Only
-- its PAD SPACE departs from bytes: "a" sorts after "a" followed by a control
-- character. lapse's SKUs are [A-Za-z0-9_.:-].)
SELECT sku FROM lapse_skus WHERE sku IN (/*each*/?) ORDER BY sku FOR UPDATE;

-- name: release_stock
-- Params: the order ids, then now. Locked units of the orders go back to
-- available. STRAIGHT_JOIN: the per-SKU sums first, then one primary-key
-- lookup per SKU, however many SKUs the table holds. FORCE INDEX on skus
-- too: on a small table the optimizer would rather scan it, and a
-- multi-table UPDATE locks every row it scans — SKUs of other orders,
-- outside the byte order lock_skus keeps, which deadlocked with creates.
UPDATE (SELECT sku, SUM(qty) AS qty FROM lapse_order_items FORCE INDEX (PRIMARY)
        WHERE order_id IN (/*each*/?) GROUP BY sku) r
STRAIGHT_JOIN lapse_skus s FORCE INDEX (PRIMARY) ON s.sku = r.sku
SET s.locked = s.locked - r.qty, s.available = s.available + r.qty, s.updated_at = ?;

-- name: commit_stock
-- Params: the order ids, then now. Locked units of the orders become sold.
UPDATE (SELECT sku, SUM(qty) AS qty FROM lapse_order_items FORCE INDEX (PRIMARY)
        WHERE order_id IN (/*each*/?) GROUP BY sku) r
STRAIGHT_JOIN lapse_skus s FORCE INDEX (PRIMARY) ON s.sku = r.sku
SET s.locked = s.locked - r.qty, s.sold = s.sold + r.qty, s.updated_at = ?;

-- name: insert_events
-- Params: (event id, type, order id, payload, now) per event.
INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at) VALUES /*each*/(?, ?, ?, ?, ?);

-- name: start_payment
-- Params: the attempt's payment id (twice), id, id, now. An empty payment id
-- gives "<id>-<n>", n the order's attempts so far + 1.
UPDATE lapse_orders SET status = 'PAYING', version = version + 1,
    payment_id = CASE WHEN ? != '' THEN ?
                      ELSE CONCAT(id, '-', (SELECT COUNT(*) FROM lapse_payments WHERE order_id = ?) + 1) END
WHERE id = ? AND status = 'PENDING' AND expires_at > ?;

-- name: supersede_payment
-- Params: the new payment id, id, the current payment id (twice: '' is an
-- attempt started before attempts had ids, NULL here), now.
UPDATE lapse_orders SET payment_id = ?, version = version + 1
WHERE id = ? AND status = 'PAYING' AND (payment_id = ? OR (payment_id IS NULL AND ? = ''))
  AND expires_at > ?;

-- name: callback_seen
-- Params: callback id, order id, now. Remember a callback; no row inserted
-- means it was applied before. The table has no constraint but its primary
-- key, so IGNORE only skips the duplicate.
INSERT IGNORE INTO lapse_payment_callbacks (callback_id, order_id, seen_at) VALUES (?, ?, ?);

-- name: callback_purge
-- Param: forget before (now - store.CallbackMemory).
DELETE FROM lapse_payment_callbacks WHERE seen_at < ? LIMIT 1000;

-- name: mark_paid
-- Params: now, payment id, order id, amount, currency twice ('' for the
-- order's), order id, payment id twice. It pays only what the order asks, and
-- never by an attempt that has ended (a later report of it is a conflict) nor
-- while another attempt is open (the core supersedes it first).
UPDATE lapse_orders SET status = 'PAID', paid_at = ?, payment_id = ?, version = version + 1
WHERE id = ? AND status IN ('PENDING', 'PAYING') AND amount_cents = ? AND (? = '' OR currency = ?)
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = ?
                  AND ((p.payment_id = ? AND p.status IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED'))
                    OR (p.payment_id <> ? AND p.status = 'PENDING')));

-- name: flag_refund
-- Params: the payment to give back (twice), id. The caller decided under the
-- row's lock that it must be given back. When it is the current attempt of a
-- PAYING order, that attempt has ended: the order is PENDING again, as after
-- a failure, so its timer cancels it or a new attempt pays it. (MySQL
-- assigns left to right: payment_attempts reads status before it changes.)
UPDATE lapse_orders SET refund_required = TRUE, version = version + 1,
    payment_attempts = payment_attempts + IF(status = 'PAYING' AND payment_id = ?, 1, 0),
    status = IF(status = 'PAYING' AND payment_id = ?, 'PENDING', status)
WHERE id = ?;

-- name: fail_payment
-- Params: id, the failed attempt's payment id: only the current attempt moves
-- the order (an order PAYING since before attempts had ids has none).
UPDATE lapse_orders SET status = 'PENDING', payment_attempts = payment_attempts + 1, version = version + 1
WHERE id = ? AND status = 'PAYING' AND (payment_id = ? OR payment_id IS NULL);

-- name: get_payments
-- Param: order id. Oldest first.
SELECT payment_id, status, amount_cents, currency, conflicts, created_at, updated_at FROM lapse_payments
WHERE order_id = ? ORDER BY created_at, payment_id;

-- name: insert_payment
-- Params: order id, payment id, status, amount, created_at (twice: it is the
-- updated_at too). A duplicate key is a payment id an earlier attempt of the
-- order had.
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: save_payment
-- Params: status, amount, currency, now, order id, payment id. An attempt's
-- outcome, on an attempt recorded and not ended (the core never moves an
-- ended one); no row matched: the attempt is new (insert_payment). Not an
-- upsert: MySQL's ON DUPLICATE KEY would also take the row of another order
-- that has this payment id (payments_payment_id_unique).
UPDATE lapse_payments SET status = ?, amount_cents = ?, currency = ?, updated_at = ?
WHERE order_id = ? AND payment_id = ? AND status NOT IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED');

-- name: note_conflict
-- Params: order id, payment id: a report that disagreed with how the attempt ended.
UPDATE lapse_payments SET conflicts = conflicts + 1 WHERE order_id = ? AND payment_id = ?;

-- name: end_payment
-- Params: the status it ends in, now, order id, payment id: only an open
-- attempt (PENDING, SUPERSEDED) ends.
UPDATE lapse_payments SET status = ?, updated_at = ?
WHERE order_id = ? AND payment_id = ? AND status IN ('PENDING', 'SUPERSEDED');

-- name: owe_back
-- Params: now, order id, payment id: the attempt that paid an order its
-- owner (the order service) answered cancelled owes the money back.
UPDATE lapse_payments SET status = 'REFUND_REQUIRED', updated_at = ?
WHERE order_id = ? AND payment_id = ? AND status = 'SUCCEEDED';

-- name: extend_order
-- Params: the new expires_at (twice), id, now. cancel_after moves with
-- expires_at, keeping the order's grace. It is assigned first: MySQL
-- evaluates a single-table UPDATE's assignments left to right, each seeing
-- the ones before, so after expires_at it would read the new value. Only a
-- PENDING order whose payment window is still open moves: once it has
-- closed, the timer may be cancelling the order.
UPDATE lapse_orders SET cancel_after = TIMESTAMPADD(MICROSECOND, TIMESTAMPDIFF(MICROSECOND, expires_at, cancel_after), ?),
    expires_at = ?, version = version + 1
WHERE id = ? AND status = 'PENDING' AND expires_at > ?;

-- name: buyer_cancel
-- Params: now, id.
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = ?, cancel_reason = 'buyer', version = version + 1
WHERE id = ? AND status = 'PENDING';

-- name: lock_due
-- Timer batch, step 1. Params: the ids (sorted), now, anytime (1: the
-- deadline does not bind, an operator's cancel), confirmed, skip attempted,
-- confirmed; confirmed is true (1) when the gateway confirmed the trades closed
-- (PAYING and attempted orders are cancelled too), skip attempted true to leave
-- PENDING orders with a failed payment attempt alone. Locks exactly the orders
-- the batch will cancel (READ COMMITTED releases the rows that do not match at once).
SELECT id FROM lapse_orders
WHERE id IN (/*each*/?) AND (cancel_after <= ? OR ? = 1)
  AND (status = 'PENDING' OR (? = 1 AND status = 'PAYING'))
  AND (? = 0 OR ? = 1 OR payment_attempts = 0)
ORDER BY id
FOR UPDATE;

-- name: claim_due
-- Claim mode, step 1: the candidates, read without a lock. Params: due by
-- (now - lag, never after now), true (1) to leave attempted orders alone,
-- now, the batch size. A range scan of orders_status_cancel_after, earliest
-- first. An order whose OnCancelled failed is left alone until its record's
-- next_at (a primary-key probe of lapse_hook_failures per row scanned).
--
-- Not FOR UPDATE: a locking scan of the secondary index takes its records
-- before the rows' primary keys, the reverse of every UPDATE of an order
-- (primary key, then the index entry its new status moves), and InnoDB keeps
-- the index record locks of rows SKIP LOCKED then passes over. A shop's
-- transaction paying an order (its row locked, the index entry next) and a
-- claim (the entry locked, the row next) then deadlock (issue 24's 1,000
-- pay/cancel pairs found it under load). claim_lock takes the rows by
-- primary key instead.
SELECT id FROM lapse_orders o
WHERE status = 'PENDING' AND cancel_after <= ? AND (? = 0 OR payment_attempts = 0)
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f
                  WHERE f.order_id = o.id AND f.event = 'cancelled' AND f.next_at > ?)
ORDER BY cancel_after
LIMIT ?;

-- name: claim_lock
-- Claim mode, step 2: lock the candidates by primary key, in id order (the
-- lock order of every batch), skipping rows another transaction holds (a
-- concurrent claimer, a payment), and repeat the guards against the rows as
-- they are now. Params: the ids, due by, skip attempted. Then cancel_due, as
-- for a batch.
SELECT id FROM lapse_orders FORCE INDEX (PRIMARY)
WHERE id IN (/*each*/?) AND status = 'PENDING' AND cancel_after <= ? AND (? = 0 OR payment_attempts = 0)
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: cancel_due
-- Step 2: the transition itself, for exactly the locked orders. Params: now,
-- the cancel_reason, the ids, now, anytime, confirmed (both false for a
-- claim). It repeats the status and time guards, so it is correct on its
-- own; its affected-row count must equal the number of locked orders, which
-- are then read back (get_orders).
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = ?, cancel_reason = ?, version = version + 1
WHERE id IN (/*each*/?) AND (cancel_after <= ? OR ? = 1)
  AND (status = 'PENDING' OR (? = 1 AND status = 'PAYING'));

-- name: payment_checks
-- Params: due by (now - lag), limit. Orders the gateway must be asked about
-- before they can be cancelled: two ranges of orders_status_cancel_after.
SELECT id, cancel_after FROM lapse_orders
WHERE (status = 'PAYING' OR (status = 'PENDING' AND payment_attempts > 0)) AND cancel_after <= ?
ORDER BY cancel_after
LIMIT ?;

-- name: next_deadline
-- Params: 1 to leave out orders with a failed payment attempt, as claim_due
-- does when a gateway checks them (a poller that counted them would wake for
-- an order its claim skips, again and again).
-- An order whose OnCancelled failed is due at its record's next_at if that
-- is later (claim_due leaves it alone until then): the first deadline of the
-- orders without a record, or the earliest of those with one. Params: the
-- same flag twice. (LEAST is NULL if either is: each stands in for the other.)
SELECT LEAST(COALESCE(a.at, b.at), COALESCE(b.at, a.at)) FROM
  (SELECT (SELECT cancel_after FROM lapse_orders o
           WHERE status = 'PENDING' AND (? = 0 OR payment_attempts = 0)
             AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id AND f.event = 'cancelled')
           ORDER BY cancel_after LIMIT 1) AS at) a,
  (SELECT (SELECT MIN(GREATEST(o.cancel_after, f.next_at)) FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
           WHERE f.event = 'cancelled' AND o.status = 'PENDING' AND (? = 0 OR o.payment_attempts = 0)) AS at) b;

-- name: pending_deadlines
-- Params: the (cancel_after, id) to start after (cancel_after twice), the page size.
SELECT id, cancel_after FROM lapse_orders
WHERE status = 'PENDING' AND (cancel_after > ? OR (cancel_after = ? AND id > ?))
ORDER BY cancel_after, id
LIMIT ?;

-- name: count_stuck
-- Param: now.
SELECT COUNT(*) FROM lapse_orders WHERE status = 'PAYING' AND cancel_after <= ?;

-- name: set_stock
-- Params: sku, available, available (the new total), now, then for an
-- existing SKU available (total), available, now.
INSERT INTO lapse_skus (sku, available, total, updated_at) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE total = ? + locked + sold, available = ?, updated_at = ?;

-- name: get_sku
-- Param: sku.
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku = ?;

-- name: unpublished_events
-- Param: limit.
SELECT seq, event_id, type, order_id, payload, created_at FROM lapse_outbox
WHERE published_at IS NULL ORDER BY seq LIMIT ?;

-- name: mark_published
-- Params: now, the sequence numbers. Events whose every sink has delivered
-- them (no delivery row left).
UPDATE lapse_outbox o SET o.published_at = ?
WHERE o.seq IN (/*each*/?) AND o.published_at IS NULL AND o.fanned_out
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = o.seq);

-- name: register_sinks
-- Params: now, the names.
INSERT IGNORE INTO lapse_outbox_sinks (registered_at, name) VALUES /*each*/(?, ?);

-- name: lock_fanout
SELECT id FROM lapse_outbox_fanout FOR UPDATE SKIP LOCKED;

-- name: unfanned
-- Param: limit. Read holding outbox_fanout's row (lock_fanout).
SELECT seq FROM lapse_outbox WHERE NOT fanned_out ORDER BY seq LIMIT ?;

-- name: fan_out_deliveries
-- Params: now, the sequence numbers.
INSERT IGNORE INTO lapse_outbox_deliveries (sink, seq, order_id, next_at)
SELECT s.name, o.seq, o.order_id, ? FROM lapse_outbox o CROSS JOIN lapse_outbox_sinks s
WHERE o.seq IN (/*each*/?);

-- name: fan_out_mark
-- Params: the sequence numbers.
UPDATE lapse_outbox SET fanned_out = TRUE WHERE seq IN (/*each*/?);

-- name: claim_select
-- Params: sink, now, limit. The candidates: the first pending seq of each
-- order, rows other claims hold skipped. Only candidates: the NOT EXISTS is
-- a plain read (FOR UPDATE does not reach into the subquery) on a snapshot
-- InnoDB takes at its first evaluation, while the locking read of d sees
-- rows committed after it. A fan-out committing two events of one order
-- during this statement has both read here and neither found behind the
-- other; claim_behind then drops the second (TestConformance's "claims
-- racing fan-outs").
SELECT d.seq FROM lapse_outbox_deliveries d
WHERE d.sink = ? AND NOT d.dead AND d.next_at <= ?
  AND NOT EXISTS (
      SELECT 1 FROM lapse_outbox_deliveries p
      WHERE p.sink = d.sink AND p.order_id = d.order_id AND p.seq < d.seq)
ORDER BY d.seq LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: claim_behind
-- Params: sink, the candidates of claim_select, which this transaction
-- holds. Those that are not their order's head: a statement of its own, so
-- a snapshot taken after the candidates were read. A lower seq of the same
-- order is fanned out no later than a higher one (the fan-out takes events
-- in seq order, and one order's events are committed one after the other),
-- so any lower delivery committed when a candidate was read is seen here
-- unless it was delivered since.
SELECT d.seq FROM lapse_outbox_deliveries d
WHERE d.sink = ? AND d.seq IN (/*each*/?)
  AND EXISTS (
      SELECT 1 FROM lapse_outbox_deliveries p
      WHERE p.sink = d.sink AND p.order_id = d.order_id AND p.seq < d.seq);

-- name: claim_lease
-- Params: lease until, sink, the sequence numbers.
UPDATE lapse_outbox_deliveries SET next_at = ?, attempts = attempts + 1
WHERE sink = ? AND seq IN (/*each*/?);

-- name: claimed
-- Params: sink, the sequence numbers.
SELECT d.seq, d.attempts, d.refusals, d.first_refused_at,
       o.event_id, o.type, o.order_id, o.payload, o.created_at
FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
WHERE d.sink = ? AND d.seq IN (/*each*/?) ORDER BY d.seq;

-- name: delete_deliveries
-- Params: sink, (seq, attempts) pairs.
DELETE FROM lapse_outbox_deliveries WHERE sink = ? AND (seq, attempts) IN (/*each*/(?, ?));

-- name: fail_delivery
-- Params: next_at, error, refused, refused, now, dead, dead, now, sink, seq, attempts.
UPDATE lapse_outbox_deliveries SET
    next_at = ?, last_error = ?,
    refusals = refusals + ?,
    first_refused_at = CASE WHEN ? THEN COALESCE(first_refused_at, ?) ELSE first_refused_at END,
    dead = ?, dead_at = CASE WHEN ? THEN ? END
WHERE sink = ? AND seq = ? AND attempts = ?;

-- name: list_deliveries
-- Params: sink, sink ('' for all), dead only, after seq, limit.
SELECT d.sink, d.dead, d.attempts, d.refusals, d.next_at, COALESCE(d.last_error, ''), d.dead_at,
       o.seq, o.event_id, o.type, o.order_id, o.payload, o.created_at
FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
WHERE (? = '' OR d.sink = ?) AND (NOT ? OR d.dead) AND d.seq > ?
ORDER BY d.seq, d.sink LIMIT ?;

-- name: retry_dead
-- Params: now, sink, sink ('' for all).
UPDATE lapse_outbox_deliveries SET dead = FALSE, dead_at = NULL, next_at = ?,
    refusals = 0, first_refused_at = NULL
WHERE dead AND (? = '' OR sink = ?);

-- name: retry_events
-- Params: now, sink, sink ('' for all), the event ids.
UPDATE lapse_outbox_deliveries SET dead = FALSE, dead_at = NULL, next_at = ?,
    refusals = 0, first_refused_at = NULL
WHERE dead AND (? = '' OR sink = ?)
  AND seq IN (SELECT seq FROM lapse_outbox WHERE event_id IN (/*each*/?));

-- name: purge_select
-- Params: dead before, sink, sink ('' for all).
SELECT sink, seq FROM lapse_outbox_deliveries WHERE dead AND dead_at < ? AND (? = '' OR sink = ?)
FOR UPDATE;

-- name: purge_delete
-- Params: (sink, seq) pairs.
DELETE FROM lapse_outbox_deliveries WHERE (sink, seq) IN (/*each*/(?, ?));

-- name: mark_drained
-- Params: now, limit.
UPDATE lapse_outbox SET published_at = ?
WHERE published_at IS NULL AND fanned_out
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = lapse_outbox.seq)
ORDER BY seq LIMIT ?;

-- name: delete_outbox
-- Params: published before, limit.
DELETE FROM lapse_outbox WHERE published_at < ? ORDER BY published_at LIMIT ?;

-- name: forget_sink
DELETE FROM lapse_outbox_sinks WHERE name = ?;

-- name: forget_sink_deliveries
DELETE FROM lapse_outbox_deliveries WHERE sink = ?;

-- name: outbox_unfanned
SELECT count(*), min(created_at) FROM lapse_outbox WHERE NOT fanned_out;

-- name: outbox_sink_stats
SELECT s.name,
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND NOT d.dead),
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND d.dead),
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND NOT d.dead AND EXISTS (
        SELECT 1 FROM lapse_outbox_deliveries x WHERE x.sink = d.sink AND x.order_id = d.order_id AND x.dead AND x.seq < d.seq)),
    (SELECT o.created_at FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
     WHERE d.sink = s.name AND NOT d.dead ORDER BY d.seq LIMIT 1)
FROM lapse_outbox_sinks s ORDER BY s.name;

-- name: audit_params
-- Params: now, the allowed lag in milliseconds. Session variables the queries
-- of audit.sql read, set before each check in the audit's transaction.
SET @now = ?, @lag_ms = ?;

-- name: savepoint
-- Around each create of a group committed together (store/core's group.go;
-- not run while Open sets core.Config.CreateGroup to 1).
SAVEPOINT create_order;

-- name: savepoint_rollback
ROLLBACK TO SAVEPOINT create_order;

-- name: savepoint_release
RELEASE SAVEPOINT create_order;

-- name: migrate_lock
-- A named lock per database, held by Migrate's connection: migrations from
-- several processes run one after the other. Param: seconds to wait.
-- Returns 1 when taken, 0 on timeout.
SELECT GET_LOCK(CONCAT('lapse_migrate_', SHA1(DATABASE())), ?);

-- name: migrate_unlock
SELECT RELEASE_LOCK(CONCAT('lapse_migrate_', SHA1(DATABASE())));

-- name: migrate_state
-- Whether the database holds lapse_schema_migrations (lapse's since version
-- 9), and whether it may hold the schema of an earlier lapse instead:
-- lapse's own schema_migrations (a table with its columns; legacy_init then
-- checks that it recorded lapse's 001_init) beside lapse's orders,
-- order_items and stock_ledger. A schema_migrations of anyone else
-- (golang-migrate's has version and dirty) or an `orders` of the shop's is
-- not that, and is left alone.
SELECT EXISTS (SELECT 1 FROM information_schema.tables
               WHERE table_schema = DATABASE() AND table_name = 'lapse_schema_migrations'),
       EXISTS (SELECT 1 FROM information_schema.tables
               WHERE table_schema = DATABASE() AND table_name = 'schema_migrations' AND table_type = 'BASE TABLE')
       AND (SELECT COUNT(*) FROM information_schema.columns
            WHERE table_schema = DATABASE() AND (table_name, column_name) IN (
                ('schema_migrations', 'version'), ('schema_migrations', 'name'), ('schema_migrations', 'applied_at'),
                ('orders', 'cancel_after'), ('orders', 'payment_attempts'),
                ('stock_ledger', 'action'), ('order_items', 'qty'))) = 7;

-- name: legacy_init
SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1 AND name = 'init');

-- name: legacy_list
SELECT version FROM schema_migrations;

-- name: legacy_insert
-- The migration table of lapse before version 9 (Migrate's renameLegacy).
INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(3));

-- name: fk_checks_off
SET SESSION foreign_key_checks = 0;

-- name: fk_checks_on
SET SESSION foreign_key_checks = 1;

-- name: schema_migrations_create
CREATE TABLE IF NOT EXISTS lapse_schema_migrations (
    version    INT          NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: schema_migrations_list
SELECT version FROM lapse_schema_migrations;

-- name: schema_migrations_insert
-- Params: version, name. applied_at is the server's clock.
INSERT INTO lapse_schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(3));

-- Stock tasks (store.Tasks; migration 005). The columns every task query
-- returns: id, order_id, action, reservation_id, items, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, result, last_error.

-- name: insert_tasks
-- Params: (id, order id, action, reservation id, items, due, now, now) per
-- task, PENDING. The unique key (reservation_id, action) refuses a second
-- task of an action (core.ErrMovedTwice).
INSERT INTO lapse_stock_tasks (id, order_id, action, reservation_id, items, next_at, since, created_at, last_error)
VALUES /*each*/(?, ?, ?, ?, ?, ?, ?, ?, '');

-- name: claim_tasks_select
-- Params: now, limit. Walks stock_tasks_due from the earliest due row,
-- skipping rows other claims hold.
SELECT id FROM lapse_stock_tasks FORCE INDEX (stock_tasks_due)
WHERE status = 'PENDING' AND next_at <= ?
ORDER BY next_at LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: claim_tasks_lease
-- Params: lease until, the ids.
UPDATE lapse_stock_tasks SET next_at = ?, attempts = attempts + 1 WHERE id IN (/*each*/?);

-- name: tasks_by_id
-- Params: the ids.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks WHERE id IN (/*each*/?) ORDER BY next_at, id;

-- name: settle_task
-- Params: status, next_at, result, error, status, status, now, status, now,
-- id, attempts (see the PostgreSQL driver).
UPDATE lapse_stock_tasks SET status = ?, next_at = ?, result = ?, last_error = ?,
    failures = failures + CASE WHEN ? = 'DONE' THEN 0 ELSE 1 END,
    done_at = CASE WHEN ? = 'DONE' THEN ? END,
    dead_at = CASE WHEN ? = 'DEAD' THEN ? END
WHERE id = ? AND attempts = ? AND status = 'PENDING';

-- name: task_refs
-- Every task, DONE ones too, in id order: what names it, for reconciling
-- with an inventory's ledger. ? the cursor (ids after it), ? limit.
SELECT id, order_id, action, reservation_id
FROM lapse_stock_tasks
WHERE id > ?
ORDER BY id
LIMIT ?;

-- name: list_tasks
-- Params: order id (twice), dead-only, cursor, limit. Without an order id:
-- the tasks not DONE (or DEAD ones only), through stock_tasks_open.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks
WHERE (CASE WHEN ? <> '' THEN order_id = ?
            WHEN ? THEN status = 'DEAD'
            ELSE status IN ('PENDING', 'DEAD') END)
  AND id > ?
ORDER BY id LIMIT ?;

-- name: retry_dead_tasks
-- Params: now (twice).
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD';

-- name: retry_tasks
-- Params: now (twice), the ids.
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND id IN (/*each*/?);

-- name: task_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_stock_tasks WHERE status IN ('PENDING', 'DEAD');

-- name: lock_task
-- Params: reservation id, action.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks WHERE reservation_id = ? AND action = ?
FOR UPDATE;

-- name: lease_task
-- Params: the lease's end, id (read back with tasks_by_id).
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = ?, attempts = attempts + 1, dead_at = NULL
WHERE id = ?;

-- name: orders_of_payment
-- Params: payment id. The orders with an attempt of that id, at most two.
SELECT order_id FROM lapse_payments WHERE payment_id = ? ORDER BY order_id LIMIT 2;

-- The dashboard's reads (store.Dashboard), each bounded by an index range
-- whose size does not grow with the table (see the PostgreSQL driver's
-- queries.sql for each one's cost at 10 M orders). A minute is
-- TIMESTAMPDIFF from the epoch: plain arithmetic on DATETIME, no time zone.

-- name: count_status
-- Params: status, the cap. At most cap entries of (status, cancel_after).
SELECT COUNT(*) FROM (SELECT 1 FROM lapse_orders WHERE status = ? LIMIT ?) capped;

-- name: hook_failure_note
-- One more failure of a hook. Params: order id, event, error, now (the
-- first failure makes the record; next_at is set right after by
-- hook_failure_retry). Then hook_failure_read.
INSERT INTO lapse_hook_failures (order_id, event, attempts, last_error, first_failed_at, last_failed_at, next_at)
VALUES (?, ?, 1, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE attempts = attempts + 1, last_error = VALUES(last_error), last_failed_at = VALUES(last_failed_at);

-- name: hook_failure_read
-- Params: order id, event. In the transaction that wrote it.
SELECT attempts, first_failed_at FROM lapse_hook_failures WHERE order_id = ? AND event = ?;

-- name: hook_failure_retry
-- Params: next_at, order id, event.
UPDATE lapse_hook_failures SET next_at = ? WHERE order_id = ? AND event = ?;

-- name: hook_failures_clear
-- The records of orders whose hook held, in the transaction that made
-- their transition. Params: the ids.
DELETE FROM lapse_hook_failures WHERE order_id IN (/*each*/?);

-- name: hook_failures
-- The records of orders still PENDING, oldest first failure first. Param: the limit.
SELECT f.order_id, f.event, f.attempts, f.last_error, f.first_failed_at, f.last_failed_at, f.next_at
FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
WHERE o.status = 'PENDING'
ORDER BY f.first_failed_at, f.order_id
LIMIT ?;

-- name: count_hook_failing
-- Param: the cap.
SELECT COUNT(*) FROM (SELECT 1 FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
                      WHERE o.status = 'PENDING' LIMIT ?) capped;

-- name: count_refund_required
-- Param: the cap. The refund_required = 1 prefix of (refund_required, id).
SELECT COUNT(*) FROM (SELECT 1 FROM lapse_orders WHERE refund_required = 1 LIMIT ?) capped;

-- name: due_per_minute
-- Params: from, to.
SELECT TIMESTAMPDIFF(MINUTE, '1970-01-01', cancel_after) * 60 AS m, COUNT(*)
FROM lapse_orders WHERE status = 'PENDING' AND cancel_after >= ? AND cancel_after < ?
GROUP BY m ORDER BY m;

-- name: cancelled_per_minute
-- Params: from, to.
SELECT TIMESTAMPDIFF(MINUTE, '1970-01-01', cancelled_at) * 60 AS m, COUNT(*)
FROM lapse_orders WHERE cancelled_at >= ? AND cancelled_at < ?
GROUP BY m ORDER BY m;

-- name: paid_per_minute
-- Params: from, to.
SELECT TIMESTAMPDIFF(MINUTE, '1970-01-01', paid_at) * 60 AS m, COUNT(*)
FROM lapse_orders WHERE paid_at >= ? AND paid_at < ?
GROUP BY m ORDER BY m;

-- name: refunds_per_minute
-- Params: from, to. Payment attempts owing money back (REFUND_REQUIRED, by
-- the minute of the flag) or that gave it back (REFUNDED, by the minute of
-- their refund, which is when the attempt last changed): two ranges of
-- payments_refund_required (status, updated_at).
SELECT TIMESTAMPDIFF(MINUTE, '1970-01-01', updated_at) * 60 AS m, COUNT(*)
FROM lapse_payments WHERE status IN ('REFUND_REQUIRED', 'REFUNDED') AND updated_at >= ? AND updated_at < ?
GROUP BY m ORDER BY m;

-- name: find_orders
-- Params: status or '' (twice), created_at >= from, then the bound or the
-- cursor (created_at twice, id), then the page size: orders_created walked
-- backwards, the page cut in the derived table, then joined with its items.
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM (SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
             cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
      FROM lapse_orders
      WHERE (? = '' OR status = ?) AND created_at >= ?
        AND (created_at < ? OR (created_at = ? AND id < ?))
      ORDER BY created_at DESC, id DESC
      LIMIT ?) o
LEFT JOIN lapse_order_items i ON i.order_id = o.id
ORDER BY o.created_at DESC, o.id DESC, i.sku;

-- name: find_orders_by_prefix
-- Params: prefix, its upper bound, the cursor (last id), the prefix again,
-- status or '' (twice), created_at from and before, the page size. A range
-- of the primary key (utf8mb4_bin: byte order).
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM (SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
             cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
      FROM lapse_orders
      WHERE id >= ? AND id < ? AND id > ? AND LEFT(id, CHAR_LENGTH(?)) = ?
        AND (? = '' OR status = ?) AND created_at >= ? AND created_at < ?
      ORDER BY id
      LIMIT ?) o
LEFT JOIN lapse_order_items i ON i.order_id = o.id
ORDER BY o.id, i.sku;

-- name: refund_orders
-- Params: the cursor (last id), the page size: the refund_required = 1
-- prefix of (refund_required, id).
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM (SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
             cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
      FROM lapse_orders WHERE refund_required = 1 AND id > ?
      ORDER BY id LIMIT ?) o
LEFT JOIN lapse_order_items i ON i.order_id = o.id
ORDER BY o.id, i.sku;

-- name: find_past_deadline
-- Params: status, now, the cursor (cancel_after twice, then cancel_after
-- and id), the page size: a range of (status, cancel_after) before now,
-- from the cursor (ids utf8mb4_bin: byte order).
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id,
       i.sku, i.qty
FROM (SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
             cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
      FROM lapse_orders
      WHERE status = ? AND cancel_after < ? AND cancel_after >= ?
        AND (cancel_after > ? OR (cancel_after = ? AND id > ?))
      ORDER BY cancel_after, id
      LIMIT ?) o
LEFT JOIN lapse_order_items i ON i.order_id = o.id
ORDER BY o.cancel_after, o.id, i.sku;

-- name: order_events
-- Param: order id (the outbox_order index).
SELECT seq, event_id, type, order_id, payload, created_at FROM lapse_outbox
WHERE order_id = ? ORDER BY seq;

-- name: list_skus
-- Params: after, limit.
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku > ? ORDER BY sku LIMIT ?;

-- name: first_migration
-- When the lowest version recorded was applied: the store's identity (store.Identified).
SELECT applied_at FROM lapse_schema_migrations ORDER BY version LIMIT 1;

-- Order-service mode (store/core/commands.go, docs/order-service.md). The
-- columns every command query returns: id, order_id, cancel_after, status,
-- attempts, failures, next_at, since, created_at, done_at, dead_at, result,
-- last_error.

-- name: command_due
-- cancel_due's twin, step 2 after lock_due (a batch) or claim_due (claim
-- mode): exactly the locked orders move to CANCELLING, their cancel
-- commanded of the order service. Params: the ids, now, confirmed (false for
-- a claim). The same guards as cancel_due; its affected-row count must equal
-- the number of locked orders, which are then read back (get_orders).
UPDATE lapse_orders SET status = 'CANCELLING', version = version + 1
WHERE id IN (/*each*/?) AND cancel_after <= ?
  AND (status = 'PENDING' OR (? = 1 AND status = 'PAYING'));

-- name: insert_commands
-- Params: (id, order id, cancel_after, now, now, now) per command: PENDING,
-- due now. The same order and deadline again (a retried transaction) keeps
-- the row it has: the no-op update, not INSERT IGNORE, which would also let
-- an over-long value through truncated.
INSERT INTO lapse_order_commands (id, order_id, cancel_after, next_at, since, created_at, last_error)
VALUES /*each*/(?, ?, ?, ?, ?, ?, '')
ON DUPLICATE KEY UPDATE id = id;

-- name: claim_commands_select
-- Params: now, limit. claim_tasks_select's twin: walks order_commands_due
-- (status, next_at) from the earliest due row, skipping rows other claims hold.
SELECT id FROM lapse_order_commands FORCE INDEX (order_commands_due)
WHERE status = 'PENDING' AND next_at <= ?
ORDER BY next_at LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: claim_commands_lease
-- Params: lease until, the ids.
UPDATE lapse_order_commands SET next_at = ?, attempts = attempts + 1 WHERE id IN (/*each*/?);

-- name: commands_by_id
-- Params: the ids.
SELECT id, order_id, cancel_after, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_order_commands WHERE id IN (/*each*/?) ORDER BY next_at, id;

-- name: settle_command
-- Params: status, next_at, result, error, 1 when it counts as a failure,
-- status, now, status, now, id, the claim's attempts (see the PostgreSQL
-- driver).
UPDATE lapse_order_commands SET status = ?, next_at = ?, result = ?, last_error = ?,
    failures = failures + ?,
    done_at = CASE WHEN ? = 'DONE' THEN ? END,
    dead_at = CASE WHEN ? = 'DEAD' THEN ? END
WHERE id = ? AND attempts = ? AND status = 'PENDING';

-- name: resolve_commanded
-- The transition an answer decides. Params: the status it becomes, now,
-- the status (twice), now, the status, id, the status. CANCELLED and PAID
-- come from CANCELLING or PAYING (paying was answered before); PAYING from
-- CANCELLING only. (MySQL assigns left to right: status goes last, so that
-- no assignment could read the new one.)
UPDATE lapse_orders SET version = version + 1,
    cancelled_at = IF(? = 'CANCELLED', ?, cancelled_at),
    cancel_reason = IF(? = 'CANCELLED', 'timeout', cancel_reason),
    paid_at = IF(? = 'PAID', ?, paid_at),
    status = ?
WHERE id = ? AND (status = 'CANCELLING' OR (status = 'PAYING' AND ? <> 'PAYING'));

-- name: list_commands
-- Params: order id (twice), dead-only, cursor, limit. list_tasks's twin:
-- without an order id, the commands not DONE (or DEAD ones only), through
-- order_commands_open.
SELECT id, order_id, cancel_after, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_order_commands
WHERE (CASE WHEN ? <> '' THEN order_id = ?
            WHEN ? THEN status = 'DEAD'
            ELSE status IN ('PENDING', 'DEAD') END)
  AND id > ?
ORDER BY id LIMIT ?;

-- name: retry_dead_commands
-- Params: now (twice).
UPDATE lapse_order_commands SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD';

-- name: retry_commands
-- Params: now (twice), the ids.
UPDATE lapse_order_commands SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND id IN (/*each*/?);

-- name: purge_dead_commands
DELETE FROM lapse_order_commands WHERE status = 'DEAD';

-- name: purge_commands
-- Params: the ids.
DELETE FROM lapse_order_commands WHERE status = 'DEAD' AND id IN (/*each*/?);

-- name: command_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_order_commands WHERE status IN ('PENDING', 'DEAD');

-- Refunds (store.Refunds; migration 012). The columns every refund query
-- returns: payment_id, order_id, amount_cents, currency, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, last_error,
-- refund_id, manual, note, actor.

-- name: insert_refund
-- Params: payment id, order id, amount, currency, now (three times). A
-- refund the payment has already keeps its row: the no-op update, as
-- insert_commands does.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, next_at, since, created_at, last_error, note)
VALUES (?, ?, ?, ?, ?, ?, ?, '', '')
ON DUPLICATE KEY UPDATE payment_id = payment_id;

-- name: claim_refunds_select
-- Params: now, limit. claim_tasks_select's twin: walks refunds_due
-- (status, next_at) from the earliest due row, skipping rows other claims hold.
SELECT payment_id FROM lapse_refunds FORCE INDEX (refunds_due)
WHERE status = 'PENDING' AND next_at <= ?
ORDER BY next_at LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: claim_refunds_lease
-- Params: lease until, the payment ids.
UPDATE lapse_refunds SET next_at = ?, attempts = attempts + 1 WHERE payment_id IN (/*each*/?);

-- name: refunds_by_id
-- Params: the payment ids.
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds WHERE payment_id IN (/*each*/?) ORDER BY next_at, payment_id;

-- name: settle_refund
-- Params: status, next_at, error, status, refund id, status, status, now,
-- status, now, payment id, the claim's attempts. Anything but DONE counts
-- a failure.
UPDATE lapse_refunds SET status = ?, next_at = ?, last_error = ?,
    refund_id = IF(? = 'DONE', ?, refund_id),
    failures = failures + IF(? = 'DONE', 0, 1),
    done_at = CASE WHEN ? = 'DONE' THEN ? END,
    dead_at = CASE WHEN ? = 'DEAD' THEN ? END
WHERE payment_id = ? AND attempts = ? AND status = 'PENDING';

-- name: record_refunded
-- An operator's refund. Params: payment id, order id, amount, currency, now
-- (four times), refund id, manual, note, actor. The row is written DONE, or
-- becomes DONE whatever its status.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at,
                           done_at, last_error, refund_id, manual, note, actor)
VALUES (?, ?, ?, ?, 'DONE', ?, ?, ?, ?, '', ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE status = 'DONE', done_at = VALUES(done_at), dead_at = NULL, next_at = VALUES(next_at),
    refund_id = VALUES(refund_id), manual = VALUES(manual), note = VALUES(note), actor = VALUES(actor);

-- name: refund_payment
-- Params: now, order id, payment id: money owed back was given back.
UPDATE lapse_payments SET status = 'REFUNDED', updated_at = ?
WHERE order_id = ? AND payment_id = ? AND status = 'REFUND_REQUIRED';

-- name: clear_refund_required
-- Params: id (twice): once no attempt of the order owes money.
UPDATE lapse_orders SET refund_required = FALSE, version = version + 1
WHERE id = ? AND refund_required
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = ? AND p.status = 'REFUND_REQUIRED');

-- name: get_refund
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds WHERE payment_id = ?;

-- name: list_refunds
-- Params: order id (twice), dead-only, cursor, limit. list_tasks's twin:
-- without an order id, the refunds not DONE (or DEAD ones only), through
-- refunds_open.
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds
WHERE (CASE WHEN ? <> '' THEN order_id = ?
            WHEN ? THEN status = 'DEAD'
            ELSE status IN ('PENDING', 'DEAD') END)
  AND payment_id > ?
ORDER BY payment_id LIMIT ?;

-- name: retry_dead_refunds
-- Params: now (twice).
UPDATE lapse_refunds SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD';

-- name: retry_refunds
-- Params: now (twice), the payment ids.
UPDATE lapse_refunds SET status = 'PENDING', next_at = ?, since = ?, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND payment_id IN (/*each*/?);

-- name: refund_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_refunds WHERE status IN ('PENDING', 'DEAD');

-- Retention (store/core/retention.go): finished orders deleted with their
-- rows, a batch per transaction.

-- name: lock_retention
SELECT id FROM lapse_retention_turn FOR UPDATE SKIP LOCKED;

-- name: lock_finished_paid
-- Params: before, limit. Finished orders (store.Retention) paid before the
-- time, oldest first (orders_paid_at's walk, past the few old orders kept):
-- nothing owed, no work row not DONE, every event fanned out and no
-- delivery row left (dead ones included), no hook failure. Only the order
-- rows are held (the subqueries are plain reads); rows other transactions
-- hold are skipped, never waited for.
SELECT o.id FROM lapse_orders o
WHERE o.paid_at < ? AND o.status = 'PAID' AND NOT o.refund_required
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (NOT e.fanned_out OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.paid_at
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: lock_finished_cancelled
-- lock_finished_paid's twin for orders cancelled before the first time;
-- one with a payment attempt only when cancelled before the second too (its
-- confirming gateway query is done).
SELECT o.id FROM lapse_orders o
WHERE o.cancelled_at < ? AND o.status = 'CANCELLED' AND NOT o.refund_required
  AND (o.cancelled_at < ? OR NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id))
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (NOT e.fanned_out OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.cancelled_at
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: carry_ledger
-- Params: now, then the order ids. The units of the orders' ledger rows,
-- added per SKU and action to what was carried before; rows written in SKU
-- byte order (the column is utf8mb4_bin).
INSERT INTO lapse_sku_carried (sku, reserved, released, committed, orders, updated_at)
SELECT sku,
       COALESCE(SUM(CASE WHEN action = 'reserve' THEN qty END), 0),
       COALESCE(SUM(CASE WHEN action = 'release' THEN qty END), 0),
       COALESCE(SUM(CASE WHEN action = 'commit' THEN qty END), 0),
       COUNT(DISTINCT order_id), ?
FROM lapse_stock_ledger WHERE order_id IN (/*each*/?)
GROUP BY sku ORDER BY sku
ON DUPLICATE KEY UPDATE reserved = reserved + VALUES(reserved), released = released + VALUES(released),
    committed = committed + VALUES(committed), orders = orders + VALUES(orders), updated_at = VALUES(updated_at);

-- name: retention_delete_order_items
DELETE FROM lapse_order_items WHERE order_id IN (/*each*/?);

-- name: retention_delete_stock_ledger
DELETE FROM lapse_stock_ledger WHERE order_id IN (/*each*/?);

-- name: retention_delete_payments
DELETE FROM lapse_payments WHERE order_id IN (/*each*/?);

-- name: retention_delete_stock_tasks
DELETE FROM lapse_stock_tasks WHERE order_id IN (/*each*/?);

-- name: retention_delete_order_commands
DELETE FROM lapse_order_commands WHERE order_id IN (/*each*/?);

-- name: retention_delete_refunds
DELETE FROM lapse_refunds WHERE order_id IN (/*each*/?);

-- name: retention_delete_hook_failures
DELETE FROM lapse_hook_failures WHERE order_id IN (/*each*/?);

-- name: retention_delete_outbox
DELETE FROM lapse_outbox WHERE order_id IN (/*each*/?);

-- name: retention_delete_idempotency_keys
DELETE FROM lapse_idempotency_keys WHERE order_id IN (/*each*/?);

-- name: retention_delete_orders
DELETE FROM lapse_orders WHERE id IN (/*each*/?);

-- name: retention_done_stock_tasks
-- Params: before, limit. DONE tasks whose order is gone (the audit reads the
-- others: tasks_match_status).
DELETE FROM lapse_stock_tasks
WHERE status = 'DONE' AND done_at < ?
  AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = lapse_stock_tasks.order_id)
LIMIT ?;

-- name: retention_done_order_commands
DELETE FROM lapse_order_commands WHERE status = 'DONE' AND done_at < ? LIMIT ?;

-- name: retention_done_refunds
-- DONE refunds whose order is gone (the audit reads the others:
-- refunds_match_attempts).
DELETE FROM lapse_refunds
WHERE status = 'DONE' AND done_at < ?
  AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = lapse_refunds.order_id)
LIMIT ?;

-- name: oldest_finished
-- Each minimum is the first entry of its index; the earlier of the two is
-- taken in Go (LEAST of a NULL is NULL).
SELECT (SELECT MIN(paid_at) FROM lapse_orders), (SELECT MIN(cancelled_at) FROM lapse_orders);
