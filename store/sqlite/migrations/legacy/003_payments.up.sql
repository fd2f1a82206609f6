-- Payment attempts: every pay names (or is given) a payment_id, the id the
-- client uses at the gateway, and each attempt keeps its own status, so a
-- callback acts on the attempt it names (a late FAILED of attempt 1 cannot
-- undo attempt 2) and every success is accounted for — the one that paid the
-- order, or money to give back (REFUND_REQUIRED).
CREATE TABLE payments (
    order_id     TEXT    NOT NULL REFERENCES orders (id),
    payment_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED')),
    amount_cents INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (order_id, payment_id)
);

-- Orders flagged before attempts were recorded: their late payment becomes
-- the attempt to refund, so refund_required keeps matching the attempts.
INSERT INTO payments (order_id, payment_id, status, amount_cents, created_at, updated_at)
SELECT id, COALESCE(payment_id, id || '-refund'), 'REFUND_REQUIRED', amount_cents, created_at, created_at
FROM orders WHERE refund_required != 0;
