-- Order-service mode (docs/order-service.md): the order service owns its
-- orders, and lapse commands their cancel.
--
-- CANCELLING is an order whose deadline passed and whose cancel lapse has
-- commanded: the order service's answer decides what it becomes. SQLite
-- cannot alter a CHECK, so lapse_orders is built again with the new one, in
-- this migration's transaction: the old table is renamed aside — with
-- legacy_alter_table, so that the foreign keys of lapse_order_items and
-- lapse_payments keep naming lapse_orders — the new one is filled from it,
-- the old one dropped, and the indexes made again.
PRAGMA legacy_alter_table = ON;
ALTER TABLE lapse_orders RENAME TO lapse_orders_010;
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
    cancel_reason    TEXT CHECK (cancel_reason IN ('timeout', 'buyer')),
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
FROM lapse_orders_010;
DROP TABLE lapse_orders_010;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required <> 0;

-- One command per order and deadline (id: ordersvc.CommandID), the local
-- message table of the commands (see the PostgreSQL migration).
CREATE TABLE lapse_order_commands (
    id           TEXT    PRIMARY KEY,
    order_id     TEXT    NOT NULL,
    cancel_after INTEGER NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    failures     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    since        INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    done_at      INTEGER,
    dead_at      INTEGER,
    result       TEXT    NOT NULL DEFAULT '',
    last_error   TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX lapse_order_commands_order ON lapse_order_commands (order_id);
CREATE INDEX lapse_order_commands_due ON lapse_order_commands (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_order_commands_open ON lapse_order_commands (status, id) WHERE status <> 'DONE';
