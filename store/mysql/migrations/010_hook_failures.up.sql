-- Hooks of an embedding service (mysql.Hooks) that failed for an order
-- lapse tries again by itself: the OnCancelled of a timeout cancel. One row
-- per order and hook event, written in a transaction of its own after the
-- failing one rolled back (store/core's RecordHookFailure), deleted in the
-- transaction whose hook holds. next_at is when lapse tries again: until
-- then the claim of due orders (claim_due) leaves the order alone. The audit
-- (warn_hook_failing) and the dashboard list the rows whose order is still
-- PENDING. One statement, safe to run again (see 009).

-- name: create_hook_failures
CREATE TABLE IF NOT EXISTS lapse_hook_failures (
    order_id        VARCHAR(128) NOT NULL,
    event           VARCHAR(32)  NOT NULL,
    attempts        INT          NOT NULL,
    last_error      TEXT         NOT NULL,
    first_failed_at DATETIME(3)  NOT NULL,
    last_failed_at  DATETIME(3)  NOT NULL,
    next_at         DATETIME(3)  NOT NULL,
    PRIMARY KEY (order_id, event),
    CHECK (attempts > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
