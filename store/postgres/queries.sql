-- Queries of the PostgreSQL driver. Times are timestamptz with millisecond
-- precision; "now" is always a parameter, read once per transaction from the
-- configured clock or, without one, from the database (query db_now). Lists of
-- ids are one array parameter (= ANY($n::text[]), unnest), so every statement
-- is static text whatever the batch size.
--
-- Every change of an order's status is one conditional UPDATE; its RETURNING
-- rows (or their absence) decide who won. A success that cannot pay the order
-- is decided by the core on the row held by lock_order (flag_refund).

-- name: db_now
-- The database's clock, for a store configured without one: every instance
-- then compares deadlines against this one clock.
SELECT date_trunc('milliseconds', clock_timestamp());

-- name: get_orders
-- The orders of the ids in $1 that exist, their items read by get_items in
-- the same round trip. One primary-key lookup per id, written as get_items
-- is (a lateral subquery behind OFFSET 0): "id = ANY($1)" alone is planned
-- from statistics, and before the first ANALYZE a generic plan scans every order.
SELECT o.id, o.status, o.amount_cents, o.currency, o.created_at, o.expires_at, o.cancel_after, o.paid_at,
       o.cancelled_at, o.cancel_reason, o.payment_id, o.refund_required, o.payment_attempts, o.version, o.reservation_id
FROM unnest($1::text[]) AS x (id),
     LATERAL (SELECT * FROM lapse_orders WHERE id = x.id OFFSET 0) AS o;

-- name: lock_order
-- One order, its row held until the transaction ends: when a guarded UPDATE
-- matched nothing, the core reads why from a row no other transaction can
-- change before it decides (or runs the UPDATE again).
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders WHERE id = $1
FOR UPDATE;

-- name: get_items
-- One primary-key lookup per order id. Written as a lateral subquery behind
-- OFFSET 0 (which keeps the planner from flattening it into a join) because
-- "order_id = ANY($1)" alone is planned from statistics: before the first
-- ANALYZE (a new database, autovacuum off or behind) PostgreSQL takes 200
-- ids to match every row and scans the whole table on every batch. Items
-- come in SKU byte order (COLLATE "C", Go's string order), whatever the
-- database's collation: the order the core locks and compares them in.
SELECT i.order_id, i.sku, i.qty
FROM unnest($1::text[]) AS x (id),
     LATERAL (SELECT order_id, sku, qty FROM lapse_order_items WHERE order_id = x.id OFFSET 0) AS i
ORDER BY i.order_id, i.sku COLLATE "C";

-- name: list_orders
-- $1 status or '', ($2, $3) the (created_at, id) of the last row of the
-- previous page ('infinity' for the first).
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE ($1::text = '' OR status = $1::text) AND (created_at, id) < ($2::timestamptz, $3::text)
ORDER BY created_at DESC, id DESC
LIMIT $4;

-- name: idempotency_claim
-- Takes the key for this request; no row inserted means another request holds
-- it. A concurrent request with the same key waits here until the first
-- commits, then inserts nothing and replays its order.
INSERT INTO lapse_idempotency_keys (key, request_hash, order_id, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO NOTHING;

-- name: idempotency_get
SELECT request_hash, order_id FROM lapse_idempotency_keys WHERE key = $1;

-- name: insert_order
-- Sent with insert_items in one round trip. $7 the remote reservation, or ''.
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, reservation_id)
VALUES ($1, 'PENDING', $2, $3, $4, $5, $6, NULLIF($7::text, ''));

-- name: insert_items
-- $2 and $3 are the SKUs and quantities, position by position.
INSERT INTO lapse_order_items (order_id, sku, qty)
SELECT $1, i.sku, i.qty FROM unnest($2::text[], $3::bigint[]) AS i (sku, qty);

-- name: reserve_sku
-- Reserve $1 units of SKU $2; no row changed means not enough stock (or no
-- such SKU). The core reserves an order's SKUs in byte order, the order every
-- lock of SKU rows takes, so two transactions never wait for each other's
-- rows in opposite orders.
UPDATE lapse_skus SET available = available - $1, locked = locked + $1, updated_at = $3
WHERE sku = $2 AND available >= $1;

-- name: create_order
-- A whole create in one statement (core.CreateExecutor, onetrip.go), written
-- as if every check passed; the core decides from what it returns (core.Admit)
-- and has a refused create undone. The steps run in a create's lock order,
-- each gated on the one before (an uncorrelated EXISTS is an init plan, run
-- before the step that holds it):
--   clock    $1, the transaction's now, or the database's clock, read once
--            (clock_timestamp() is volatile: the CTE is materialized);
--   claim    the idempotency key $2 (hash $3), when given: a concurrent
--            holder is waited for, and a key held makes every step below
--            write nothing;
--   ins      the order ($4 id, $5 amount, $6 currency, expires_at and
--            cancel_after now + $7 and $8, $9 the remote reservation or ''):
--            an id taken writes nothing, and nothing below either;
--   held     with $12 (lapse holds the stock), the SKU rows $10 locked in
--            byte order (COLLATE "C", as reserve_sku and lock_skus lock
--            them) and their units before the reservation;
--   reserve  the units $11 of each held SKU that has them (the ARRAY is an
--            init plan: every row is locked in held's order before any is
--            updated);
--   items, ledger (with $12) and event ($13 id, $14 type, the payload $15
--            with the order's three times put between its four parts, in
--            order.TimeFormat), run at the end of the statement.
-- One row: now, whether the key was taken, whether the order was written,
-- the held SKUs and their units, and how many SKU rows were reserved.
WITH clock AS MATERIALIZED (SELECT COALESCE($1::timestamptz, date_trunc('milliseconds', clock_timestamp())) AS now),
claim AS (
  INSERT INTO lapse_idempotency_keys (key, request_hash, order_id, created_at)
  SELECT $2, $3, $4, now FROM clock WHERE $2::text <> ''
  ON CONFLICT (key) DO NOTHING
  RETURNING key
),
ins AS (
  INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, reservation_id)
  SELECT $4, 'PENDING', $5, $6, now, now + $7::interval, now + $8::interval, NULLIF($9::text, '')
  FROM clock
  WHERE $2::text = '' OR EXISTS (SELECT FROM claim)
  ON CONFLICT (id) DO NOTHING
  RETURNING id, created_at, expires_at, cancel_after
),
held AS MATERIALIZED (
  SELECT sku, available FROM lapse_skus
  WHERE $12::boolean AND sku = ANY($10::text[]) AND EXISTS (SELECT FROM ins)
  ORDER BY sku COLLATE "C"
  FOR UPDATE
),
reserve AS (
  UPDATE lapse_skus SET available = lapse_skus.available - d.qty, locked = lapse_skus.locked + d.qty,
         updated_at = (SELECT now FROM clock)
  FROM unnest($10::text[], $11::bigint[]) AS d (sku, qty)
  WHERE lapse_skus.sku = d.sku AND lapse_skus.sku = ANY (ARRAY(SELECT sku FROM held))
    AND lapse_skus.available >= d.qty
  RETURNING lapse_skus.sku
),
items AS (
  INSERT INTO lapse_order_items (order_id, sku, qty)
  SELECT ins.id, i.sku, i.qty FROM ins, unnest($10::text[], $11::bigint[]) AS i (sku, qty)
),
ledger AS (
  INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
  SELECT ins.id, i.sku, 'reserve', i.qty, ins.created_at
  FROM ins, unnest($10::text[], $11::bigint[]) AS i (sku, qty)
  WHERE $12::boolean
),
event AS (
  INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at)
  SELECT $13::uuid, $14, ins.id,
         (($15::text[])[1] || to_char(ins.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
       || ($15::text[])[2] || to_char(ins.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
       || ($15::text[])[3] || to_char(ins.cancel_after AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
       || ($15::text[])[4])::json,
         ins.created_at
  FROM ins
)
SELECT c.now, EXISTS (SELECT FROM claim), EXISTS (SELECT FROM ins),
       ARRAY(SELECT sku FROM held), ARRAY(SELECT available FROM held), (SELECT count(*) FROM reserve)
FROM clock AS c;

-- name: create_savepoint
-- Leads a create sent in one round trip into a caller's transaction, which
-- lapse never rolls back: a refused create is undone to it (create_undo),
-- and the caller's transaction goes on. A create that succeeds leaves it to
-- end with the caller's transaction.
SAVEPOINT lapse_create_order;

-- name: create_undo
ROLLBACK TO SAVEPOINT lapse_create_order;

-- name: create_release
RELEASE SAVEPOINT lapse_create_order;

-- name: group_lock_wait
-- Bounds every lock wait of a group's transaction ($1, e.g. '500ms'): a group
-- that cannot get a row (a SKU another transaction holds) gives up with
-- lock_not_available and its orders are created one by one, instead of every
-- create queued behind it waiting for one row it never needed.
SELECT set_config('lock_timeout', $1, true);

-- name: group_claim_keys
-- The idempotency keys of a group of creates ($1 keys in key order, so two
-- groups sharing keys take them in the same order; $2 request hashes, $3
-- order ids, position by position). Returns the keys this transaction took;
-- a key another request holds is not returned (a concurrent holder is waited
-- for first, as idempotency_claim does).
INSERT INTO lapse_idempotency_keys (key, request_hash, order_id, created_at)
SELECT k.key, k.hash, k.order_id, $4
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k (key, hash, order_id, n)
ORDER BY k.n
ON CONFLICT (key) DO NOTHING
RETURNING key;

-- name: group_lock_skus
-- Locks the SKU rows of a group of creates in byte order (COLLATE "C": the
-- order a lone create reserves in, whatever the database's collation; rows
-- are locked after the sort) and reads what they have: under READ COMMITTED a
-- row locked FOR UPDATE is the newest committed version, so the counts stay
-- true until the transaction ends.
SELECT sku, available FROM lapse_skus WHERE sku = ANY($1::text[]) ORDER BY sku COLLATE "C" FOR UPDATE;

-- name: group_existing
-- Which order ids of a group of creates are taken, so that a retried create
-- is answered order_exists as a lone one is, not refused for the stock its
-- first try took. Sent after group_lock_skus in the same round trip: a create
-- of the same id holding one of those rows has committed by now. One that
-- has not yet shows as a unique violation when the group inserts, and the
-- group's orders are then created one by one. One primary-key lookup per id
-- (see get_orders): a scan of every order per group halved group commit's
-- throughput before the first ANALYZE.
SELECT o.id FROM unnest($1::text[]) AS x (id),
     LATERAL (SELECT id FROM lapse_orders WHERE id = x.id OFFSET 0) AS o;

-- name: group_insert_orders
-- The accepted orders of a group, position by position; $6 is "now".
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
SELECT o.id, 'PENDING', o.amount_cents, o.currency, $6, o.expires_at, o.cancel_after
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::timestamptz[], $5::timestamptz[])
     AS o (id, amount_cents, currency, expires_at, cancel_after);

-- name: group_insert_items
-- The items of the accepted orders: order id, SKU and quantity, position by
-- position.
INSERT INTO lapse_order_items (order_id, sku, qty)
SELECT i.order_id, i.sku, i.qty FROM unnest($1::text[], $2::text[], $3::bigint[]) AS i (order_id, sku, qty);

-- name: group_reserve
-- $1 SKUs, $2 the quantity the accepted orders of a group take of each,
-- summed. The rows are locked by group_lock_skus and the core checked
-- available >= qty on what it read; the condition is repeated so a mistake
-- changes fewer rows than SKUs, which the driver reports as
-- core.ErrGroupMismatch.
UPDATE lapse_skus SET available = lapse_skus.available - d.qty, locked = lapse_skus.locked + d.qty, updated_at = $3
FROM unnest($1::text[], $2::bigint[]) AS d (sku, qty)
WHERE lapse_skus.sku = d.sku AND lapse_skus.sku = ANY($1::text[]) AND lapse_skus.available >= d.qty;

-- name: group_release_keys
-- The keys a group took for orders it then refused (an order id taken, not
-- enough stock): as the rollback of a lone create would, the key is left free
-- for a retry.
DELETE FROM lapse_idempotency_keys WHERE key = ANY($1::text[]);

-- name: ledger_insert
-- One ledger row per item of the orders in $1; the primary key
-- (order_id, sku, action) refuses a second row of the same action.
-- The items are read as get_items reads them, key lookup by key lookup.
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT i.order_id, i.sku, $2, i.qty, $3
FROM unnest($1::text[]) AS x (id),
     LATERAL (SELECT order_id, sku, qty FROM lapse_order_items WHERE order_id = x.id OFFSET 0) AS i;

-- name: lock_skus
-- Locks the SKU rows $1 in byte order (COLLATE "C", whatever the database's
-- collation: the order a create reserves in) before the counter update below
-- touches them in whatever order its plan produces: two transactions sharing
-- SKUs then queue instead of deadlocking. The condition on skus alone keeps it
-- an index scan however large the table.
SELECT sku FROM lapse_skus WHERE sku = ANY($1::text[]) ORDER BY sku COLLATE "C" FOR UPDATE;

-- name: release_stock
-- $1 SKUs, $2 the quantity of each that the orders being cancelled hold:
-- locked units go back to available. skus.sku = ANY($1) gives the planner an
-- index condition; joined to the unnest alone, it may scan every SKU.
UPDATE lapse_skus SET locked = lapse_skus.locked - d.qty, available = lapse_skus.available + d.qty, updated_at = $3
FROM unnest($1::text[], $2::bigint[]) AS d (sku, qty)
WHERE lapse_skus.sku = d.sku AND lapse_skus.sku = ANY($1::text[]);

-- name: commit_stock
-- $1 SKUs, $2 the quantity of each that the orders being paid hold: locked
-- units become sold.
UPDATE lapse_skus SET locked = lapse_skus.locked - d.qty, sold = lapse_skus.sold + d.qty, updated_at = $3
FROM unnest($1::text[], $2::bigint[]) AS d (sku, qty)
WHERE lapse_skus.sku = d.sku AND lapse_skus.sku = ANY($1::text[]);

-- name: insert_events
-- One row per event, in the order given: $3, $4 and $5 are the event ids,
-- order ids and JSON payloads, position by position.
INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at)
SELECT e.id::uuid, $1, e.order_id, e.payload::json, $2
FROM unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e (id, order_id, payload, n)
ORDER BY e.n;

-- name: notify_due
-- Tells every instance listening on this schema's channel (due_channel) of
-- the deadlines a create or an extend sets: $1 the payloads, each lines of
-- "<cancel_after in Unix ms> <order id>" (shorter than PostgreSQL's 8000
-- bytes). The server queues them at COMMIT and drops them on ROLLBACK. It
-- rides the pipeline of the transition's effects: no round trip of its own.
SELECT pg_notify(left('lapse_due:' || current_schema(), 63), p) FROM unnest($1::text[]) AS p;

-- name: notify_created
-- notify_due for the order the one-trip create just wrote (its cancel_after
-- is computed by that statement): $1 the order id. A create refused later is
-- rolled back to its savepoint, and its notice with it.
SELECT pg_notify(left('lapse_due:' || current_schema(), 63),
                 floor(extract(epoch FROM cancel_after) * 1000)::bigint || ' ' || id)
FROM lapse_orders WHERE id = $1;

-- name: hook_failure_note
-- One more failure of the hook $2 of order $1 at $4, its error $3; a first
-- one makes the record (next_at set right after by hook_failure_retry).
INSERT INTO lapse_hook_failures (order_id, event, attempts, last_error, first_failed_at, last_failed_at, next_at)
VALUES ($1, $2, 1, $3, $4, $4, $4)
ON CONFLICT (order_id, event) DO UPDATE
SET attempts = lapse_hook_failures.attempts + 1, last_error = EXCLUDED.last_error, last_failed_at = EXCLUDED.last_failed_at
RETURNING attempts, first_failed_at;

-- name: hook_failure_retry
UPDATE lapse_hook_failures SET next_at = $3 WHERE order_id = $1 AND event = $2;

-- name: hook_failures_clear
-- The records of orders whose hook held ($1), in the transaction that made
-- their transition.
DELETE FROM lapse_hook_failures WHERE order_id = ANY($1::text[]);

-- name: hook_failures
-- The records of orders still PENDING, oldest first failure first ($1 at most).
SELECT f.order_id, f.event, f.attempts, f.last_error, f.first_failed_at, f.last_failed_at, f.next_at
FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
WHERE o.status = 'PENDING'
ORDER BY f.first_failed_at, f.order_id
LIMIT $1;

-- name: count_hook_failing
SELECT count(*) FROM (SELECT 1 FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
                      WHERE o.status = 'PENDING' LIMIT $1) AS x;

-- name: due_channel
-- The channel notify_due sends on: one per schema, so that lapse
-- installations in several schemas of one database hear only their own.
SELECT left('lapse_due:' || current_schema(), 63);

-- name: start_payment
-- $1 id, $2 now, $3 the attempt's payment id, or '' for "<id>-<n>" (n: the
-- order's attempts so far + 1).
UPDATE lapse_orders SET status = 'PAYING', version = version + 1,
    payment_id = CASE WHEN $3::text <> '' THEN $3::text
                      ELSE id || '-' || ((SELECT count(*) FROM lapse_payments WHERE order_id = $1) + 1) END
WHERE id = $1 AND status = 'PENDING' AND expires_at > $2
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: supersede_payment
-- $1 id, $2 the current payment id ('' for none: an order PAYING since before
-- attempts had ids), $3 the new one, $4 now.
UPDATE lapse_orders SET payment_id = $3, version = version + 1
WHERE id = $1 AND status = 'PAYING' AND COALESCE(payment_id, '') = $2 AND expires_at > $4
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: callback_seen
-- Remember a callback; no row inserted means it was applied before.
INSERT INTO lapse_payment_callbacks (callback_id, order_id, seen_at) VALUES ($1, $2, $3)
ON CONFLICT (callback_id) DO NOTHING;

-- name: callback_purge
-- Forget callbacks older than store.CallbackMemory; sent with callback_seen in
-- one round trip.
DELETE FROM lapse_payment_callbacks WHERE seen_at < $1;

-- name: mark_paid
-- $1 id, $2 now, $3 the paying attempt's payment id, $4 the amount and $5 the
-- currency reported ('' for the order's). It pays only what the order asks,
-- and never by an attempt that has ended (a later report of it is a
-- conflict) nor while another attempt is open (the core supersedes it first).
UPDATE lapse_orders SET status = 'PAID', paid_at = $2, payment_id = $3, version = version + 1
WHERE id = $1 AND status IN ('PENDING', 'PAYING') AND amount_cents = $4 AND ($5 = '' OR currency = $5)
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = $1
                  AND ((p.payment_id = $3 AND p.status IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED'))
                    OR (p.payment_id <> $3 AND p.status = 'PENDING')))
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: flag_refund
-- $1 id, $2 the payment to give back. The caller decided under the row's
-- lock that it must be given back. When it is the current attempt of a
-- PAYING order, that attempt has ended: the order is PENDING again, as after
-- a failure, so its timer cancels it or a new attempt pays it.
UPDATE lapse_orders SET refund_required = true, version = version + 1,
    status = CASE WHEN status = 'PAYING' AND payment_id = $2 THEN 'PENDING' ELSE status END,
    payment_attempts = payment_attempts + CASE WHEN status = 'PAYING' AND payment_id = $2 THEN 1 ELSE 0 END
WHERE id = $1
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: fail_payment
-- $1 id, $2 the failed attempt's payment id: only the current attempt moves
-- the order (an order PAYING since before attempts had ids has none).
UPDATE lapse_orders SET status = 'PENDING', payment_attempts = payment_attempts + 1, version = version + 1
WHERE id = $1 AND status = 'PAYING' AND (payment_id = $2 OR payment_id IS NULL)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: get_payments
-- The attempts of order $1, oldest first (ties in payment id byte order).
SELECT payment_id, status, amount_cents, currency, conflicts, created_at, updated_at FROM lapse_payments
WHERE order_id = $1 ORDER BY created_at, payment_id COLLATE "C";

-- name: insert_payment
-- $1 order id, $2 payment id, $3 status, $4 amount, $5 created_at = updated_at.
-- An id the order already used violates lapse_payments_pkey (store.ErrPaymentIDUsed).
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $5);

-- name: save_payment
-- An attempt's outcome ($3 status, $4 amount, $5 now, $6 currency); an
-- attempt lapse never started (reported by the gateway) is inserted. An
-- attempt that has ended is never moved (the core decides before); a payment
-- id another order has violates lapse_payments_payment_id_unique.
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
VALUES ($1, $2, $3, $4, $6, $5, $5)
ON CONFLICT (order_id, payment_id) DO UPDATE SET
    status = excluded.status, amount_cents = excluded.amount_cents, currency = excluded.currency,
    updated_at = excluded.updated_at
WHERE lapse_payments.status NOT IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED');

-- name: note_conflict
-- $1 order id, $2 payment id: a report that disagreed with how the attempt ended.
UPDATE lapse_payments SET conflicts = conflicts + 1 WHERE order_id = $1 AND payment_id = $2;

-- name: end_payment
-- $1 order id, $2 payment id, $3 the status it ends in, $4 now: only an open
-- attempt (PENDING, SUPERSEDED) ends.
UPDATE lapse_payments SET status = $3, updated_at = $4
WHERE order_id = $1 AND payment_id = $2 AND status IN ('PENDING', 'SUPERSEDED');

-- name: owe_back
-- $1 order id, $2 payment id, $3 now: the attempt that paid an order its
-- owner (the order service) answered cancelled owes the money back.
UPDATE lapse_payments SET status = 'REFUND_REQUIRED', updated_at = $3
WHERE order_id = $1 AND payment_id = $2 AND status = 'SUCCEEDED';

-- name: extend_order
-- $1 id, $2 the new expires_at, $3 now. cancel_after moves with expires_at,
-- keeping the order's grace (the right side reads the row as it was). Only a
-- PENDING order whose payment window is still open moves: once it has
-- closed, the timer may be cancelling the order.
UPDATE lapse_orders SET expires_at = $2, cancel_after = $2::timestamptz + (cancel_after - expires_at), version = version + 1
WHERE id = $1 AND status = 'PENDING' AND expires_at > $3
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: buyer_cancel
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = $2, cancel_reason = 'buyer', version = version + 1
WHERE id = $1 AND status = 'PENDING'
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: cancel_due
-- $1 now, $2 the ids of the batch, $3 true to leave orders with a failed
-- payment attempt alone, $4 true when the gateway confirmed the trades closed
-- (PAYING and attempted orders are cancelled too), $5 the cancel_reason, $6
-- true when the deadline does not bind (an operator's cancel).
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = $1, cancel_reason = $5::text, version = version + 1
WHERE id = ANY($2::text[])
  AND (cancel_after <= $1 OR $6::boolean)
  AND (status = 'PENDING' OR ($4::boolean AND status = 'PAYING'))
  AND (NOT $3::boolean OR $4::boolean OR payment_attempts = 0)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: claim_due
-- $1 now, $2 now - lag, $3 batch size, $4 true to leave attempted orders alone.
-- LEAST: the claim never takes an order before its cancel_after, whatever lag
-- it is given (one index condition, so the walk below is unchanged).
-- The subquery walks lapse_orders_status_cancel_after from the oldest deadline and
-- stops after $3 rows it could lock: rows another claimer holds are skipped,
-- so concurrent claimers take disjoint batches without waiting. An order
-- whose OnCancelled failed is left alone until its record's next_at (a
-- primary-key probe of lapse_hook_failures per row walked: the walk stays
-- on the index). ARRAY(…)
-- makes it an init plan run once, whose ids the UPDATE then finds through the
-- primary key: written as id IN (…), a generic plan may hash-join it against
-- a sequential scan of every PENDING order.
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = $1, cancel_reason = 'timeout', version = version + 1
WHERE id = ANY (ARRAY(SELECT id FROM lapse_orders o
                      WHERE status = 'PENDING' AND cancel_after <= LEAST($2::timestamptz, $1::timestamptz)
                        AND (NOT $4::boolean OR payment_attempts = 0)
                        AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f
                                        WHERE f.order_id = o.id AND f.event = 'cancelled' AND f.next_at > $1::timestamptz)
                      ORDER BY cancel_after
                      LIMIT $3
                      FOR UPDATE SKIP LOCKED))
  AND status = 'PENDING'
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: cancel_due_clocked
-- cancel_due with the clock folded in (core.DueClockExecutor): the statement
-- reads the database's clock itself and returns it, with each cancelled
-- order's items, so a timeout cancel's clock, UPDATE and items are one
-- statement. $1 the ids of the batch, $2 to $5 as cancel_due's $3 to $6.
-- The clock CTE is evaluated once (clock_timestamp() is volatile: the CTE is
-- materialized), so every guard and cancelled_at of the batch compare
-- against one now, as when the core reads it first. One row always comes:
-- the clock, and nulls when no order was cancelled (LEFT JOIN). Items in SKU
-- byte order, as get_items gives them.
WITH clock AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now),
done AS (
  UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = (SELECT now FROM clock), cancel_reason = $4::text, version = version + 1
  WHERE id = ANY($1::text[])
    AND (cancel_after <= (SELECT now FROM clock) OR $5::boolean)
    AND (status = 'PENDING' OR ($3::boolean AND status = 'PAYING'))
    AND (NOT $2::boolean OR $3::boolean OR payment_attempts = 0)
  RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
            cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
)
SELECT clock.now, d.id, d.status, d.amount_cents, d.currency, d.created_at, d.expires_at, d.cancel_after, d.paid_at,
       d.cancelled_at, d.cancel_reason, d.payment_id, d.refund_required, d.payment_attempts, d.version, d.reservation_id,
       i.skus, i.qtys
FROM clock
LEFT JOIN done AS d ON true
LEFT JOIN LATERAL (SELECT array_agg(sku ORDER BY sku COLLATE "C") AS skus, array_agg(qty ORDER BY sku COLLATE "C") AS qtys
                   FROM lapse_order_items WHERE order_id = d.id) AS i ON true;

-- name: claim_due_clocked
-- claim_due with the clock folded in, as cancel_due_clocked: $1 the lag (an
-- interval, never negative: the claim takes cancel_after <= now - lag, never
-- past now), $2 batch size, $3 true to leave attempted orders alone.
WITH clock AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now),
done AS (
  UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = (SELECT now FROM clock), cancel_reason = 'timeout', version = version + 1
  WHERE id = ANY (ARRAY(SELECT id FROM lapse_orders o
                        WHERE status = 'PENDING' AND cancel_after <= (SELECT now - greatest($1::interval, interval '0') FROM clock)
                          AND (NOT $3::boolean OR payment_attempts = 0)
                          AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f
                                          WHERE f.order_id = o.id AND f.event = 'cancelled' AND f.next_at > (SELECT now FROM clock))
                        ORDER BY cancel_after
                        LIMIT $2
                        FOR UPDATE SKIP LOCKED))
    AND status = 'PENDING'
  RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
            cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
)
SELECT clock.now, d.id, d.status, d.amount_cents, d.currency, d.created_at, d.expires_at, d.cancel_after, d.paid_at,
       d.cancelled_at, d.cancel_reason, d.payment_id, d.refund_required, d.payment_attempts, d.version, d.reservation_id,
       i.skus, i.qtys
FROM clock
LEFT JOIN done AS d ON true
LEFT JOIN LATERAL (SELECT array_agg(sku ORDER BY sku COLLATE "C") AS skus, array_agg(qty ORDER BY sku COLLATE "C") AS qtys
                   FROM lapse_order_items WHERE order_id = d.id) AS i ON true;

-- name: payment_checks
-- $1 now - lag, $2 limit. Both kinds of order are found through
-- lapse_orders_status_cancel_after, one index range per status.
SELECT id, cancel_after FROM lapse_orders
WHERE (status = 'PAYING' OR (status = 'PENDING' AND payment_attempts > 0)) AND cancel_after <= $1
ORDER BY cancel_after
LIMIT $2;

-- name: next_deadline
-- $1 true to leave out orders with a failed payment attempt, as claim_due
-- does when a gateway checks them: a poller that counted them would wake for
-- an order its claim skips, again and again.
-- An order whose OnCancelled failed is due at its record's next_at if that
-- is later (claim_due leaves it alone until then): the first deadline of the
-- orders without a record (the index walked from its start, a primary-key
-- probe per row), or the earliest of those with one (a few rows).
SELECT least(
  (SELECT cancel_after FROM lapse_orders o
   WHERE status = 'PENDING' AND (NOT $1::boolean OR payment_attempts = 0)
     AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id AND f.event = 'cancelled')
   ORDER BY cancel_after LIMIT 1),
  (SELECT min(greatest(o.cancel_after, f.next_at)) FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
   WHERE f.event = 'cancelled' AND o.status = 'PENDING' AND (NOT $1::boolean OR o.payment_attempts = 0)));

-- name: pending_deadlines
-- The first condition on cancel_after alone lets the index bound the scan;
-- the row comparison then breaks ties by id.
SELECT id, cancel_after FROM lapse_orders
WHERE status = 'PENDING' AND cancel_after >= $1::timestamptz AND (cancel_after, id) > ($1::timestamptz, $2::text)
ORDER BY cancel_after, id
LIMIT $3;

-- name: count_stuck
SELECT count(*) FROM lapse_orders WHERE status = 'PAYING' AND cancel_after <= $1;

-- name: set_stock
INSERT INTO lapse_skus (sku, available, total, updated_at) VALUES ($1, $2, $2, $3)
ON CONFLICT (sku) DO UPDATE SET
    available = excluded.available,
    total = excluded.available + lapse_skus.locked + lapse_skus.sold,
    updated_at = excluded.updated_at
RETURNING sku, available, locked, sold;

-- name: get_sku
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku = $1;

-- name: unpublished_events
SELECT seq, event_id::text, type, order_id, payload::text, created_at FROM lapse_outbox
WHERE published_at IS NULL ORDER BY seq LIMIT $1;

-- name: mark_published
-- Events whose every sink has delivered them (no delivery row left).
UPDATE lapse_outbox o SET published_at = $1
WHERE o.seq = ANY($2::bigint[]) AND o.published_at IS NULL AND o.fanned_out
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = o.seq);

-- name: register_sinks
INSERT INTO lapse_outbox_sinks (name, registered_at)
SELECT unnest($1::text[]), $2 ON CONFLICT (name) DO NOTHING;

-- name: lock_fanout
SELECT id FROM lapse_outbox_fanout FOR UPDATE SKIP LOCKED;

-- name: fan_out
-- Params: limit, now. Runs holding outbox_fanout's row (lock_fanout).
-- The events are marked through the primary key, seq = ANY (ARRAY(…)) (an
-- init plan, as in claim_due): written as a join to f, the planner — with
-- statistics taken while the outbox was small — hash-joined f against a
-- sequential scan of the whole outbox on every fan-out, the relay's largest
-- cost while a burst of cancels fills the outbox.
WITH f AS (
    SELECT seq, order_id FROM lapse_outbox WHERE NOT fanned_out ORDER BY seq LIMIT $1
), d AS (
    INSERT INTO lapse_outbox_deliveries (sink, seq, order_id, next_at)
    SELECT s.name, f.seq, f.order_id, $2 FROM f CROSS JOIN lapse_outbox_sinks s
    ON CONFLICT (sink, seq) DO NOTHING
)
UPDATE lapse_outbox o SET fanned_out = true WHERE o.seq = ANY (ARRAY(SELECT seq FROM f));

-- name: claim_deliveries
-- Params: sink, limit, now, lease until. The first pending seq of each
-- order only, rows other claims hold skipped: one event of an order in
-- flight per sink. The head is found as "the lowest seq of (sink, order)",
-- a LIMIT 1 walk of lapse_outbox_deliveries_order: written as NOT EXISTS (a lower
-- seq), the planner — with statistics taken while the table was nearly
-- empty — probed that index by sink alone, reading every pending row of the
-- sink once per candidate, and a relay stalled at a few thousand pending
-- events (TestOutboxClaimWalksTheIndexWithStaleStatistics).
WITH c AS (
    SELECT d.sink, d.seq FROM lapse_outbox_deliveries d
    WHERE d.sink = $1 AND NOT d.dead AND d.next_at <= $3
      AND d.seq = (
          SELECT p.seq FROM lapse_outbox_deliveries p
          WHERE p.sink = $1 AND p.order_id = d.order_id
          ORDER BY p.sink, p.order_id, p.seq LIMIT 1)
    ORDER BY d.seq LIMIT $2
    FOR UPDATE OF d SKIP LOCKED
), u AS (
    UPDATE lapse_outbox_deliveries d SET next_at = $4, attempts = d.attempts + 1
    FROM c WHERE d.sink = c.sink AND d.seq = c.seq
    RETURNING d.seq, d.attempts, d.refusals, d.first_refused_at
)
SELECT u.seq, u.attempts, u.refusals, u.first_refused_at,
       o.event_id::text, o.type, o.order_id, o.payload::text, o.created_at
FROM u JOIN lapse_outbox o ON o.seq = u.seq ORDER BY u.seq;

-- name: delete_deliveries
-- Params: sink, seqs, attempts (pairs).
DELETE FROM lapse_outbox_deliveries d
USING unnest($2::bigint[], $3::int[]) AS x(seq, attempts)
WHERE d.sink = $1 AND d.seq = x.seq AND d.attempts = x.attempts;

-- name: fail_delivery
-- Params: sink, seq, attempts, now, next_at, error, refused, dead.
UPDATE lapse_outbox_deliveries SET
    next_at = $5, last_error = $6,
    refusals = refusals + CASE WHEN $7 THEN 1 ELSE 0 END,
    first_refused_at = CASE WHEN $7 THEN COALESCE(first_refused_at, $4) ELSE first_refused_at END,
    dead = $8, dead_at = CASE WHEN $8 THEN $4 END
WHERE sink = $1 AND seq = $2 AND attempts = $3;

-- name: list_deliveries
-- Params: sink ('' for all), dead only, after seq, limit.
SELECT d.sink, d.dead, d.attempts, d.refusals, d.next_at, COALESCE(d.last_error, ''), d.dead_at,
       o.seq, o.event_id::text, o.type, o.order_id, o.payload::text, o.created_at
FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
WHERE ($1 = '' OR d.sink = $1) AND (NOT $2 OR d.dead) AND d.seq > $3
ORDER BY d.seq, d.sink LIMIT $4;

-- name: retry_deliveries
-- Params: event ids (or NULL for every dead one), sink ('' for all), now.
UPDATE lapse_outbox_deliveries d SET dead = false, dead_at = NULL, next_at = $3,
    refusals = 0, first_refused_at = NULL
WHERE d.dead AND ($2 = '' OR d.sink = $2)
  AND ($1::uuid[] IS NULL OR d.seq IN (SELECT seq FROM lapse_outbox WHERE event_id = ANY($1::uuid[])));

-- name: purge_deliveries
-- Params: dead before, sink ('' for all).
DELETE FROM lapse_outbox_deliveries WHERE dead AND dead_at < $1 AND ($2 = '' OR sink = $2)
RETURNING seq;

-- name: mark_drained
-- Params: limit, now.
UPDATE lapse_outbox o SET published_at = $2
WHERE o.seq IN (
    SELECT u.seq FROM lapse_outbox u
    WHERE u.published_at IS NULL AND u.fanned_out
      AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = u.seq)
    ORDER BY u.seq LIMIT $1);

-- name: delete_outbox
-- Params: published before, limit.
DELETE FROM lapse_outbox WHERE seq IN (
    SELECT seq FROM lapse_outbox WHERE published_at < $1 ORDER BY published_at LIMIT $2);

-- name: forget_sink
DELETE FROM lapse_outbox_sinks WHERE name = $1;

-- name: forget_sink_deliveries
DELETE FROM lapse_outbox_deliveries WHERE sink = $1;

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

-- name: savepoint
-- The savepoints bracket one create of a group in the core's general path;
-- this driver creates groups with group_claim_keys … group_release_keys
-- instead, and has them for completeness.
SAVEPOINT create_order;

-- name: rollback_to_savepoint
ROLLBACK TO SAVEPOINT create_order;

-- name: release_savepoint
RELEASE SAVEPOINT create_order;

-- name: migrate_lock
-- Serialises migrations of one schema: concurrent `lapse serve` starts queue
-- here, and the lock ends with the transaction.
SELECT pg_advisory_xact_lock(hashtext('lapse.migrate'), hashtext(COALESCE(current_schema(), '')));

-- name: migrate_state
-- Whether the current schema holds lapse_schema_migrations (lapse's since
-- version 9), and whether it may hold the schema of an earlier lapse instead:
-- lapse's own schema_migrations (a table with its columns; legacy_init then
-- checks that it recorded lapse's 001_init) beside lapse's orders,
-- order_items and stock_ledger. A schema_migrations of anyone
-- else (golang-migrate's has version and dirty) or an `orders` of the
-- shop's is not that, and is left alone.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class
               WHERE relnamespace = current_schema()::regnamespace AND relname = 'lapse_schema_migrations'),
       EXISTS (SELECT 1 FROM information_schema.tables
               WHERE table_schema = current_schema() AND table_name = 'schema_migrations' AND table_type = 'BASE TABLE')
       AND (SELECT count(*) FROM information_schema.columns
            WHERE table_schema = current_schema() AND (table_name, column_name) IN (
                ('schema_migrations', 'version'), ('schema_migrations', 'name'), ('schema_migrations', 'applied_at'),
                ('orders', 'cancel_after'), ('orders', 'payment_attempts'),
                ('stock_ledger', 'action'), ('order_items', 'qty'))) = 7;

-- name: legacy_init
-- Whether that schema_migrations records lapse's 001_init (asked only once
-- migrate_state found the table with lapse's columns).
SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1 AND name = 'init');

-- name: legacy_applied
-- Whether an earlier lapse's schema has legacy migration $1 (Migrate's
-- renameLegacy, before the rename).
SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1);

-- name: legacy_record
INSERT INTO schema_migrations (version, name) VALUES ($1, $2);

-- name: migrate_table
CREATE TABLE IF NOT EXISTS lapse_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migrate_applied
SELECT EXISTS (SELECT 1 FROM lapse_schema_migrations WHERE version = $1);

-- name: migrate_record
INSERT INTO lapse_schema_migrations (version, name) VALUES ($1, $2);

-- Stock tasks (store.Tasks; migration 005). The columns every task query
-- returns: id, order_id, action, reservation_id, items, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, result, last_error.

-- name: insert_tasks
-- One PENDING task per position of $2…$6 (ids, order ids, actions,
-- reservation ids, items), written at $1 and due at $7. The key (reservation_id,
-- action) refuses a second task of an action (lapse_stock_tasks_reservation_action
-- → core.ErrMovedTwice).
INSERT INTO lapse_stock_tasks (id, order_id, action, reservation_id, items, next_at, since, created_at)
SELECT t.id, t.order_id, t.action, t.reservation_id, t.items, $7, $1, $1
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t (id, order_id, action, reservation_id, items);

-- name: claim_tasks
-- $1 now, $2 the lease's end, $3 batch size. The subquery walks
-- lapse_stock_tasks_due from the earliest due row, skipping rows another claim
-- holds; ARRAY(…) runs it once, and the UPDATE finds its ids by primary key.
UPDATE lapse_stock_tasks SET next_at = $2, attempts = attempts + 1
WHERE id = ANY (ARRAY(SELECT id FROM lapse_stock_tasks
                      WHERE status = 'PENDING' AND next_at <= $1
                      ORDER BY next_at
                      LIMIT $3
                      FOR UPDATE SKIP LOCKED))
  AND status = 'PENDING'
RETURNING id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: settle_task
-- $1 id, $2 the claim's attempts, $3 the new status (PENDING, DONE, DEAD),
-- $4 now, $5 when it is due again, $6 the answer, $7 the error. A failure
-- counts one more; a row another claim took since (attempts moved on) is left.
UPDATE lapse_stock_tasks SET status = $3, next_at = $5, result = $6, last_error = $7,
    failures = failures + CASE WHEN $3 = 'DONE' THEN 0 ELSE 1 END,
    done_at = CASE WHEN $3 = 'DONE' THEN $4::timestamptz END,
    dead_at = CASE WHEN $3 = 'DEAD' THEN $4::timestamptz END
WHERE id = $1 AND attempts = $2 AND status = 'PENDING';

-- name: task_refs
-- Every task, DONE ones too, in id order: what names it, for reconciling
-- with an inventory's ledger. $1 the cursor (ids after it), $2 limit.
SELECT id, order_id, action, reservation_id
FROM lapse_stock_tasks
WHERE id > $1::text
ORDER BY id
LIMIT $2;

-- name: list_tasks
-- $1 true for DEAD tasks only, $2 an order id ('' for any: then the tasks
-- not DONE, through lapse_stock_tasks_open), $3 the cursor (ids after it), $4 limit.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks
WHERE CASE WHEN $2::text <> '' THEN order_id = $2::text
           WHEN $1::boolean THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND id > $3::text
ORDER BY id COLLATE "C"
LIMIT $4;

-- name: retry_tasks
-- $1 now, $2 ids, $3 true for every DEAD task: PENDING and due now, failures
-- and age counted from now.
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = $1, since = $1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND ($3::boolean OR id = ANY($2::text[]));

-- name: task_stats
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'DEAD'),
       min(created_at) FILTER (WHERE status = 'PENDING')
FROM lapse_stock_tasks WHERE status <> 'DONE';

-- name: lock_task
-- $1 reservation id, $2 action: the task, its row held until the transaction ends.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks WHERE reservation_id = $1 AND action = $2
FOR UPDATE;

-- name: lease_task
-- $1 id, $2 the lease's end: PENDING and held by the caller's claim.
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = $2, attempts = attempts + 1, dead_at = NULL
WHERE id = $1
RETURNING id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: orders_of_payment
-- The orders with an attempt named $1, at most two (one is the answer; two
-- say the id is ambiguous).
SELECT order_id FROM lapse_payments WHERE payment_id = $1 ORDER BY order_id LIMIT 2;

-- The dashboard's reads (store.Dashboard). Each is bounded by an index
-- range whose size does not grow with the table: what each costs at 10 M
-- orders is said above it (the README's Dashboard section has the figures
-- measured on 1 M).

-- name: count_status
-- $1 status, $2 the cap (10,000). An index-only scan of the (status, cancel_after)
-- prefix of one status that stops after $2 entries: at most $2 index
-- entries read (10,000: 1–5 ms), however many orders the status holds.
-- (Index-only once VACUUM has set the visibility map; before, a heap fetch
-- per entry, still bounded by the cap.)
SELECT count(*) FROM (SELECT 1 FROM lapse_orders WHERE status = $1 LIMIT $2) AS capped;

-- name: count_refund_required
-- The lapse_orders_refund_required partial index holds only flagged orders, a
-- handful at any size; capped all the same.
SELECT count(*) FROM (SELECT 1 FROM lapse_orders WHERE refund_required LIMIT $1) AS capped;

-- name: due_per_minute
-- PENDING orders due in [$1, $2) by minute: a range of (status,
-- cancel_after), index-only; its size is the orders due in the next hour
-- (the rate of creates times the share still pending), not the table's.
SELECT floor(extract(epoch FROM cancel_after) / 60)::bigint * 60, count(*)
FROM lapse_orders WHERE status = 'PENDING' AND cancel_after >= $1 AND cancel_after < $2
GROUP BY 1 ORDER BY 1;

-- name: cancelled_per_minute
-- Orders cancelled in [$1, $2) by minute: a range of the lapse_orders_cancelled_at
-- partial index, index-only; its size is the last hour's cancels.
SELECT floor(extract(epoch FROM cancelled_at) / 60)::bigint * 60, count(*)
FROM lapse_orders WHERE cancelled_at >= $1 AND cancelled_at < $2
GROUP BY 1 ORDER BY 1;

-- name: paid_per_minute
-- As cancelled_per_minute, on lapse_orders_paid_at.
SELECT floor(extract(epoch FROM paid_at) / 60)::bigint * 60, count(*)
FROM lapse_orders WHERE paid_at >= $1 AND paid_at < $2
GROUP BY 1 ORDER BY 1;

-- name: refunds_per_minute
-- Payment attempts owing money back (REFUND_REQUIRED, by the minute of the
-- flag: the lapse_payments_refund_required partial index holds flagged
-- attempts only) or that gave it back (REFUNDED, by the minute of their
-- refund: its DONE row, found through the small lapse_refunds rather than
-- by scanning every attempt), in [$1, $2).
SELECT m, count(*) FROM (
    SELECT floor(extract(epoch FROM updated_at) / 60)::bigint * 60 AS m
    FROM lapse_payments WHERE status = 'REFUND_REQUIRED' AND updated_at >= $1 AND updated_at < $2
    UNION ALL
    SELECT floor(extract(epoch FROM r.done_at) / 60)::bigint * 60
    FROM lapse_refunds r JOIN lapse_payments p ON p.payment_id = r.payment_id AND p.status = 'REFUNDED'
    WHERE r.status = 'DONE' AND r.done_at >= $1 AND r.done_at < $2
) x
GROUP BY 1 ORDER BY 1;

-- name: find_orders
-- $1 status or '', created_at >= $2, ($3, $4) the bound or the cursor, $5
-- the page size. Walks lapse_orders_created backwards from the cursor and stops
-- after $5 rows: a page reads $5 entries (more with a status filter: the
-- rows of other statuses in between, at worst the whole time range).
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE ($1::text = '' OR status = $1::text) AND created_at >= $2::timestamptz
  AND (created_at, id) < ($3::timestamptz, $4::text)
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: find_orders_by_prefix
-- $1 prefix, $2 its upper bound, $3 the cursor (last id), $4 status or '',
-- created_at in [$5, $6), $7 the page size. A range of the primary key from
-- the prefix, stopping after $7 rows: the orders whose id starts with the
-- prefix, whatever the table's size. The range is the prefix's in byte order
-- in a database whose collation is C or C.UTF-8 (lapse's own id order);
-- starts_with keeps it exact under any collation.
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE id >= $1::text AND id < $2::text AND id > $3::text AND starts_with(id, $1::text)
  AND ($4::text = '' OR status = $4::text) AND created_at >= $5::timestamptz AND created_at < $6::timestamptz
ORDER BY id
LIMIT $7;

-- name: refund_orders
-- $1 the cursor (last id), $2 the page size: the lapse_orders_refund_required
-- partial index (flagged orders only, in id order).
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE refund_required AND id > $1::text
ORDER BY id
LIMIT $2;

-- name: find_past_deadline
-- $1 status, $2 now, ($3, $4) the cursor (cancel_after, id), $5 the page
-- size. A range of lapse_orders_status_cancel_after: the orders of one open
-- status whose deadline has passed, from the cursor, stopping after $5 rows
-- (PENDING ones past their deadline are the timers' lag, PAYING ones the
-- stuck payments: a handful, whatever the table's size). Ids compare in
-- byte order (COLLATE "C") under any database collation, as the core
-- merges the two statuses' pages.
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE status = $1::text AND cancel_after < $2::timestamptz AND cancel_after >= $3::timestamptz
  AND (cancel_after > $3::timestamptz OR id COLLATE "C" > $4::text COLLATE "C")
ORDER BY cancel_after, id COLLATE "C"
LIMIT $5;

-- name: order_events
-- One order's events still in the outbox: the lapse_outbox_order index.
SELECT seq, event_id::text, type, order_id, payload::text, created_at FROM lapse_outbox
WHERE order_id = $1 ORDER BY seq;

-- name: list_skus
-- A page of the skus primary key.
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku > $1 ORDER BY sku LIMIT $2;

-- name: first_migration
-- When the lowest version recorded was applied: the store's identity (store.Identified).
SELECT applied_at FROM lapse_schema_migrations ORDER BY version LIMIT 1;

-- Order-service mode (store/core/commands.go, docs/order-service.md).

-- name: command_due
-- cancel_due's twin: the due orders of the batch move to CANCELLING, their
-- cancel commanded of the order service. $1 now, $2 ids, $3 and $4 as
-- cancel_due's.
UPDATE lapse_orders SET status = 'CANCELLING', version = version + 1
WHERE id = ANY($2::text[])
  AND cancel_after <= $1
  AND (status = 'PENDING' OR ($4::boolean AND status = 'PAYING'))
  AND (NOT $3::boolean OR $4::boolean OR payment_attempts = 0)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: claim_command_due
-- claim_due's twin (the same walk of lapse_orders_status_cancel_after).
UPDATE lapse_orders SET status = 'CANCELLING', version = version + 1
WHERE id = ANY (ARRAY(SELECT id FROM lapse_orders
                      WHERE status = 'PENDING' AND cancel_after <= LEAST($2::timestamptz, $1::timestamptz)
                        AND (NOT $4::boolean OR payment_attempts = 0)
                      ORDER BY cancel_after
                      LIMIT $3
                      FOR UPDATE SKIP LOCKED))
  AND status = 'PENDING'
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: insert_commands
-- $1 now, $2 ids, $3 order ids, $4 cancel_afters: PENDING, due now. The same
-- order and deadline again (a retried transaction) keeps the row it has.
INSERT INTO lapse_order_commands (id, order_id, cancel_after, next_at, since, created_at)
SELECT c.id, c.order_id, c.cancel_after, $1, $1, $1
FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS c(id, order_id, cancel_after)
ON CONFLICT (id) DO NOTHING;

-- name: insert_claimed_commands
-- insert_commands, claimed for the transaction's caller (CancelDueParams.
-- CommandLease): $1 now, $2 ids, $3 order ids, $4 cancel_afters, $5 the
-- lease's end. Each row as claim_commands leaves one: attempts 1, due again
-- when the lease runs out. Returns the ids written; a command that existed
-- already is left as it is, and not returned.
INSERT INTO lapse_order_commands (id, order_id, cancel_after, next_at, since, created_at, attempts)
SELECT c.id, c.order_id, c.cancel_after, $5, $1, $1, 1
FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS c(id, order_id, cancel_after)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: claim_commands
-- claim_tasks's twin, through lapse_order_commands_due.
UPDATE lapse_order_commands SET next_at = $2, attempts = attempts + 1
WHERE id = ANY (ARRAY(SELECT id FROM lapse_order_commands
                      WHERE status = 'PENDING' AND next_at <= $1
                      ORDER BY next_at
                      LIMIT $3
                      FOR UPDATE SKIP LOCKED))
  AND status = 'PENDING'
RETURNING id, order_id, cancel_after, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: settle_command
-- $1 id, $2 the claim's attempts, $3 the new status, $4 now, $5 when it is due
-- again, $6 the answer, $7 the error, $8 true when it counts as a failure.
UPDATE lapse_order_commands SET status = $3, next_at = $5, result = $6, last_error = $7,
    failures = failures + CASE WHEN $8::boolean THEN 1 ELSE 0 END,
    done_at = CASE WHEN $3 = 'DONE' THEN $4::timestamptz END,
    dead_at = CASE WHEN $3 = 'DEAD' THEN $4::timestamptz END
WHERE id = $1 AND attempts = $2 AND status = 'PENDING';

-- name: resolve_commanded
-- The transition an answer decides: $1 id, $2 the status it becomes, $3 now.
-- CANCELLED and PAID come from CANCELLING or PAYING (paying was answered
-- before); PAYING from CANCELLING only.
UPDATE lapse_orders SET status = $2, version = version + 1,
    cancelled_at = CASE WHEN $2 = 'CANCELLED' THEN $3::timestamptz ELSE cancelled_at END,
    cancel_reason = CASE WHEN $2 = 'CANCELLED' THEN 'timeout' ELSE cancel_reason END,
    paid_at = CASE WHEN $2 = 'PAID' THEN $3::timestamptz ELSE paid_at END
WHERE id = $1 AND (status = 'CANCELLING' OR (status = 'PAYING' AND $2 <> 'PAYING'))
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: list_commands
-- list_tasks's twin: $1 DEAD only, $2 an order id, $3 the cursor, $4 limit.
SELECT id, order_id, cancel_after, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_order_commands
WHERE CASE WHEN $2::text <> '' THEN order_id = $2::text
           WHEN $1::boolean THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND id > $3::text
ORDER BY id COLLATE "C"
LIMIT $4;

-- name: retry_commands
UPDATE lapse_order_commands SET status = 'PENDING', next_at = $1, since = $1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND ($3::boolean OR id = ANY($2::text[]));

-- name: purge_commands
DELETE FROM lapse_order_commands WHERE status = 'DEAD' AND ($2::boolean OR id = ANY($1::text[]));

-- name: command_stats
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'DEAD'),
       min(created_at) FILTER (WHERE status = 'PENDING')
FROM lapse_order_commands WHERE status <> 'DONE';

-- Refunds (store.Refunds; migration 012). The columns every refund query
-- returns: payment_id, order_id, amount_cents, currency, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, last_error,
-- refund_id, manual, note, actor.

-- name: insert_refund
-- $1 payment id, $2 order id, $3 amount, $4 currency, $5 now. A refund the
-- payment has already is left as it is.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, next_at, since, created_at)
VALUES ($1, $2, $3, $4, $5, $5, $5)
ON CONFLICT (payment_id) DO NOTHING;

-- name: claim_refunds
-- claim_tasks's twin, through lapse_refunds_due: $1 now, $2 the lease's
-- end, $3 batch size; rows other claims hold are skipped.
UPDATE lapse_refunds SET next_at = $2, attempts = attempts + 1
WHERE payment_id = ANY (ARRAY(SELECT payment_id FROM lapse_refunds
                              WHERE status = 'PENDING' AND next_at <= $1
                              ORDER BY next_at
                              LIMIT $3
                              FOR UPDATE SKIP LOCKED))
  AND status = 'PENDING'
RETURNING payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, last_error, refund_id, manual, note, actor;

-- name: settle_refund
-- $1 payment id, $2 the claim's attempts, $3 the new status, $4 now, $5
-- when it is due again, $6 the gateway's refund id, $7 the error. Anything
-- but DONE counts a failure.
UPDATE lapse_refunds SET status = $3::text, next_at = $5, last_error = $7,
    refund_id = CASE WHEN $3::text = 'DONE' THEN $6::text ELSE refund_id END,
    failures = failures + CASE WHEN $3::text = 'DONE' THEN 0 ELSE 1 END,
    done_at = CASE WHEN $3::text = 'DONE' THEN $4::timestamptz END,
    dead_at = CASE WHEN $3::text = 'DEAD' THEN $4::timestamptz END
WHERE payment_id = $1 AND attempts = $2 AND status = 'PENDING';

-- name: record_refunded
-- An operator's refund: $1 payment id, $2 order id, $3 amount, $4
-- currency, $5 now, $6 the refund id, $7 manual, $8 note, $9 actor. The
-- row is written DONE, or becomes DONE whatever its status.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at,
                           done_at, refund_id, manual, note, actor)
VALUES ($1, $2, $3, $4, 'DONE', $5, $5, $5, $5, $6, $7, $8, $9)
ON CONFLICT (payment_id) DO UPDATE SET status = 'DONE', done_at = $5, dead_at = NULL, next_at = $5,
    refund_id = $6, manual = $7, note = $8, actor = $9;

-- name: refund_payment
-- $1 order id, $2 payment id, $3 now: money owed back was given back.
UPDATE lapse_payments SET status = 'REFUNDED', updated_at = $3
WHERE order_id = $1 AND payment_id = $2 AND status = 'REFUND_REQUIRED';

-- name: clear_refund_required
-- $1 id: once no attempt of the order owes money.
UPDATE lapse_orders SET refund_required = false, version = version + 1
WHERE id = $1 AND refund_required
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = $1 AND p.status = 'REFUND_REQUIRED')
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: get_refund
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds WHERE payment_id = $1;

-- name: list_refunds
-- list_tasks's twin: $1 DEAD only, $2 an order id ('' for any: the refunds
-- not DONE), $3 the cursor (a payment id), $4 limit.
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds
WHERE CASE WHEN $2::text <> '' THEN order_id = $2::text
           WHEN $1::boolean THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND payment_id COLLATE "C" > $3::text
ORDER BY payment_id COLLATE "C"
LIMIT $4;

-- name: retry_refunds
UPDATE lapse_refunds SET status = 'PENDING', next_at = $1, since = $1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND ($3::boolean OR payment_id = ANY($2::text[]));

-- name: refund_stats
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'DEAD'),
       min(created_at) FILTER (WHERE status = 'PENDING')
FROM lapse_refunds WHERE status <> 'DONE';

-- Retention (store/core/retention.go): finished orders deleted with their
-- rows, a batch per transaction.

-- name: lock_retention
SELECT id FROM lapse_retention_turn FOR UPDATE SKIP LOCKED;

-- name: lock_finished_paid
-- Params: before, limit. Finished orders (store.Retention) paid before $1,
-- oldest first: nothing owed, no work row not DONE, every event fanned out
-- and no delivery row left (dead ones included), no hook failure. The walk
-- is lapse_orders_paid_at's, from its oldest entry, past the few old orders
-- kept (flagged, undelivered), stopping at $2: ORDER BY with LIMIT keeps it
-- an index walk whatever the statistics or a generic plan say. The order
-- rows are held; rows other transactions hold are skipped, never waited for.
SELECT o.id FROM lapse_orders o
WHERE o.paid_at < $1 AND o.status = 'PAID' AND NOT o.refund_required
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (NOT e.fanned_out OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.paid_at
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- name: lock_finished_cancelled
-- lock_finished_paid's twin for orders cancelled before $1, walking
-- lapse_orders_cancelled_at; one with a payment attempt only when cancelled
-- before $3 too (its confirming gateway query is done).
SELECT o.id FROM lapse_orders o
WHERE o.cancelled_at < $1 AND o.status = 'CANCELLED' AND NOT o.refund_required
  AND (o.cancelled_at < $3 OR NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id))
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (NOT e.fanned_out OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.cancelled_at
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- name: carry_ledger
-- Params: order ids, now. The units of the orders' ledger rows, added per
-- SKU and action to what was carried before; rows written in SKU byte order.
INSERT INTO lapse_sku_carried AS k (sku, reserved, released, committed, orders, updated_at)
SELECT l.sku,
       COALESCE(sum(l.qty) FILTER (WHERE l.action = 'reserve'), 0),
       COALESCE(sum(l.qty) FILTER (WHERE l.action = 'release'), 0),
       COALESCE(sum(l.qty) FILTER (WHERE l.action = 'commit'), 0),
       count(DISTINCT l.order_id), $2::timestamptz
FROM unnest($1::text[]) AS x (id),
     LATERAL (SELECT order_id, sku, action, qty FROM lapse_stock_ledger WHERE order_id = x.id OFFSET 0) AS l
GROUP BY l.sku
ORDER BY l.sku COLLATE "C"
ON CONFLICT (sku) DO UPDATE SET reserved = k.reserved + excluded.reserved, released = k.released + excluded.released,
    committed = k.committed + excluded.committed, orders = k.orders + excluded.orders, updated_at = excluded.updated_at;

-- name: retention_delete_order_items
-- The retention_delete_ statements take the order ids as an init plan's
-- array (= ANY (ARRAY(…))): each is then an index lookup per id, even with a
-- generic plan on a table never analyzed, where a join to unnest($1) was
-- planned as a scan of the whole table (and "= ANY($1)" alone is planned
-- from statistics: see get_items).
DELETE FROM lapse_order_items WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_stock_ledger
DELETE FROM lapse_stock_ledger WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_payments
DELETE FROM lapse_payments WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_stock_tasks
DELETE FROM lapse_stock_tasks WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_order_commands
DELETE FROM lapse_order_commands WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_refunds
DELETE FROM lapse_refunds WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_hook_failures
DELETE FROM lapse_hook_failures WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_outbox
DELETE FROM lapse_outbox WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_idempotency_keys
DELETE FROM lapse_idempotency_keys WHERE order_id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_delete_orders
DELETE FROM lapse_orders WHERE id = ANY (ARRAY(SELECT x.id FROM unnest($1::text[]) AS x (id)));

-- name: retention_done_stock_tasks
-- Params: before, limit. DONE tasks whose order is gone (the audit reads the
-- others: tasks_match_status).
DELETE FROM lapse_stock_tasks WHERE id IN (
    SELECT t.id FROM lapse_stock_tasks t
    WHERE t.status = 'DONE' AND t.done_at < $1 AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = t.order_id)
    LIMIT $2);

-- name: retention_done_order_commands
DELETE FROM lapse_order_commands WHERE id IN (
    SELECT id FROM lapse_order_commands WHERE status = 'DONE' AND done_at < $1 LIMIT $2);

-- name: retention_done_refunds
-- DONE refunds whose order is gone (the audit reads the others:
-- refunds_match_attempts).
DELETE FROM lapse_refunds WHERE payment_id IN (
    SELECT r.payment_id FROM lapse_refunds r
    WHERE r.status = 'DONE' AND r.done_at < $1 AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = r.order_id)
    LIMIT $2);

-- name: oldest_finished
-- Each minimum is the first entry of its partial index.
SELECT least((SELECT min(paid_at) FROM lapse_orders WHERE paid_at IS NOT NULL),
             (SELECT min(cancelled_at) FROM lapse_orders WHERE cancelled_at IS NOT NULL));
