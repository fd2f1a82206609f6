-- Order-service mode (docs/order-service.md): the order service owns its
-- orders, and lapse commands their cancel.
--
-- CANCELLING is an order whose deadline passed and whose cancel lapse has
-- commanded: the order service's answer decides what it becomes. SQLite
-- cannot alter a CHECK, so lapse_orders is built again with the new one, in
-- this migration's transaction.
--
-- The foreign keys of lapse_order_items and lapse_payments name lapse_orders
-- and must go on naming it. Renaming the table aside would not do: the
-- store's connections run with foreign_keys ON, under which SQLite rewrites
-- every foreign key that names a renamed table (legacy_alter_table or not),
-- so the children would follow the old table and lose their parent when it
-- is dropped. foreign_keys cannot be turned off inside a transaction. So the
-- rows are copied aside into a plain table no key names, lapse_orders is
-- dropped and created again under its own name, and the rows go back. With
-- defer_foreign_keys (which ends with the transaction) the drop's implicit
-- delete counts the children it orphans instead of failing, and putting each
-- order back counts its children found again: the count is back to zero at
-- COMMIT, which would fail otherwise.
PRAGMA defer_foreign_keys = ON;
CREATE TABLE lapse_orders_before_011 AS SELECT * FROM lapse_orders;
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
FROM lapse_orders_before_011;
DROP TABLE lapse_orders_before_011;
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
