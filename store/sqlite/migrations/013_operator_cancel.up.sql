-- An operator's cancel (POST /v1/orders/{id}/cancel with "reason":
-- "operator"): cancel_reason gains 'operator'. SQLite cannot alter a CHECK,
-- so lapse_orders is built again with the new one, in this migration's
-- transaction, the way 011 built it (see there why the rows are copied into
-- a plain table aside rather than the table renamed, and why
-- defer_foreign_keys).
PRAGMA defer_foreign_keys = ON;
CREATE TABLE lapse_orders_before_013 AS SELECT * FROM lapse_orders;
DROP TABLE lapse_orders;
CREATE TABLE lapse_orders (
    id               TEXT    PRIMARY KEY,
    status           TEXT    NOT NULL CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED', 'CANCELLING')),
    amount_cents     INTEGER NOT NULL CHECK (amount_cents >= 0),
    currency         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    cancel_after     INTEGER NOT NULL,
    paid_at          INTEGER,
    cancelled_at     INTEGER,
    cancel_reason    TEXT CHECK (cancel_reason IN ('timeout', 'buyer', 'operator')),
    payment_id       TEXT,
    refund_required  INTEGER NOT NULL DEFAULT 0,
    payment_attempts INTEGER NOT NULL DEFAULT 0,
    version          INTEGER NOT NULL DEFAULT 1,
    reservation_id   TEXT
);
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
                          cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id)
SELECT id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at,
       cancelled_at, cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id
FROM lapse_orders_before_013;
DROP TABLE lapse_orders_before_013;
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required <> 0;
