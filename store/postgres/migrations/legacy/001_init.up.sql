-- lapse schema v1 for PostgreSQL. Times are timestamptz truncated to
-- milliseconds by the driver, the precision every store keeps.

CREATE TABLE skus (
    sku        text        PRIMARY KEY,
    available  bigint      NOT NULL CHECK (available >= 0),
    locked     bigint      NOT NULL DEFAULT 0 CHECK (locked >= 0),
    sold       bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- total changes only by an explicit adjustment; audit checks
    -- available + locked + sold = total.
    total      bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE orders (
    id               text        PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED')),
    amount_cents     bigint      NOT NULL CHECK (amount_cents >= 0),
    currency         text        NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    cancel_after     timestamptz NOT NULL,
    paid_at          timestamptz,
    cancelled_at     timestamptz,
    cancel_reason    text        CHECK (cancel_reason IN ('timeout', 'buyer')),
    payment_id       text,
    refund_required  boolean     NOT NULL DEFAULT false,
    payment_attempts integer     NOT NULL DEFAULT 0,
    version          bigint      NOT NULL DEFAULT 1
);

-- The durable schedule: due orders by status and deadline. The claim query
-- (status = 'PENDING' AND cancel_after <= $now ORDER BY cancel_after LIMIT n)
-- walks it from the oldest deadline and stops after n rows.
CREATE INDEX orders_status_cancel_after ON orders (status, cancel_after);
-- Listing, newest first.
CREATE INDEX orders_created ON orders (created_at, id);

CREATE TABLE order_items (
    order_id text   NOT NULL REFERENCES orders (id),
    sku      text   NOT NULL,
    qty      bigint NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE stock_ledger (
    order_id   text        NOT NULL,
    sku        text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('reserve', 'release', 'commit')),
    qty        bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (order_id, sku, action)
);

CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash text        NOT NULL,
    order_id     text        NOT NULL,
    created_at   timestamptz NOT NULL
);

-- payload is json, not jsonb: the relay delivers the bytes the transaction
-- wrote, in the API's key order, so a signature over them stays reproducible.
CREATE TABLE outbox (
    seq          bigserial   PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    type         text        NOT NULL,
    order_id     text        NOT NULL,
    payload      json        NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz
);

CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
CREATE INDEX outbox_order ON outbox (order_id, type);
