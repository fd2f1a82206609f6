-- Payment attempts: every pay names (or is given) a payment_id, the id the
-- client uses at the gateway, and each attempt keeps its own status, so a
-- callback acts on the attempt it names (a late FAILED of attempt 1 cannot
-- undo attempt 2) and every success is accounted for — the one that paid the
-- order, or money to give back (REFUND_REQUIRED).
-- One statement per section, each safe to run again (see 001_init.up.sql).

-- name: create_payments
-- payment_id is as wide as orders.payment_id, which every attempt's id is
-- copied to (and the backfill below copies from).
CREATE TABLE IF NOT EXISTS payments (
    order_id     VARCHAR(128) NOT NULL,
    payment_id   VARCHAR(255) NOT NULL,
    status       VARCHAR(16)  NOT NULL,
    amount_cents BIGINT       NOT NULL DEFAULT 0,
    created_at   DATETIME(3)  NOT NULL,
    updated_at   DATETIME(3)  NOT NULL,
    PRIMARY KEY (order_id, payment_id),
    CONSTRAINT payments_order FOREIGN KEY (order_id) REFERENCES orders (id),
    CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: backfill_refunds
-- Orders flagged before attempts were recorded: their late payment becomes
-- the attempt to refund, so refund_required keeps matching the attempts.
-- IGNORE skips the rows a first, interrupted run inserted; it could hide
-- nothing else: the order ids come from orders (the foreign key holds), the
-- status is a constant the CHECK accepts and the ids fit their columns.
INSERT IGNORE INTO payments (order_id, payment_id, status, amount_cents, created_at, updated_at)
SELECT id, COALESCE(payment_id, CONCAT(id, '-refund')), 'REFUND_REQUIRED', amount_cents, created_at, created_at
FROM orders WHERE refund_required != FALSE;
