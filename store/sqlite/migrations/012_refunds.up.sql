-- Refunds (--auto-refund): money a payment attempt owes back goes back
-- through the gateway, by a task of its own.
--
-- REFUNDED is an attempt whose money was given back (REFUND_REQUIRED
-- before). SQLite cannot alter a CHECK, so lapse_payments is built again
-- with the new one, in this migration's transaction, as 011 built
-- lapse_orders: the rows are copied aside into a plain table, the table is
-- dropped and created again under its own name (no foreign key names it;
-- its own names lapse_orders, which stays), and the rows go back.
CREATE TABLE lapse_payments_before_012 AS SELECT * FROM lapse_payments;
DROP TABLE lapse_payments;
CREATE TABLE lapse_payments (
    order_id     TEXT    NOT NULL REFERENCES lapse_orders (id),
    payment_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED')),
    amount_cents INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    currency     TEXT    NOT NULL DEFAULT '',
    conflicts    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, payment_id)
);
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, created_at, updated_at, currency, conflicts)
SELECT order_id, payment_id, status, amount_cents, created_at, updated_at, currency, conflicts
FROM lapse_payments_before_012;
DROP TABLE lapse_payments_before_012;
CREATE INDEX lapse_payments_refund_required ON lapse_payments (updated_at) WHERE status = 'REFUND_REQUIRED';
CREATE UNIQUE INDEX lapse_payments_payment_id_unique ON lapse_payments (payment_id);

-- One refund per payment attempt (see the PostgreSQL migration).
CREATE TABLE lapse_refunds (
    payment_id   TEXT    PRIMARY KEY,
    order_id     TEXT    NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    failures     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    since        INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    done_at      INTEGER,
    dead_at      INTEGER,
    last_error   TEXT    NOT NULL DEFAULT '',
    refund_id    TEXT    NOT NULL DEFAULT '',
    manual       INTEGER NOT NULL DEFAULT 0,
    note         TEXT    NOT NULL DEFAULT '',
    actor        TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX lapse_refunds_order ON lapse_refunds (order_id);
CREATE INDEX lapse_refunds_due ON lapse_refunds (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_refunds_open ON lapse_refunds (status, payment_id) WHERE status <> 'DONE';
