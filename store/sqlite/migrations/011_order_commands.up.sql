-- Order-service mode (docs/order-service.md): the order service owns its
-- orders, and lapse commands their cancel.
--
-- CANCELLING is an order whose deadline passed and whose cancel lapse has
-- commanded: the order service's answer decides what it becomes. SQLite
-- cannot alter a CHECK, so lapse_orders is built again with the new one, in
-- this migration's transaction, with foreign keys enforced (a transaction
-- cannot turn them off): the old table is renamed aside, which points the
-- foreign keys of lapse_order_items and lapse_payments at it; the new one is
-- filled from it; the two child tables are built again the same way, their
-- keys naming the new lapse_orders; then the old tables go, and every index
-- is made again.
ALTER TABLE lapse_orders RENAME TO lapse_orders_old;
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
FROM lapse_orders_old;

ALTER TABLE lapse_order_items RENAME TO lapse_order_items_old;
CREATE TABLE lapse_order_items (
    order_id TEXT    NOT NULL REFERENCES lapse_orders (id),
    sku      TEXT    NOT NULL,
    qty      INTEGER NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);
INSERT INTO lapse_order_items (order_id, sku, qty) SELECT order_id, sku, qty FROM lapse_order_items_old;
DROP TABLE lapse_order_items_old;

ALTER TABLE lapse_payments RENAME TO lapse_payments_old;
CREATE TABLE lapse_payments (
    order_id     TEXT    NOT NULL REFERENCES lapse_orders (id),
    payment_id   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED')),
    amount_cents INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    currency     TEXT    NOT NULL DEFAULT '',
    conflicts    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, payment_id)
);
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, created_at, updated_at, currency, conflicts)
SELECT order_id, payment_id, status, amount_cents, created_at, updated_at, currency, conflicts FROM lapse_payments_old;
DROP TABLE lapse_payments_old;
DROP TABLE lapse_orders_old;

CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required <> 0;
CREATE INDEX lapse_payments_refund_required ON lapse_payments (updated_at) WHERE status = 'REFUND_REQUIRED';
CREATE UNIQUE INDEX lapse_payments_payment_id_unique ON lapse_payments (payment_id);

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
