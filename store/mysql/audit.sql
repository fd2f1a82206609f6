-- The invariants of docs/architecture.md §9, with the same names as every other store.
-- Each query returns one row per violation, one text column `detail` that a
-- person can read. Before each check, Audit sets two session variables in
-- its transaction (audit_params in queries.sql): @now, the audit's clock
-- (DATETIME(3), UTC), and @lag_ms, the allowed lag in milliseconds. Names
-- prefixed `warn_` are warnings: worth a look, no invariant broken.

-- name: stock_conserved
SELECT CONCAT('sku ', sku, ': available ', available, ' + locked ', locked, ' + sold ', sold,
              ' != total ', total) AS detail
FROM lapse_skus WHERE available + locked + sold != total;

-- name: locked_matches_open_orders
SELECT CONCAT('sku ', s.sku, ': locked ', s.locked, ' but open orders hold ', COALESCE(h.qty, 0)) AS detail
FROM lapse_skus s
LEFT JOIN (SELECT i.sku, SUM(i.qty) AS qty FROM lapse_order_items i JOIN lapse_orders o ON o.id = i.order_id
           WHERE o.status IN ('PENDING', 'PAYING') AND o.reservation_id IS NULL GROUP BY i.sku) h ON h.sku = s.sku
WHERE s.locked != COALESCE(h.qty, 0);

-- name: sold_matches_commits
-- The commits of orders retention deleted are carried in lapse_sku_carried.
SELECT CONCAT('sku ', s.sku, ': sold ', s.sold, ' but ledger commits ', COALESCE(c.qty, 0),
              ' and ', COALESCE(k.committed, 0), ' carried from deleted orders') AS detail
FROM lapse_skus s
LEFT JOIN (SELECT sku, SUM(qty) AS qty FROM lapse_stock_ledger WHERE action = 'commit' GROUP BY sku) c ON c.sku = s.sku
LEFT JOIN lapse_sku_carried k ON k.sku = s.sku
WHERE s.sold != COALESCE(c.qty, 0) + COALESCE(k.committed, 0);

-- name: ledger_matches_status
-- Every item of an order whose stock lapse holds has one reserve; PAID items
-- one commit and no release; CANCELLED items one release and no commit; open
-- items neither. An order whose stock a remote inventory holds has none.
SELECT CONCAT('order ', o.id, ' (', o.status, ') sku ', i.sku, ': reserve ', (r.order_id IS NOT NULL),
              ', release ', (rl.order_id IS NOT NULL), ', commit ', (c.order_id IS NOT NULL)) AS detail
FROM lapse_orders o
JOIN lapse_order_items i ON i.order_id = o.id
LEFT JOIN lapse_stock_ledger r  ON r.order_id = i.order_id  AND r.sku = i.sku  AND r.action = 'reserve'
LEFT JOIN lapse_stock_ledger rl ON rl.order_id = i.order_id AND rl.sku = i.sku AND rl.action = 'release'
LEFT JOIN lapse_stock_ledger c  ON c.order_id = i.order_id  AND c.sku = i.sku  AND c.action = 'commit'
WHERE (o.reservation_id IS NOT NULL AND (r.order_id IS NOT NULL OR rl.order_id IS NOT NULL OR c.order_id IS NOT NULL))
   OR (o.reservation_id IS NULL AND (
          r.order_id IS NULL
       OR (o.status = 'PAID' AND (c.order_id IS NULL OR rl.order_id IS NOT NULL))
       OR (o.status = 'CANCELLED' AND (rl.order_id IS NULL OR c.order_id IS NOT NULL))
       OR (o.status IN ('PENDING', 'PAYING') AND (rl.order_id IS NOT NULL OR c.order_id IS NOT NULL))));

-- name: paid_xor_cancelled
SELECT CONCAT('order ', id, ' (', status, '): paid_at ', COALESCE(paid_at, '-'), ', cancelled_at ',
              COALESCE(cancelled_at, '-')) AS detail
FROM lapse_orders
WHERE (paid_at IS NOT NULL AND cancelled_at IS NOT NULL)
   OR (status = 'PAID' AND paid_at IS NULL)
   OR (status = 'CANCELLED' AND (cancelled_at IS NULL OR cancel_reason IS NULL))
   OR (status IN ('PENDING', 'PAYING') AND (paid_at IS NOT NULL OR cancelled_at IS NOT NULL));

-- name: timeout_not_early
SELECT CONCAT('order ', id, ': cancelled for timeout at ', cancelled_at, ' before cancel_after ',
              cancel_after) AS detail
FROM lapse_orders WHERE status = 'CANCELLED' AND cancel_reason = 'timeout' AND cancelled_at < cancel_after;

-- name: refund_matches_payments
-- refund_required exactly when an attempt's success is money to give back:
-- REFUND_REQUIRED. A REFUNDED attempt's money went back: it owes nothing.
SELECT CONCAT('order ', o.id, ' (', o.status, '): refund_required ', o.refund_required,
              ', payments to refund ', COUNT(p.payment_id), ', refunded ',
              (SELECT COUNT(*) FROM lapse_payments r WHERE r.order_id = o.id AND r.status = 'REFUNDED')) AS detail
FROM lapse_orders o LEFT JOIN lapse_payments p ON p.order_id = o.id AND p.status = 'REFUND_REQUIRED'
GROUP BY o.id, o.status, o.refund_required
HAVING (o.refund_required != FALSE) != (COUNT(p.payment_id) > 0);

-- name: refunds_match_attempts
-- Every REFUNDED attempt has a DONE refund (an operator's refund too:
-- manual), and every DONE refund's attempt is REFUNDED.
SELECT CONCAT('payment ', p.payment_id, ' of order ', p.order_id, ': attempt REFUNDED, refund ',
              COALESCE(r.status, 'missing')) AS detail
FROM lapse_payments p LEFT JOIN lapse_refunds r ON r.payment_id = p.payment_id
WHERE p.status = 'REFUNDED' AND (r.status IS NULL OR r.status != 'DONE' OR r.order_id != p.order_id)
UNION ALL
SELECT CONCAT('payment ', r.payment_id, ' of order ', r.order_id, ': refund DONE, attempt ',
              COALESCE(p.status, 'missing')) AS detail
FROM lapse_refunds r LEFT JOIN lapse_payments p ON p.payment_id = r.payment_id AND p.order_id = r.order_id
WHERE r.status = 'DONE' AND (p.status IS NULL OR p.status != 'REFUNDED');

-- name: warn_refunds_not_done
-- DEAD refunds (money still owed: an operator retries them, or refunds
-- outside lapse and marks them refunded), and PENDING ones older than the
-- allowed lag.
SELECT CONCAT('refund of payment ', payment_id, ' (order ', order_id, ', ', amount_cents, ' ', currency, '): ',
              status, ' after ', attempts, ' attempts, written ', TIMESTAMPDIFF(MICROSECOND, created_at, @now) DIV 1000,
              ' ms ago', CASE WHEN last_error != '' THEN CONCAT('; last error: ', last_error) ELSE '' END) AS detail
FROM lapse_refunds
WHERE status = 'DEAD'
   OR (status = 'PENDING' AND since < CAST(@now AS DATETIME(3)) - INTERVAL (@lag_ms * 1000) MICROSECOND);

-- name: events_once_per_transition
-- order.created once per order, order.paid once per PAID order, order.cancelled
-- once per CANCELLED order, order.refund_required once per payment to give back
-- (REFUND_REQUIRED, or REFUNDED since), order.refunded once per REFUNDED
-- payment, and none elsewhere.
-- order.extended (a deadline moved) may come any number of times: it is not counted.
SELECT CONCAT('order ', o.id, ' (', o.status, '): created ', COALESCE(e.created, 0), ', paid ',
              COALESCE(e.paid, 0), ', cancelled ', COALESCE(e.cancelled, 0), ', refund_required ',
              COALESCE(e.refund, 0), ', refunded ', COALESCE(e.refunded, 0)) AS detail
FROM lapse_orders o
LEFT JOIN (SELECT order_id,
                  SUM(type = 'order.created') AS created, SUM(type = 'order.paid') AS paid,
                  SUM(type = 'order.cancelled') AS cancelled, SUM(type = 'order.refund_required') AS refund,
                  SUM(type = 'order.refunded') AS refunded
           FROM lapse_outbox GROUP BY order_id) e ON e.order_id = o.id
WHERE COALESCE(e.created, 0) != 1
   OR COALESCE(e.paid, 0) != (o.status = 'PAID')
   OR COALESCE(e.cancelled, 0) != (o.status = 'CANCELLED')
   OR COALESCE(e.refund, 0) != (SELECT COUNT(*) FROM lapse_payments p WHERE p.order_id = o.id AND p.status IN ('REFUND_REQUIRED', 'REFUNDED'))
   OR COALESCE(e.refunded, 0) != (SELECT COUNT(*) FROM lapse_payments p WHERE p.order_id = o.id AND p.status = 'REFUNDED');

-- name: paid_by_its_attempt
-- A PAID order's paying attempt is SUCCEEDED with the order's amount and
-- currency ('' on an attempt recorded before currencies were: the order's)
-- — or owes the money back (REFUND_REQUIRED, REFUNDED since) when the order
-- service answered cancelled for the order lapse saw paid.
SELECT CONCAT('order ', o.id, ' (PAID by ', o.payment_id, '): attempt ', COALESCE(p.status, 'missing'), ' of ',
              COALESCE(p.amount_cents, 0), ' ', COALESCE(p.currency, ''), ', order ', o.amount_cents, ' ',
              o.currency) AS detail
FROM lapse_orders o LEFT JOIN lapse_payments p ON p.order_id = o.id AND p.payment_id = o.payment_id
WHERE o.status = 'PAID' AND o.payment_id IS NOT NULL
  AND (p.payment_id IS NULL OR p.amount_cents <> o.amount_cents OR p.currency NOT IN ('', o.currency)
       OR (p.status <> 'SUCCEEDED'
           AND NOT (p.status IN ('REFUND_REQUIRED', 'REFUNDED')
                    AND EXISTS (SELECT 1 FROM lapse_order_commands c
                                WHERE c.order_id = o.id AND c.result IN ('cancelled', 'already_cancelled')))));

-- name: no_open_attempt_on_final
-- A PAID or CANCELLED order has no PENDING attempt: one superseded by the
-- payment that paid is SUPERSEDED, one the gateway closed before a cancel FAILED.
SELECT CONCAT('order ', o.id, ' (', o.status, '): attempt ', p.payment_id, ' is still PENDING') AS detail
FROM lapse_payments p JOIN lapse_orders o ON o.id = p.order_id
WHERE p.status = 'PENDING' AND o.status IN ('PAID', 'CANCELLED');

-- name: payment_id_on_one_order
-- One payment is money for one order: a payment id on two orders could pay both.
SELECT CONCAT('payment ', payment_id, ': on ', COUNT(DISTINCT order_id), ' orders (', MIN(order_id), ' … ',
              MAX(order_id), ')') AS detail
FROM lapse_payments GROUP BY payment_id HAVING COUNT(DISTINCT order_id) > 1;

-- name: pending_past_deadline
-- An order whose OnCancelled keeps failing is not lost: warn_hook_failing
-- reports it instead.
SELECT CONCAT('order ', id, ': PENDING, cancel_after ', cancel_after, ' is ',
              TIMESTAMPDIFF(MICROSECOND, cancel_after, @now) DIV 1000, ' ms ago') AS detail
FROM lapse_orders o
WHERE status = 'PENDING' AND cancel_after < CAST(@now AS DATETIME(3)) - INTERVAL (@lag_ms * 1000) MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM lapse_hook_failures f WHERE f.order_id = o.id AND f.event = 'cancelled');

-- name: warn_hook_failing
-- PENDING orders whose hook of an embedding service keeps failing (lapse
-- tries them again with backoff), the oldest first failure first.
SELECT CONCAT('order ', f.order_id, ': hook on ', f.event, ' failing for ',
              TIMESTAMPDIFF(MICROSECOND, f.first_failed_at, @now) DIV 1000, ' ms, ', f.attempts,
              ' attempts, next at ', f.next_at, '; last error: ', f.last_error) AS detail
FROM lapse_hook_failures f JOIN lapse_orders o ON o.id = f.order_id
WHERE o.status = 'PENDING'
ORDER BY f.first_failed_at, f.order_id;

-- name: warn_paying_past_deadline
SELECT CONCAT('order ', id, ': PAYING, cancel_after ', cancel_after, ' is ',
              TIMESTAMPDIFF(MICROSECOND, cancel_after, @now) DIV 1000,
              ' ms ago; waiting for the payment outcome') AS detail
FROM lapse_orders WHERE status = 'PAYING' AND cancel_after <= CAST(@now AS DATETIME(3));

-- name: tasks_match_status
-- An order whose stock a remote inventory holds: CANCELLED, one release task
-- and no confirm; PAID, one confirm and no release; open, neither.
SELECT CONCAT('order ', o.id, ' (', o.status, '): release task ', (rl.id IS NOT NULL),
              ', confirm task ', (c.id IS NOT NULL)) AS detail
FROM lapse_orders o
LEFT JOIN lapse_stock_tasks rl ON rl.reservation_id = o.reservation_id AND rl.action = 'release'
LEFT JOIN lapse_stock_tasks c  ON c.reservation_id = o.reservation_id  AND c.action = 'confirm'
WHERE o.reservation_id IS NOT NULL
  AND ((o.status = 'PAID') != (c.id IS NOT NULL) OR (o.status = 'CANCELLED') != (rl.id IS NOT NULL));

-- name: warn_stock_tasks_not_done
-- DEAD tasks, and PENDING ones older than the allowed lag.
SELECT CONCAT('task ', id, ' (', action, ' of order ', order_id, '): ', status, ' after ', attempts,
              ' attempts, written ', TIMESTAMPDIFF(MICROSECOND, created_at, @now) DIV 1000, ' ms ago',
              CASE WHEN last_error != '' THEN CONCAT('; last error: ', last_error) ELSE '' END) AS detail
FROM lapse_stock_tasks
WHERE status = 'DEAD'
   OR (status = 'PENDING' AND since < CAST(@now AS DATETIME(3)) - INTERVAL (@lag_ms * 1000) MICROSECOND);

-- name: commanded_unanswered
-- Order-service mode: a deadline past due (beyond the allowed lag) with no
-- final answer. CANCELLING: the command is failing, DEAD or purged. PAYING
-- with its command DEAD, or PENDING after a send that got no answer (the
-- order service said paying, then stopped answering). PAYING whose last
-- answer is paying waits for a payment in flight: paying_past_deadline warns.
SELECT CONCAT('order ', o.id, ': ', o.status, ', cancel_after ', o.cancel_after, ' is ',
              TIMESTAMPDIFF(MICROSECOND, o.cancel_after, @now) DIV 1000, ' ms ago; ',
              CASE WHEN c.id IS NULL THEN 'no command (purged?)'
                   ELSE CONCAT('command ', c.id, ' ', c.status, ' after ', c.attempts, ' attempts',
                               CASE WHEN c.result != '' THEN CONCAT(', last answer ', c.result) ELSE '' END,
                               CASE WHEN c.last_error != '' THEN CONCAT(', last error: ', c.last_error) ELSE '' END)
              END) AS detail
FROM lapse_orders o
LEFT JOIN lapse_order_commands c ON c.order_id = o.id AND c.cancel_after = o.cancel_after
WHERE o.status IN ('CANCELLING', 'PAYING')
  AND o.cancel_after < CAST(@now AS DATETIME(3)) - INTERVAL (@lag_ms * 1000) MICROSECOND
  AND (o.status = 'CANCELLING' OR c.status = 'DEAD' OR (c.status = 'PENDING' AND c.result != 'paying'));

-- name: warn_commands_dead
-- DEAD commands wait for an operator: POST /v1/commands/retry sends them
-- again, /purge gives up on them (their orders then stay CANCELLING).
SELECT CONCAT('command ', id, ' (order ', order_id, ', cancel_after ', cancel_after, '): DEAD after ', attempts,
              ' attempts, ', TIMESTAMPDIFF(MICROSECOND, COALESCE(dead_at, created_at), @now) DIV 1000, ' ms ago',
              CASE WHEN result != '' THEN CONCAT('; answer ', result) ELSE '' END,
              CASE WHEN last_error != '' THEN CONCAT('; last error: ', last_error) ELSE '' END) AS detail
FROM lapse_order_commands WHERE status = 'DEAD';
