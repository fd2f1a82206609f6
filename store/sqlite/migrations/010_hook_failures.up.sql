-- Hooks of an embedding service that failed for an order lapse tries again
-- by itself: the OnCancelled of a timeout cancel. One row per order and hook
-- event, written in a transaction of its own after the failing one rolled
-- back (store/core's RecordHookFailure), deleted in the transaction whose
-- hook holds. next_at is when lapse tries again: until then the claim of due
-- orders (claim_due) leaves the order alone. The audit (warn_hook_failing)
-- and the dashboard list the rows whose order is still PENDING.
-- Times are integer milliseconds since the epoch (UTC).
CREATE TABLE lapse_hook_failures (
    order_id        TEXT    NOT NULL,
    event           TEXT    NOT NULL,
    attempts        INTEGER NOT NULL CHECK (attempts > 0),
    last_error      TEXT    NOT NULL,
    first_failed_at INTEGER NOT NULL,
    last_failed_at  INTEGER NOT NULL,
    next_at         INTEGER NOT NULL,
    PRIMARY KEY (order_id, event)
) WITHOUT ROWID;
