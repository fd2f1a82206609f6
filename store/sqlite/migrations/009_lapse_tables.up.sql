-- lapse schema for SQLite, as of version 9: every object lapse creates is
-- named lapse_*, so lapse can share a database file with the shop's own
-- tables, its own `orders` and a golang-migrate `schema_migrations` included.
--
-- Version 9 is how a database reaches this schema, in one of two ways
-- (store/sqlite/sqlite.go, Migrate):
--   - a fresh database gets this file, recorded in lapse_schema_migrations;
--   - a database of an earlier lapse (its unprefixed tables and lapse's own
--     schema_migrations, migrations 001-008 under migrations/legacy/) is
--     first brought to 008, then renamed in place by migrations/legacy/
--     rename.sql: the same tables and indexes as below, with every row kept.
--     Both run in one transaction.
-- Later migrations (010 on) apply to both alike. Released migration files are
-- never edited: a change is a new file.
--
-- Times are integer milliseconds since the epoch (UTC); booleans are 0 or 1.

CREATE TABLE lapse_skus (
    sku        TEXT    PRIMARY KEY,
    available  INTEGER NOT NULL CHECK (available >= 0),
    locked     INTEGER NOT NULL DEFAULT 0 CHECK (locked >= 0),
    sold       INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- total changes only by an explicit adjustment; audit checks
    -- available + locked + sold = total.
    total      INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- reservation_id names the stock a remote inventory holds for the order
-- (docs/sagas.md); NULL when lapse holds it in lapse_skus.
CREATE TABLE lapse_orders (
    id               TEXT    PRIMARY KEY,
    status           TEXT    NOT NULL CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED')),
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

-- The durable schedule, the listing (newest first), one order per
-- reservation, and the dashboard's partial indexes.
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required <> 0;

CREATE TABLE lapse_order_items (
    order_id TEXT    NOT NULL REFERENCES lapse_orders (id),
    sku      TEXT    NOT NULL,
    qty      INTEGER NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE lapse_stock_ledger (
    order_id   TEXT    NOT NULL,
    sku        TEXT    NOT NULL,
    action     TEXT    NOT NULL CHECK (action IN ('reserve', 'release', 'commit')),
    qty        INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (order_id, sku, action)
);

CREATE TABLE lapse_idempotency_keys (
    key          TEXT    PRIMARY KEY,
    request_hash TEXT    NOT NULL,
    order_id     TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);

-- fanned_out: the event has one lapse_outbox_deliveries row per sink
-- registered when it was fanned out.
CREATE TABLE lapse_outbox (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT    NOT NULL UNIQUE,
    type         TEXT    NOT NULL,
    order_id     TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    published_at INTEGER,
    fanned_out   INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX lapse_outbox_unpublished ON lapse_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX lapse_outbox_order ON lapse_outbox (order_id, type);
CREATE INDEX lapse_outbox_unfanned ON lapse_outbox (seq) WHERE fanned_out = 0;
CREATE INDEX lapse_outbox_published ON lapse_outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE lapse_payment_callbacks (
    callback_id TEXT    PRIMARY KEY,
    order_id    TEXT    NOT NULL,
    seen_at     INTEGER NOT NULL
);

CREATE INDEX lapse_payment_callbacks_seen_at ON lapse_payment_callbacks (seen_at);

-- Payment attempts, each with its own status; conflicts counts later reports
-- that disagreed with an ended one; currency is the one its success was
-- reported in ('' read as the order's).
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

CREATE INDEX lapse_payments_refund_required ON lapse_payments (updated_at) WHERE status = 'REFUND_REQUIRED';
CREATE UNIQUE INDEX lapse_payments_payment_id_unique ON lapse_payments (payment_id);

CREATE TABLE lapse_outbox_sinks (
    name          TEXT    PRIMARY KEY,
    registered_at INTEGER NOT NULL
);

CREATE TABLE lapse_outbox_deliveries (
    sink             TEXT    NOT NULL,
    seq              INTEGER NOT NULL,
    order_id         TEXT    NOT NULL,
    next_at          INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    refusals         INTEGER NOT NULL DEFAULT 0,
    first_refused_at INTEGER,
    last_error       TEXT,
    dead             INTEGER NOT NULL DEFAULT 0,
    dead_at          INTEGER,
    PRIMARY KEY (sink, seq)
) WITHOUT ROWID;
CREATE INDEX lapse_outbox_deliveries_order ON lapse_outbox_deliveries (sink, order_id, seq);
CREATE INDEX lapse_outbox_deliveries_seq ON lapse_outbox_deliveries (seq);

-- Stock held by another service (docs/sagas.md): one row per (reservation,
-- action), the key refusing a second one.
CREATE TABLE lapse_stock_tasks (
    id             TEXT    PRIMARY KEY,
    order_id       TEXT    NOT NULL,
    action         TEXT    NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    reservation_id TEXT    NOT NULL,
    items          TEXT    NOT NULL,
    status         TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    failures       INTEGER NOT NULL DEFAULT 0,
    next_at        INTEGER NOT NULL,
    since          INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    done_at        INTEGER,
    dead_at        INTEGER,
    result         TEXT    NOT NULL DEFAULT '',
    last_error     TEXT    NOT NULL DEFAULT '',
    UNIQUE (reservation_id, action)
) WITHOUT ROWID;
CREATE INDEX lapse_stock_tasks_order ON lapse_stock_tasks (order_id);
CREATE INDEX lapse_stock_tasks_due ON lapse_stock_tasks (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_stock_tasks_open ON lapse_stock_tasks (status, id) WHERE status <> 'DONE';
