-- lapse schema v1 for SQLite. Times are INTEGER Unix milliseconds (UTC).

CREATE TABLE skus (
    sku        TEXT    PRIMARY KEY,
    available  INTEGER NOT NULL CHECK (available >= 0),
    locked     INTEGER NOT NULL DEFAULT 0 CHECK (locked >= 0),
    sold       INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- total changes only by an explicit adjustment; audit checks
    -- available + locked + sold = total.
    total      INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE orders (
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
    version          INTEGER NOT NULL DEFAULT 1
);

-- The durable schedule: due orders by status and deadline (seeding, sweeps, audit).
CREATE INDEX orders_status_cancel_after ON orders (status, cancel_after);
-- Listing, newest first.
CREATE INDEX orders_created ON orders (created_at, id);

CREATE TABLE order_items (
    order_id TEXT    NOT NULL REFERENCES orders (id),
    sku      TEXT    NOT NULL,
    qty      INTEGER NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE stock_ledger (
    order_id   TEXT    NOT NULL,
    sku        TEXT    NOT NULL,
    action     TEXT    NOT NULL CHECK (action IN ('reserve', 'release', 'commit')),
    qty        INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (order_id, sku, action)
);

CREATE TABLE idempotency_keys (
    key          TEXT    PRIMARY KEY,
    request_hash TEXT    NOT NULL,
    order_id     TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE TABLE outbox (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT    NOT NULL UNIQUE,
    type         TEXT    NOT NULL,
    order_id     TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    published_at INTEGER
);

CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
CREATE INDEX outbox_order ON outbox (order_id, type);
