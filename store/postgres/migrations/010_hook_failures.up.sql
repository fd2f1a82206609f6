-- Hooks of an embedding service (postgres.Hooks) that failed for an order
-- lapse tries again by itself: the OnCancelled of a timeout cancel. One row
-- per order and hook event, written in a transaction of its own after the
-- failing one rolled back (store/core's RecordHookFailure), deleted in the
-- transaction whose hook holds. next_at is when lapse tries again: until
-- then the claim of due orders (claim_due) leaves the order alone, so a hook
-- that keeps failing is retried with growing gaps, not on every claim. The
-- audit (warn_hook_failing) and the dashboard list the rows whose order is
-- still PENDING.
CREATE TABLE lapse_hook_failures (
    order_id        text        NOT NULL,
    event           text        NOT NULL,
    attempts        integer     NOT NULL CHECK (attempts > 0),
    last_error      text        NOT NULL,
    first_failed_at timestamptz NOT NULL,
    last_failed_at  timestamptz NOT NULL,
    next_at         timestamptz NOT NULL,
    PRIMARY KEY (order_id, event)
);
