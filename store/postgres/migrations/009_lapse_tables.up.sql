-- lapse schema for PostgreSQL, as of version 9: every object lapse creates
-- is named lapse_*, so lapse can share a database (and a schema) with the
-- shop's own tables, its own `orders` and a golang-migrate `schema_migrations`
-- included.
--
-- Version 9 is how a database reaches this schema, in one of two ways
-- (store/postgres/postgres.go, Migrate):
--   - a fresh database gets this file, recorded in lapse_schema_migrations;
--   - a database of an earlier lapse (its unprefixed tables and lapse's own
--     schema_migrations, migrations 001-008 under migrations/legacy/) is
--     first brought to 008, then renamed in place by migrations/legacy/
--     rename.sql: the same tables, indexes, constraints and sequence as
--     below, with every row kept. Both run in one transaction.
-- Later migrations (010 on) apply to both alike. Released migration files are
-- never edited: a change is a new file.
--
-- Times are timestamptz truncated to milliseconds by the driver, the
-- precision every store keeps. Constraint, index and sequence names are the
-- ones PostgreSQL derives from the table name (lapse_orders_pkey, …) or
-- given below; store/postgres/exec.go maps constraint names to errors.

CREATE TABLE lapse_skus (
    sku        text        PRIMARY KEY,
    available  bigint      NOT NULL CHECK (available >= 0),
    locked     bigint      NOT NULL DEFAULT 0 CHECK (locked >= 0),
    sold       bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- total changes only by an explicit adjustment; audit checks
    -- available + locked + sold = total.
    total      bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);

-- reservation_id names the stock a remote inventory holds for the order
-- (docs/sagas.md); NULL when lapse holds it in lapse_skus.
CREATE TABLE lapse_orders (
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
    version          bigint      NOT NULL DEFAULT 1,
    reservation_id   text
);

-- The durable schedule: due orders by status and deadline. The claim query
-- (status = 'PENDING' AND cancel_after <= $now ORDER BY cancel_after LIMIT n)
-- walks it from the oldest deadline and stops after n rows.
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
-- Listing, newest first.
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
-- A reservation backs one order.
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
-- The dashboard's counts (store.Dashboard) read index ranges, never the whole
-- table; the partial indexes hold only the rows they serve.
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required;

CREATE TABLE lapse_order_items (
    order_id text   NOT NULL REFERENCES lapse_orders (id),
    sku      text   NOT NULL,
    qty      bigint NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku)
);

-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE lapse_stock_ledger (
    order_id   text        NOT NULL,
    sku        text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('reserve', 'release', 'commit')),
    qty        bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (order_id, sku, action)
);

CREATE TABLE lapse_idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash text        NOT NULL,
    order_id     text        NOT NULL,
    created_at   timestamptz NOT NULL
);

-- payload is json, not jsonb: the relay delivers the bytes the transaction
-- wrote, in the API's key order, so a signature over them stays reproducible.
-- fanned_out: the event has one lapse_outbox_deliveries row per sink
-- registered when it was fanned out.
CREATE TABLE lapse_outbox (
    seq          bigserial   PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    type         text        NOT NULL,
    order_id     text        NOT NULL,
    payload      json        NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz,
    fanned_out   boolean     NOT NULL DEFAULT false
);

CREATE INDEX lapse_outbox_unpublished ON lapse_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX lapse_outbox_order ON lapse_outbox (order_id, type);
CREATE INDEX lapse_outbox_unfanned ON lapse_outbox (seq) WHERE NOT fanned_out;
CREATE INDEX lapse_outbox_published ON lapse_outbox (published_at) WHERE published_at IS NOT NULL;

-- Callbacks already applied, by a digest of their signature and body, so a
-- replayed callback changes nothing. Rows older than an hour are purged.
CREATE TABLE lapse_payment_callbacks (
    callback_id text        PRIMARY KEY,
    order_id    text        NOT NULL,
    seen_at     timestamptz NOT NULL
);

CREATE INDEX lapse_payment_callbacks_seen_at ON lapse_payment_callbacks (seen_at);

-- Payment attempts, each with its own status (docs/architecture.md). An
-- attempt that has ended (SUCCEEDED, REFUND_REQUIRED) is terminal: a later
-- report that disagrees is counted in conflicts. currency is the one its
-- success was reported in ('' read as the order's).
CREATE TABLE lapse_payments (
    order_id     text        NOT NULL REFERENCES lapse_orders (id),
    payment_id   text        NOT NULL,
    status       text        NOT NULL CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED')),
    amount_cents bigint      NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    currency     text        NOT NULL DEFAULT '',
    conflicts    integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, payment_id)
);

CREATE INDEX lapse_payments_refund_required ON lapse_payments (updated_at) WHERE status = 'REFUND_REQUIRED';
-- One payment id, one order; a notification naming only the payment finds
-- its order here.
CREATE UNIQUE INDEX lapse_payments_payment_id_unique ON lapse_payments (payment_id);

-- Events out to several sinks, shared by any number of relays. Fan-outs take
-- lapse_outbox_fanout's row (FOR UPDATE SKIP LOCKED) so they run one at a
-- time. lapse_outbox_deliveries: one row per (sink, event) not yet delivered.
CREATE TABLE lapse_outbox_sinks (
    name          text        PRIMARY KEY,
    registered_at timestamptz NOT NULL
);

CREATE TABLE lapse_outbox_fanout (
    id int PRIMARY KEY CHECK (id = 1)
);
INSERT INTO lapse_outbox_fanout (id) VALUES (1);

CREATE TABLE lapse_outbox_deliveries (
    sink             text        NOT NULL,
    seq              bigint      NOT NULL,
    order_id         text        NOT NULL,
    next_at          timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    refusals         integer     NOT NULL DEFAULT 0,
    first_refused_at timestamptz,
    last_error       text,
    dead             boolean     NOT NULL DEFAULT false,
    dead_at          timestamptz,
    PRIMARY KEY (sink, seq)
);
CREATE INDEX lapse_outbox_deliveries_order ON lapse_outbox_deliveries (sink, order_id, seq);
CREATE INDEX lapse_outbox_deliveries_seq ON lapse_outbox_deliveries (seq);
CREATE INDEX lapse_outbox_deliveries_dead ON lapse_outbox_deliveries (sink, seq) WHERE dead;

-- Stock held by another service (docs/sagas.md): one row per (reservation,
-- action), the key refusing a second one. DONE rows are kept: they are the
-- record the audit and reconcile read.
CREATE TABLE lapse_stock_tasks (
    id             text        PRIMARY KEY,
    order_id       text        NOT NULL,
    action         text        NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    reservation_id text        NOT NULL,
    items          text        NOT NULL,
    status         text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts       integer     NOT NULL DEFAULT 0,
    failures       integer     NOT NULL DEFAULT 0,
    next_at        timestamptz NOT NULL,
    since          timestamptz NOT NULL,
    created_at     timestamptz NOT NULL,
    done_at        timestamptz,
    dead_at        timestamptz,
    result         text        NOT NULL DEFAULT '',
    last_error     text        NOT NULL DEFAULT '',
    CONSTRAINT lapse_stock_tasks_reservation_action UNIQUE (reservation_id, action)
);
CREATE INDEX lapse_stock_tasks_order ON lapse_stock_tasks (order_id);
CREATE INDEX lapse_stock_tasks_due ON lapse_stock_tasks (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_stock_tasks_open ON lapse_stock_tasks (status, id) WHERE status <> 'DONE';
