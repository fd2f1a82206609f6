-- Queries of the SQLite driver. Times are Unix milliseconds. Lists of ids are
-- passed as one JSON array and expanded with json_each, so every statement is
-- static text whatever the batch size.
--
-- Every state change is one conditional UPDATE; its RETURNING rows (or their
-- absence) decide who won.

-- name: get_orders
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders WHERE id IN (SELECT value FROM json_each(?1));

-- name: get_items
SELECT order_id, sku, qty FROM lapse_order_items
WHERE order_id IN (SELECT value FROM json_each(?1))
ORDER BY order_id, sku;

-- name: list_orders
-- ?1 status or '', (?2, ?3) the (created_at, id) of the last row of the previous page.
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE (?1 = '' OR status = ?1) AND (created_at, id) < (?2, ?3)
ORDER BY created_at DESC, id DESC
LIMIT ?4;

-- name: idempotency_get
SELECT request_hash, order_id FROM lapse_idempotency_keys WHERE key = ?1;

-- name: insert_order
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, reservation_id)
VALUES (?1, 'PENDING', ?2, ?3, ?4, ?5, ?6, NULLIF(?7, ''));

-- name: insert_items
-- ?2 is a JSON array of {"sku","qty"}.
INSERT INTO lapse_order_items (order_id, sku, qty)
SELECT ?1, value ->> 'sku', value ->> 'qty' FROM json_each(?2);

-- name: reserve_sku
-- Reserve ?1 units of SKU ?2; no row changed means not enough stock (or no such SKU).
UPDATE lapse_skus SET available = available - ?1, locked = locked + ?1, updated_at = ?3
WHERE sku = ?2 AND available >= ?1;

-- name: ledger_insert
-- One ledger row per item of the orders in ?1 (JSON array of ids); the primary
-- key (order_id, sku, action) refuses a second row of the same action.
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
SELECT order_id, sku, ?2, qty, ?3 FROM lapse_order_items
WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: release_stock
-- Locked units of the orders in ?1 go back to available.
UPDATE lapse_skus SET locked = locked - r.qty, available = available + r.qty, updated_at = ?2
FROM (SELECT sku, SUM(qty) AS qty FROM lapse_order_items
      WHERE order_id IN (SELECT value FROM json_each(?1)) GROUP BY sku) AS r
WHERE lapse_skus.sku = r.sku;

-- name: commit_stock
-- Locked units of the orders in ?1 become sold.
UPDATE lapse_skus SET locked = locked - r.qty, sold = sold + r.qty, updated_at = ?2
FROM (SELECT sku, SUM(qty) AS qty FROM lapse_order_items
      WHERE order_id IN (SELECT value FROM json_each(?1)) GROUP BY sku) AS r
WHERE lapse_skus.sku = r.sku;

-- name: insert_events
-- ?2 is a JSON array of {"id","type","order_id","payload"}.
INSERT INTO lapse_outbox (event_id, type, order_id, payload, created_at)
SELECT value ->> 'id', value ->> 'type', value ->> 'order_id', value ->> 'payload', ?1
FROM json_each(?2);

-- name: callback_seen
-- Remember a callback; no row inserted means it was applied before.
INSERT INTO lapse_payment_callbacks (callback_id, order_id, seen_at) VALUES (?1, ?2, ?3)
ON CONFLICT (callback_id) DO NOTHING;

-- name: callback_purge
DELETE FROM lapse_payment_callbacks WHERE seen_at < ?1;

-- name: start_payment
-- ?1 id, ?2 now, ?3 the attempt's payment id, or '' for "<id>-<n>" (n: the
-- order's attempts so far + 1).
UPDATE lapse_orders SET status = 'PAYING', version = version + 1,
    payment_id = CASE WHEN ?3 != '' THEN ?3
                      ELSE id || '-' || ((SELECT COUNT(*) FROM lapse_payments WHERE order_id = ?1) + 1) END
WHERE id = ?1 AND status = 'PENDING' AND expires_at > ?2
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: supersede_payment
-- ?1 id, ?2 the current payment id ('' for an order PAYING since before
-- attempts had ids: its payment_id is NULL), ?3 the new one, ?4 now.
UPDATE lapse_orders SET payment_id = ?3, version = version + 1
WHERE id = ?1 AND status = 'PAYING' AND expires_at > ?4
  AND (payment_id = ?2 OR (payment_id IS NULL AND ?2 = ''))
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: mark_paid
-- ?1 id, ?2 now, ?3 the paying attempt's payment id, ?4 the amount and ?5
-- the currency reported ('' for the order's). It pays only what the order
-- asks, and never by an attempt that has ended (a later report of it is a
-- conflict) nor while another attempt is open (the core supersedes it first).
UPDATE lapse_orders SET status = 'PAID', paid_at = ?2, payment_id = ?3, version = version + 1
WHERE id = ?1 AND status IN ('PENDING', 'PAYING') AND amount_cents = ?4 AND (?5 = '' OR currency = ?5)
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = ?1
                  AND ((p.payment_id = ?3 AND p.status IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED'))
                    OR (p.payment_id != ?3 AND p.status = 'PENDING')))
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: flag_refund
-- ?1 id, ?2 the payment to give back. The caller decided under the row's lock
-- that it must be given back. When it is the current attempt of a PAYING
-- order, that attempt has ended: the order is PENDING again, as after a
-- failure, so its timer cancels it or a new attempt pays it.
UPDATE lapse_orders SET refund_required = 1, version = version + 1,
    status = CASE WHEN status = 'PAYING' AND payment_id = ?2 THEN 'PENDING' ELSE status END,
    payment_attempts = payment_attempts + CASE WHEN status = 'PAYING' AND payment_id = ?2 THEN 1 ELSE 0 END
WHERE id = ?1
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: fail_payment
-- ?1 id, ?2 the failed attempt's payment id: only the current attempt moves
-- the order (an order PAYING since before attempts had ids has none).
UPDATE lapse_orders SET status = 'PENDING', payment_attempts = payment_attempts + 1, version = version + 1
WHERE id = ?1 AND status = 'PAYING' AND (payment_id = ?2 OR payment_id IS NULL)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: extend_order
-- ?1 id, ?2 the new expires_at, ?3 now. cancel_after moves with expires_at,
-- keeping the order's grace (the right side reads the row as it was). Only a
-- PENDING order whose payment window is still open moves: once it has
-- closed, the timer may be cancelling the order.
UPDATE lapse_orders SET expires_at = ?2, cancel_after = ?2 + (cancel_after - expires_at), version = version + 1
WHERE id = ?1 AND status = 'PENDING' AND expires_at > ?3
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: buyer_cancel
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = ?2, cancel_reason = 'buyer', version = version + 1
WHERE id = ?1 AND status = 'PENDING'
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: cancel_due
-- ?1 now, ?2 JSON array of ids, ?3 1 to leave orders with a failed payment
-- attempt alone, ?4 1 when the gateway confirmed the trades closed (PAYING
-- and attempted orders are cancelled too), ?5 the cancel_reason, ?6 1 when
-- the deadline does not bind (an operator's cancel).
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = ?1, cancel_reason = ?5, version = version + 1
WHERE id IN (SELECT value FROM json_each(?2))
  AND (cancel_after <= ?1 OR ?6 = 1)
  AND (status = 'PENDING' OR (?4 = 1 AND status = 'PAYING'))
  AND (?3 = 0 OR ?4 = 1 OR payment_attempts = 0)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: claim_due
-- ?1 now, ?2 now - lag, ?3 batch size, ?4 1 to leave attempted orders alone.
-- SQLite has one writer, so the claim needs no SKIP LOCKED: the write
-- transaction already excludes every other claimer. An order whose
-- OnCancelled failed is left alone until its record's next_at.
UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = ?1, cancel_reason = 'timeout', version = version + 1
WHERE id IN (SELECT id FROM lapse_orders
             WHERE status = 'PENDING' AND cancel_after <= ?2 AND cancel_after <= ?1 -- never before cancel_after, whatever ?2 says
               AND (?4 = 0 OR payment_attempts = 0)
               AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f
                               WHERE f.order_id = lapse_orders.id AND f.event = 'cancelled' AND f.next_at > ?1)
             ORDER BY cancel_after LIMIT ?3)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: payment_checks
-- ?1 now - lag, ?2 limit.
SELECT id, cancel_after FROM lapse_orders
WHERE (status = 'PAYING' OR (status = 'PENDING' AND payment_attempts > 0)) AND cancel_after <= ?1
ORDER BY cancel_after
LIMIT ?2;

-- name: next_deadline
-- ?1 1 to leave out orders with a failed payment attempt, as claim_due does
-- when a gateway checks them (a poller that counted them would wake for an
-- order its claim skips, again and again).
-- An order whose OnCancelled failed is due at its record's next_at if that
-- is later (claim_due leaves it alone until then): the first deadline of the
-- orders without a record, or the earliest of those with one. (min() of two
-- values is NULL if either is: each stands in for the other.)
SELECT min(coalesce(a, b), coalesce(b, a)) FROM (SELECT
  (SELECT cancel_after FROM lapse_orders o
   WHERE status = 'PENDING' AND (?1 = 0 OR payment_attempts = 0)
     AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id AND f.event = 'cancelled')
   ORDER BY cancel_after LIMIT 1) AS a,
  (SELECT min(max(o.cancel_after, f.next_at)) FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
   WHERE f.event = 'cancelled' AND o.status = 'PENDING' AND (?1 = 0 OR o.payment_attempts = 0)) AS b);

-- name: pending_deadlines
SELECT id, cancel_after FROM lapse_orders
WHERE status = 'PENDING' AND (cancel_after, id) > (?1, ?2)
ORDER BY cancel_after, id
LIMIT ?3;

-- name: count_stuck
SELECT COUNT(*) FROM lapse_orders WHERE status = 'PAYING' AND cancel_after <= ?1;

-- name: set_stock
INSERT INTO lapse_skus (sku, available, total, updated_at) VALUES (?1, ?2, ?2, ?3)
ON CONFLICT (sku) DO UPDATE SET
    available = excluded.available,
    total = excluded.available + locked + sold,
    updated_at = excluded.updated_at
RETURNING sku, available, locked, sold;

-- name: get_sku
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku = ?1;

-- name: unpublished_events
SELECT seq, event_id, type, order_id, payload, created_at FROM lapse_outbox
WHERE published_at IS NULL ORDER BY seq LIMIT ?1;

-- name: mark_published
-- Events whose every sink has delivered them (no delivery row left).
UPDATE lapse_outbox SET published_at = ?1
WHERE seq IN (SELECT value FROM json_each(?2)) AND published_at IS NULL AND fanned_out = 1
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = lapse_outbox.seq);

-- name: register_sinks
INSERT INTO lapse_outbox_sinks (name, registered_at)
SELECT value, ?2 FROM json_each(?1) WHERE true ON CONFLICT (name) DO NOTHING;

-- name: fan_out_deliveries
-- Params: limit, now. The single writer serializes fan-outs.
INSERT INTO lapse_outbox_deliveries (sink, seq, order_id, next_at)
SELECT s.name, f.seq, f.order_id, ?2
FROM (SELECT seq, order_id FROM lapse_outbox WHERE fanned_out = 0 ORDER BY seq LIMIT ?1) f
CROSS JOIN lapse_outbox_sinks s
WHERE true ON CONFLICT (sink, seq) DO NOTHING;

-- name: fan_out_mark
-- Params: limit (the same rows as fan_out_deliveries: the writer is alone).
UPDATE lapse_outbox SET fanned_out = 1
WHERE seq IN (SELECT seq FROM lapse_outbox WHERE fanned_out = 0 ORDER BY seq LIMIT ?1);

-- name: claim_deliveries
-- Params: sink, limit, now, lease until. The first pending seq of each
-- order only: one event of an order in flight per sink.
UPDATE lapse_outbox_deliveries SET next_at = ?4, attempts = attempts + 1
WHERE sink = ?1 AND seq IN (
    SELECT d.seq FROM lapse_outbox_deliveries d
    WHERE d.sink = ?1 AND d.dead = 0 AND d.next_at <= ?3
      AND NOT EXISTS (
          SELECT 1 FROM lapse_outbox_deliveries p
          WHERE p.sink = d.sink AND p.order_id = d.order_id AND p.seq < d.seq)
    ORDER BY d.seq LIMIT ?2)
RETURNING seq, attempts, refusals, first_refused_at;

-- name: events_by_seq
SELECT seq, event_id, type, order_id, payload, created_at FROM lapse_outbox
WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY seq;

-- name: delete_deliveries
-- Params: sink, [[seq, attempts], …].
DELETE FROM lapse_outbox_deliveries
WHERE (sink, seq, attempts) IN (
    SELECT ?1, json_extract(x.value, '$[0]'), json_extract(x.value, '$[1]') FROM json_each(?2) x);

-- name: fail_delivery
-- Params: sink, seq, attempts, now, next_at, error, refused, dead.
UPDATE lapse_outbox_deliveries SET
    next_at = ?5, last_error = ?6,
    refusals = refusals + ?7,
    first_refused_at = CASE WHEN ?7 THEN COALESCE(first_refused_at, ?4) ELSE first_refused_at END,
    dead = ?8, dead_at = CASE WHEN ?8 THEN ?4 END
WHERE sink = ?1 AND seq = ?2 AND attempts = ?3;

-- name: list_deliveries
-- Params: sink ('' for all), dead only, after seq, limit.
SELECT d.sink, d.dead, d.attempts, d.refusals, d.next_at, COALESCE(d.last_error, ''), d.dead_at,
       o.seq, o.event_id, o.type, o.order_id, o.payload, o.created_at
FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
WHERE (?1 = '' OR d.sink = ?1) AND (NOT ?2 OR d.dead = 1) AND d.seq > ?3
ORDER BY d.seq, d.sink LIMIT ?4;

-- name: retry_deliveries
-- Params: event ids (JSON array, or NULL for every dead one), sink ('' for all), now.
UPDATE lapse_outbox_deliveries SET dead = 0, dead_at = NULL, next_at = ?3,
    refusals = 0, first_refused_at = NULL
WHERE dead = 1 AND (?2 = '' OR sink = ?2)
  AND (?1 IS NULL OR seq IN (SELECT seq FROM lapse_outbox WHERE event_id IN (SELECT value FROM json_each(?1))));

-- name: purge_deliveries
-- Params: dead before, sink ('' for all).
DELETE FROM lapse_outbox_deliveries WHERE dead = 1 AND dead_at < ?1 AND (?2 = '' OR sink = ?2)
RETURNING seq;

-- name: mark_drained
-- Params: limit, now.
UPDATE lapse_outbox SET published_at = ?2
WHERE seq IN (
    SELECT u.seq FROM lapse_outbox u
    WHERE u.published_at IS NULL AND u.fanned_out = 1
      AND NOT EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = u.seq)
    ORDER BY u.seq LIMIT ?1);

-- name: delete_outbox
-- Params: published before, limit.
DELETE FROM lapse_outbox WHERE seq IN (
    SELECT seq FROM lapse_outbox WHERE published_at < ?1 ORDER BY published_at LIMIT ?2);

-- name: forget_sink
DELETE FROM lapse_outbox_sinks WHERE name = ?1;

-- name: forget_sink_deliveries
DELETE FROM lapse_outbox_deliveries WHERE sink = ?1;

-- name: outbox_unfanned
SELECT count(*), min(created_at) FROM lapse_outbox WHERE fanned_out = 0;

-- name: outbox_sink_stats
SELECT s.name,
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND d.dead = 0),
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND d.dead = 1),
    (SELECT count(*) FROM lapse_outbox_deliveries d WHERE d.sink = s.name AND d.dead = 0 AND EXISTS (
        SELECT 1 FROM lapse_outbox_deliveries x WHERE x.sink = d.sink AND x.order_id = d.order_id AND x.dead = 1 AND x.seq < d.seq)),
    (SELECT o.created_at FROM lapse_outbox_deliveries d JOIN lapse_outbox o ON o.seq = d.seq
     WHERE d.sink = s.name AND d.dead = 0 ORDER BY d.seq LIMIT 1)
FROM lapse_outbox_sinks s ORDER BY s.name;

-- name: savepoint
-- Each create of a group runs behind one (group.go): a create that fails is
-- undone alone, the others stay in the group's transaction.
SAVEPOINT create_order;

-- name: rollback_to_savepoint
ROLLBACK TO create_order;

-- name: release_savepoint
RELEASE create_order;

-- name: idempotency_claim
-- Takes the key for this request; no row inserted means another request
-- took it (its order is replayed, or the key refused).
INSERT INTO lapse_idempotency_keys (key, request_hash, order_id, created_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (key) DO NOTHING;

-- name: get_payments
SELECT payment_id, status, amount_cents, currency, conflicts, created_at, updated_at FROM lapse_payments
WHERE order_id = ?1 ORDER BY created_at, payment_id;

-- name: insert_payment
-- ?1 order id, ?2 payment id, ?3 status, ?4 amount, ?5 created_at = updated_at.
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5);

-- name: save_payment
-- An attempt's outcome (?3 status, ?4 amount, ?5 now, ?6 currency); an
-- attempt lapse never started (reported by the gateway) is inserted. An
-- attempt that has ended is never moved (the core decides before); a payment
-- id another order has violates lapse_payments_payment_id_unique.
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?6, ?5, ?5)
ON CONFLICT (order_id, payment_id) DO UPDATE SET
    status = excluded.status, amount_cents = excluded.amount_cents, currency = excluded.currency,
    updated_at = excluded.updated_at
WHERE lapse_payments.status NOT IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED');

-- name: note_conflict
-- ?1 order id, ?2 payment id: a report that disagreed with how the attempt ended.
UPDATE lapse_payments SET conflicts = conflicts + 1 WHERE order_id = ?1 AND payment_id = ?2;

-- name: end_payment
-- ?1 order id, ?2 payment id, ?3 the status it ends in, ?4 now: only an open
-- attempt (PENDING, SUPERSEDED) ends.
UPDATE lapse_payments SET status = ?3, updated_at = ?4
WHERE order_id = ?1 AND payment_id = ?2 AND status IN ('PENDING', 'SUPERSEDED');

-- name: owe_back
-- ?1 order id, ?2 payment id, ?3 now: the attempt that paid an order its
-- owner (the order service) answered cancelled owes the money back.
UPDATE lapse_payments SET status = 'REFUND_REQUIRED', updated_at = ?3
WHERE order_id = ?1 AND payment_id = ?2 AND status = 'SUCCEEDED';

-- Stock tasks (store.Tasks; migration 005). The columns every task query
-- returns: id, order_id, action, reservation_id, items, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, result, last_error.

-- name: insert_tasks
-- ?2 is a JSON array of {"id","order_id","action","reservation_id","items"},
-- each PENDING, written at ?1 and due at ?3. UNIQUE (reservation_id, action)
-- refuses a second task of an action (core.ErrMovedTwice).
INSERT INTO lapse_stock_tasks (id, order_id, action, reservation_id, items, next_at, since, created_at)
SELECT value ->> 'id', value ->> 'order_id', value ->> 'action', value ->> 'reservation_id', value ->> 'items', ?3, ?1, ?1
FROM json_each(?2);

-- name: claim_tasks
-- ?1 now, ?2 the lease's end, ?3 batch size. One writer: no row is held by
-- another claim.
UPDATE lapse_stock_tasks SET next_at = ?2, attempts = attempts + 1
WHERE id IN (SELECT id FROM lapse_stock_tasks WHERE status = 'PENDING' AND next_at <= ?1 ORDER BY next_at LIMIT ?3)
RETURNING id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: settle_task
-- ?1 id, ?2 the claim's attempts, ?3 the new status, ?4 now, ?5 due again
-- at, ?6 the answer, ?7 the error (see the PostgreSQL driver).
UPDATE lapse_stock_tasks SET status = ?3, next_at = ?5, result = ?6, last_error = ?7,
    failures = failures + CASE WHEN ?3 = 'DONE' THEN 0 ELSE 1 END,
    done_at = CASE WHEN ?3 = 'DONE' THEN ?4 END,
    dead_at = CASE WHEN ?3 = 'DEAD' THEN ?4 END
WHERE id = ?1 AND attempts = ?2 AND status = 'PENDING';

-- name: task_refs
-- Every task, DONE ones too, in id order: what names it, for reconciling
-- with an inventory's ledger. ?1 the cursor (ids after it), ?2 limit.
SELECT id, order_id, action, reservation_id
FROM lapse_stock_tasks
WHERE id > ?1
ORDER BY id
LIMIT ?2;

-- name: list_tasks
-- ?1 1 for DEAD only, ?2 an order id ('' for any: the tasks not DONE), ?3
-- the cursor, ?4 limit.
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks
WHERE CASE WHEN ?2 <> '' THEN order_id = ?2
           WHEN ?1 THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND id > ?3
ORDER BY id
LIMIT ?4;

-- name: retry_tasks
-- ?1 now, ?2 a JSON array of ids, ?3 1 for every DEAD task.
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = ?1, since = ?1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND (?3 OR id IN (SELECT value FROM json_each(?2)));

-- name: task_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_stock_tasks WHERE status <> 'DONE';

-- name: lock_task
-- ?1 reservation id, ?2 action (one writer: reading is holding).
SELECT id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_stock_tasks WHERE reservation_id = ?1 AND action = ?2;

-- name: lease_task
-- ?1 id, ?2 the lease's end.
UPDATE lapse_stock_tasks SET status = 'PENDING', next_at = ?2, attempts = attempts + 1, dead_at = NULL
WHERE id = ?1
RETURNING id, order_id, action, reservation_id, items, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: orders_of_payment
-- The orders with an attempt named ?1, at most two.
SELECT order_id FROM lapse_payments WHERE payment_id = ?1 ORDER BY order_id LIMIT 2;

-- The dashboard's reads (store.Dashboard), each bounded by an index range
-- whose size does not grow with the table (see the PostgreSQL driver's
-- queries.sql for each one's cost at 10 M orders). Times are Unix ms.

-- name: count_status
-- ?1 status, ?2 the cap: at most ?2 entries of (status, cancel_after).
SELECT COUNT(*) FROM (SELECT 1 FROM lapse_orders WHERE status = ?1 LIMIT ?2);

-- name: hook_failure_note
-- One more failure of a hook: ?1 order id, ?2 event, ?3 error, ?4 now (the
-- first failure makes the record; next_at is set right after by
-- hook_failure_retry).
INSERT INTO lapse_hook_failures (order_id, event, attempts, last_error, first_failed_at, last_failed_at, next_at)
VALUES (?1, ?2, 1, ?3, ?4, ?4, ?4)
ON CONFLICT (order_id, event) DO UPDATE
SET attempts = attempts + 1, last_error = excluded.last_error, last_failed_at = excluded.last_failed_at
RETURNING attempts, first_failed_at;

-- name: hook_failure_retry
UPDATE lapse_hook_failures SET next_at = ?3 WHERE order_id = ?1 AND event = ?2;

-- name: hook_failures_clear
-- The records of orders whose hook held (?1, a JSON array of ids), in the
-- transaction that made their transition.
DELETE FROM lapse_hook_failures WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: hook_failures
-- The records of orders still PENDING, oldest first failure first (?1 at most).
SELECT f.order_id, f.event, f.attempts, f.last_error, f.first_failed_at, f.last_failed_at, f.next_at
FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
WHERE o.status = 'PENDING'
ORDER BY f.first_failed_at, f.order_id
LIMIT ?1;

-- name: count_hook_failing
SELECT count(*) FROM (SELECT 1 FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
                      WHERE o.status = 'PENDING' LIMIT ?1);

-- name: count_refund_required
-- The lapse_orders_refund_required partial index holds flagged orders only.
SELECT COUNT(*) FROM (SELECT 1 FROM lapse_orders WHERE refund_required <> 0 LIMIT ?1);

-- name: due_per_minute
SELECT cancel_after / 60000 * 60, COUNT(*)
FROM lapse_orders WHERE status = 'PENDING' AND cancel_after >= ?1 AND cancel_after < ?2
GROUP BY 1 ORDER BY 1;

-- name: cancelled_per_minute
SELECT cancelled_at / 60000 * 60, COUNT(*)
FROM lapse_orders WHERE cancelled_at IS NOT NULL AND cancelled_at >= ?1 AND cancelled_at < ?2
GROUP BY 1 ORDER BY 1;

-- name: paid_per_minute
SELECT paid_at / 60000 * 60, COUNT(*)
FROM lapse_orders WHERE paid_at IS NOT NULL AND paid_at >= ?1 AND paid_at < ?2
GROUP BY 1 ORDER BY 1;

-- name: refunds_per_minute
-- Payment attempts owing money back (REFUND_REQUIRED, by the minute of the
-- flag: lapse_payments_refund_required) or that gave it back (REFUNDED, by
-- the minute of their refund: its DONE row, found through the small
-- lapse_refunds rather than by scanning every attempt), in [?1, ?2).
SELECT m, COUNT(*) FROM (
    SELECT updated_at / 60000 * 60 AS m
    FROM lapse_payments WHERE status = 'REFUND_REQUIRED' AND updated_at >= ?1 AND updated_at < ?2
    UNION ALL
    SELECT r.done_at / 60000 * 60
    FROM lapse_refunds r JOIN lapse_payments p ON p.payment_id = r.payment_id AND p.status = 'REFUNDED'
    WHERE r.status = 'DONE' AND r.done_at >= ?1 AND r.done_at < ?2
)
GROUP BY m ORDER BY m;

-- name: find_orders
-- ?1 status or '', created_at >= ?2, (?3, ?4) the bound or the cursor, ?5
-- the page size: lapse_orders_created walked backwards.
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE (?1 = '' OR status = ?1) AND created_at >= ?2 AND (created_at, id) < (?3, ?4)
ORDER BY created_at DESC, id DESC
LIMIT ?5;

-- name: find_orders_by_prefix
-- ?1 prefix, ?2 its upper bound, ?3 the cursor (last id), ?4 status or '',
-- created_at in [?5, ?6), ?7 the page size: a range of the primary key
-- (BINARY collation: byte order).
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE id >= ?1 AND id < ?2 AND id > ?3 AND substr(id, 1, length(?1)) = ?1
  AND (?4 = '' OR status = ?4) AND created_at >= ?5 AND created_at < ?6
ORDER BY id
LIMIT ?7;

-- name: refund_orders
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE refund_required <> 0 AND id > ?1
ORDER BY id
LIMIT ?2;

-- name: find_past_deadline
-- ?1 status, ?2 now, (?3, ?4) the cursor (cancel_after, id), ?5 the page
-- size: the range of (status, cancel_after) before now, from the cursor.
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders
WHERE status = ?1 AND cancel_after < ?2 AND cancel_after >= ?3 AND (cancel_after, id) > (?3, ?4)
ORDER BY cancel_after, id
LIMIT ?5;

-- name: order_events
SELECT seq, event_id, type, order_id, payload, created_at FROM lapse_outbox
WHERE order_id = ?1 ORDER BY seq;

-- name: list_skus
SELECT sku, available, locked, sold FROM lapse_skus WHERE sku > ?1 ORDER BY sku LIMIT ?2;

-- name: first_migration
-- When the lowest version recorded was applied: the store's identity (store.Identified).
SELECT applied_at FROM lapse_schema_migrations ORDER BY version LIMIT 1;

-- Order-service mode (store/core/commands.go, docs/order-service.md). The
-- columns every command query returns: id, order_id, cancel_after, status,
-- attempts, failures, next_at, since, created_at, done_at, dead_at, result,
-- last_error.

-- name: command_due
-- cancel_due's twin: the due orders of the batch move to CANCELLING, their
-- cancel commanded of the order service. ?1 now, ?2 JSON array of ids, ?3
-- and ?4 as cancel_due's.
UPDATE lapse_orders SET status = 'CANCELLING', version = version + 1
WHERE id IN (SELECT value FROM json_each(?2))
  AND cancel_after <= ?1
  AND (status = 'PENDING' OR (?4 = 1 AND status = 'PAYING'))
  AND (?3 = 0 OR ?4 = 1 OR payment_attempts = 0)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: claim_command_due
-- claim_due's twin (the same walk of lapse_orders_status_cancel_after; one
-- writer: no SKIP LOCKED). ?1 now, ?2 now - lag, ?3 batch size, ?4 1 to
-- leave attempted orders alone.
UPDATE lapse_orders SET status = 'CANCELLING', version = version + 1
WHERE id IN (SELECT id FROM lapse_orders
             WHERE status = 'PENDING' AND cancel_after <= ?2 AND cancel_after <= ?1 -- never before cancel_after, whatever ?2 says
               AND (?4 = 0 OR payment_attempts = 0)
             ORDER BY cancel_after LIMIT ?3)
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: insert_commands
-- ?1 now, ?2 a JSON array of {"id","order_id","cancel_after"}: PENDING, due
-- now. The same order and deadline again (a retried transaction) keeps the
-- row it has.
INSERT INTO lapse_order_commands (id, order_id, cancel_after, next_at, since, created_at)
SELECT value ->> 'id', value ->> 'order_id', value ->> 'cancel_after', ?1, ?1, ?1
FROM json_each(?2)
WHERE true ON CONFLICT (id) DO NOTHING;

-- name: insert_claimed_commands
-- insert_commands, claimed for the transaction's caller (CancelDueParams.
-- CommandLease): ?1 now, ?2 the JSON array, ?3 the lease's end. Each row as
-- claim_commands leaves one: attempts 1, due again when the lease runs out.
-- Returns the ids written; a command that existed already is left as it
-- is, and not returned.
INSERT INTO lapse_order_commands (id, order_id, cancel_after, next_at, since, created_at, attempts)
SELECT value ->> 'id', value ->> 'order_id', value ->> 'cancel_after', ?3, ?1, ?1, 1
FROM json_each(?2)
WHERE true ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: claim_commands
-- claim_tasks's twin, through lapse_order_commands_due. ?1 now, ?2 the
-- lease's end, ?3 batch size. One writer: no row is held by another claim.
UPDATE lapse_order_commands SET next_at = ?2, attempts = attempts + 1
WHERE id IN (SELECT id FROM lapse_order_commands WHERE status = 'PENDING' AND next_at <= ?1 ORDER BY next_at LIMIT ?3)
RETURNING id, order_id, cancel_after, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, result, last_error;

-- name: settle_command
-- ?1 id, ?2 the claim's attempts, ?3 the new status, ?4 now, ?5 when it is
-- due again, ?6 the answer, ?7 the error, ?8 1 when it counts as a failure.
UPDATE lapse_order_commands SET status = ?3, next_at = ?5, result = ?6, last_error = ?7,
    failures = failures + ?8,
    done_at = CASE WHEN ?3 = 'DONE' THEN ?4 END,
    dead_at = CASE WHEN ?3 = 'DEAD' THEN ?4 END
WHERE id = ?1 AND attempts = ?2 AND status = 'PENDING';

-- name: resolve_commanded
-- The transition an answer decides: ?1 id, ?2 the status it becomes, ?3 now.
-- CANCELLED and PAID come from CANCELLING or PAYING (paying was answered
-- before); PAYING from CANCELLING only.
UPDATE lapse_orders SET status = ?2, version = version + 1,
    cancelled_at = CASE WHEN ?2 = 'CANCELLED' THEN ?3 ELSE cancelled_at END,
    cancel_reason = CASE WHEN ?2 = 'CANCELLED' THEN 'timeout' ELSE cancel_reason END,
    paid_at = CASE WHEN ?2 = 'PAID' THEN ?3 ELSE paid_at END
WHERE id = ?1 AND (status = 'CANCELLING' OR (status = 'PAYING' AND ?2 <> 'PAYING'))
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: list_commands
-- list_tasks's twin: ?1 1 for DEAD only, ?2 an order id ('' for any: the
-- commands not DONE), ?3 the cursor, ?4 limit.
SELECT id, order_id, cancel_after, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, result, last_error
FROM lapse_order_commands
WHERE CASE WHEN ?2 <> '' THEN order_id = ?2
           WHEN ?1 THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND id > ?3
ORDER BY id
LIMIT ?4;

-- name: retry_commands
-- ?1 now, ?2 a JSON array of ids, ?3 1 for every DEAD command.
UPDATE lapse_order_commands SET status = 'PENDING', next_at = ?1, since = ?1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND (?3 OR id IN (SELECT value FROM json_each(?2)));

-- name: purge_commands
-- ?1 a JSON array of ids, ?2 1 for every DEAD command.
DELETE FROM lapse_order_commands WHERE status = 'DEAD' AND (?2 OR id IN (SELECT value FROM json_each(?1)));

-- name: command_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_order_commands WHERE status <> 'DONE';

-- Refunds (store.Refunds; migration 012). The columns every refund query
-- returns: payment_id, order_id, amount_cents, currency, status, attempts,
-- failures, next_at, since, created_at, done_at, dead_at, last_error,
-- refund_id, manual, note, actor.

-- name: insert_refund
-- ?1 payment id, ?2 order id, ?3 amount, ?4 currency, ?5 now. A refund the
-- payment has already is left as it is.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, next_at, since, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5)
ON CONFLICT (payment_id) DO NOTHING;

-- name: claim_refunds
-- claim_tasks's twin, through lapse_refunds_due. ?1 now, ?2 the lease's
-- end, ?3 batch size. One writer: no row is held by another claim.
UPDATE lapse_refunds SET next_at = ?2, attempts = attempts + 1
WHERE payment_id IN (SELECT payment_id FROM lapse_refunds WHERE status = 'PENDING' AND next_at <= ?1 ORDER BY next_at LIMIT ?3)
RETURNING payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
          created_at, done_at, dead_at, last_error, refund_id, manual, note, actor;

-- name: settle_refund
-- ?1 payment id, ?2 the claim's attempts, ?3 the new status, ?4 now, ?5 when
-- it is due again, ?6 the gateway's refund id, ?7 the error. Anything but
-- DONE counts a failure.
UPDATE lapse_refunds SET status = ?3, next_at = ?5, last_error = ?7,
    refund_id = CASE WHEN ?3 = 'DONE' THEN ?6 ELSE refund_id END,
    failures = failures + CASE WHEN ?3 = 'DONE' THEN 0 ELSE 1 END,
    done_at = CASE WHEN ?3 = 'DONE' THEN ?4 END,
    dead_at = CASE WHEN ?3 = 'DEAD' THEN ?4 END
WHERE payment_id = ?1 AND attempts = ?2 AND status = 'PENDING';

-- name: record_refunded
-- An operator's refund: ?1 payment id, ?2 order id, ?3 amount, ?4
-- currency, ?5 now, ?6 the refund id, ?7 manual, ?8 note, ?9 actor. The
-- row is written DONE, or becomes DONE whatever its status.
INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at,
                           done_at, refund_id, manual, note, actor)
VALUES (?1, ?2, ?3, ?4, 'DONE', ?5, ?5, ?5, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (payment_id) DO UPDATE SET status = 'DONE', done_at = ?5, dead_at = NULL, next_at = ?5,
    refund_id = ?6, manual = ?7, note = ?8, actor = ?9;

-- name: refund_payment
-- ?1 order id, ?2 payment id, ?3 now: money owed back was given back.
UPDATE lapse_payments SET status = 'REFUNDED', updated_at = ?3
WHERE order_id = ?1 AND payment_id = ?2 AND status = 'REFUND_REQUIRED';

-- name: clear_refund_required
-- ?1 id: once no attempt of the order owes money.
UPDATE lapse_orders SET refund_required = 0, version = version + 1
WHERE id = ?1 AND refund_required <> 0
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = ?1 AND p.status = 'REFUND_REQUIRED')
RETURNING id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id;

-- name: get_refund
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds WHERE payment_id = ?1;

-- name: list_refunds
-- list_tasks's twin: ?1 1 for DEAD only, ?2 an order id ('' for any: the
-- refunds not DONE), ?3 the cursor (a payment id), ?4 limit.
SELECT payment_id, order_id, amount_cents, currency, status, attempts, failures, next_at, since,
       created_at, done_at, dead_at, last_error, refund_id, manual, note, actor
FROM lapse_refunds
WHERE CASE WHEN ?2 <> '' THEN order_id = ?2
           WHEN ?1 THEN status = 'DEAD'
           ELSE status <> 'DONE' END
  AND payment_id > ?3
ORDER BY payment_id
LIMIT ?4;

-- name: retry_refunds
-- ?1 now, ?2 a JSON array of payment ids, ?3 1 for every DEAD refund.
UPDATE lapse_refunds SET status = 'PENDING', next_at = ?1, since = ?1, failures = 0, dead_at = NULL
WHERE status = 'DEAD' AND (?3 OR payment_id IN (SELECT value FROM json_each(?2)));

-- name: refund_stats
SELECT COALESCE(SUM(status = 'PENDING'), 0), COALESCE(SUM(status = 'DEAD'), 0),
       MIN(CASE WHEN status = 'PENDING' THEN created_at END)
FROM lapse_refunds WHERE status <> 'DONE';

-- Retention (store/core/retention.go): finished orders deleted with their
-- rows, a batch per transaction. One writer: the transaction is the turn,
-- and no row can change under it.

-- name: lock_finished_paid
-- Params: before, limit. Finished orders (store.Retention) paid before ?1,
-- oldest first (lapse_orders_paid_at's walk, past the few old orders kept):
-- nothing owed, no work row not DONE, every event fanned out and no
-- delivery row left (dead ones included), no hook failure.
SELECT o.id FROM lapse_orders o
WHERE o.paid_at < ?1 AND o.status = 'PAID' AND o.refund_required = 0
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (e.fanned_out = 0 OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.paid_at
LIMIT ?2;

-- name: lock_finished_cancelled
-- lock_finished_paid's twin for orders cancelled before ?1; one with a
-- payment attempt only when cancelled before ?3 too (its confirming gateway
-- query is done).
SELECT o.id FROM lapse_orders o
WHERE o.cancelled_at < ?1 AND o.status = 'CANCELLED' AND o.refund_required = 0
  AND (o.cancelled_at < ?3 OR NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id))
  AND NOT EXISTS (SELECT 1 FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('PENDING', 'REFUND_REQUIRED'))
  AND NOT EXISTS (SELECT 1 FROM lapse_stock_tasks t WHERE t.order_id = o.id AND t.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_order_commands c WHERE c.order_id = o.id AND c.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_refunds r WHERE r.order_id = o.id AND r.status <> 'DONE')
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM lapse_outbox e WHERE e.order_id = o.id
                  AND (e.fanned_out = 0 OR EXISTS (SELECT 1 FROM lapse_outbox_deliveries d WHERE d.seq = e.seq)))
ORDER BY o.cancelled_at
LIMIT ?2;

-- name: carry_ledger
-- Params: order ids (JSON array), now. The units of the orders' ledger rows,
-- added per SKU and action to what was carried before.
INSERT INTO lapse_sku_carried (sku, reserved, released, committed, orders, updated_at)
SELECT sku,
       COALESCE(SUM(CASE WHEN action = 'reserve' THEN qty END), 0),
       COALESCE(SUM(CASE WHEN action = 'release' THEN qty END), 0),
       COALESCE(SUM(CASE WHEN action = 'commit' THEN qty END), 0),
       COUNT(DISTINCT order_id), ?2
FROM lapse_stock_ledger WHERE order_id IN (SELECT value FROM json_each(?1))
GROUP BY sku ORDER BY sku
ON CONFLICT (sku) DO UPDATE SET reserved = reserved + excluded.reserved, released = released + excluded.released,
    committed = committed + excluded.committed, orders = orders + excluded.orders, updated_at = excluded.updated_at;

-- name: retention_delete_order_items
DELETE FROM lapse_order_items WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_stock_ledger
DELETE FROM lapse_stock_ledger WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_payments
DELETE FROM lapse_payments WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_stock_tasks
DELETE FROM lapse_stock_tasks WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_order_commands
DELETE FROM lapse_order_commands WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_refunds
DELETE FROM lapse_refunds WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_hook_failures
DELETE FROM lapse_hook_failures WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_outbox
DELETE FROM lapse_outbox WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_idempotency_keys
DELETE FROM lapse_idempotency_keys WHERE order_id IN (SELECT value FROM json_each(?1));

-- name: retention_delete_orders
DELETE FROM lapse_orders WHERE id IN (SELECT value FROM json_each(?1));

-- name: retention_done_stock_tasks
-- Params: before, limit. DONE tasks whose order is gone (the audit reads the
-- others: tasks_match_status).
DELETE FROM lapse_stock_tasks WHERE id IN (
    SELECT t.id FROM lapse_stock_tasks t
    WHERE t.status = 'DONE' AND t.done_at < ?1 AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = t.order_id)
    LIMIT ?2);

-- name: retention_done_order_commands
DELETE FROM lapse_order_commands WHERE id IN (
    SELECT id FROM lapse_order_commands WHERE status = 'DONE' AND done_at < ?1 LIMIT ?2);

-- name: retention_done_refunds
-- DONE refunds whose order is gone (the audit reads the others:
-- refunds_match_attempts).
DELETE FROM lapse_refunds WHERE payment_id IN (
    SELECT r.payment_id FROM lapse_refunds r
    WHERE r.status = 'DONE' AND r.done_at < ?1 AND NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = r.order_id)
    LIMIT ?2);

-- name: oldest_finished
-- Each minimum is the first entry of its partial index.
-- The earlier of the two is taken in Go (SQLite's MIN of NULL is NULL).
SELECT (SELECT MIN(paid_at) FROM lapse_orders WHERE paid_at IS NOT NULL),
       (SELECT MIN(cancelled_at) FROM lapse_orders WHERE cancelled_at IS NOT NULL);
