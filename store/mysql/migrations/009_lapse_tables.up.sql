-- lapse schema for MySQL 8.0+ and MariaDB 10.6+, as of version 9: every
-- table lapse creates is named lapse_*, so lapse can share a database with
-- the shop's own tables, its own `orders` and a golang-migrate
-- `schema_migrations` included.
--
-- Version 9 is how a database reaches this schema, in one of two ways
-- (store/mysql/migrate.go):
--   - a fresh database gets this file, recorded in lapse_schema_migrations;
--   - a database of an earlier lapse (its unprefixed tables and lapse's own
--     schema_migrations, migrations 001-008 under migrations/legacy/) is
--     first brought to 008, then renamed in place by migrations/legacy/
--     rename.sql: the same tables as below, with every row kept.
-- Later migrations (010 on) apply to both alike.
--
-- Index names are per table in MySQL and keep the names they had before
-- version 9 (orders_created on lapse_orders); foreign key names are
-- database-wide and are lapse_*. CHECK constraints are left unnamed (MySQL 8
-- names them lapse_<table>_chk_N, database-wide too; RENAME TABLE renames
-- them along).
--
-- Times are DATETIME(3) in UTC (every session runs with time_zone '+00:00').
-- Identifiers use utf8mb4_bin: compared byte for byte, as in the other stores.
--
-- MySQL commits every DDL statement on its own, so a migration cannot be rolled
-- back as a whole. Each `-- name:` section below is ONE statement that is safe
-- to run again (CREATE TABLE IF NOT EXISTS, indexes declared inside their
-- table); Migrate records the version only after the last section succeeded,
-- so a migration that failed part-way is completed by the next Migrate.
-- Released files are never edited: a change is a new file.

-- name: create_skus
CREATE TABLE IF NOT EXISTS lapse_skus (
    sku        VARCHAR(128) NOT NULL,
    available  BIGINT       NOT NULL,
    locked     BIGINT       NOT NULL DEFAULT 0,
    sold       BIGINT       NOT NULL DEFAULT 0,
    -- total changes only by an explicit adjustment; audit checks
    -- available + locked + sold = total.
    total      BIGINT       NOT NULL,
    updated_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (sku),
    CHECK (available >= 0),
    CHECK (locked >= 0),
    CHECK (sold >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_orders
CREATE TABLE IF NOT EXISTS lapse_orders (
    id               VARCHAR(128) NOT NULL,
    status           VARCHAR(16)  NOT NULL,
    amount_cents     BIGINT       NOT NULL,
    currency         VARCHAR(16)  NOT NULL,
    created_at       DATETIME(3)  NOT NULL,
    expires_at       DATETIME(3)  NOT NULL,
    cancel_after     DATETIME(3)  NOT NULL,
    paid_at          DATETIME(3)  NULL,
    cancelled_at     DATETIME(3)  NULL,
    cancel_reason    VARCHAR(16)  NULL,
    payment_id       VARCHAR(255) NULL,
    refund_required  BOOLEAN      NOT NULL DEFAULT FALSE,
    payment_attempts INT          NOT NULL DEFAULT 0,
    version          BIGINT       NOT NULL DEFAULT 1,
    reservation_id   VARCHAR(255) NULL,
    PRIMARY KEY (id),
    -- The durable schedule: due orders by status and deadline. The claim
    -- (status = 'PENDING' AND cancel_after <= ? ORDER BY cancel_after LIMIT n)
    -- is a range scan of this index that reads only due rows.
    KEY orders_status_cancel_after (status, cancel_after),
    -- Listing, newest first.
    KEY orders_created (created_at, id),
    -- A reservation backs one order (NULLs do not collide).
    UNIQUE KEY orders_reservation (reservation_id),
    -- The dashboard's counts read index ranges, never the whole table.
    KEY orders_cancelled_at (cancelled_at),
    KEY orders_paid_at (paid_at),
    KEY orders_refund_required (refund_required, id),
    CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED')),
    CHECK (amount_cents >= 0),
    CHECK (cancel_reason IN ('timeout', 'buyer'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_order_items
CREATE TABLE IF NOT EXISTS lapse_order_items (
    order_id VARCHAR(128) NOT NULL,
    sku      VARCHAR(128) NOT NULL,
    qty      BIGINT       NOT NULL,
    PRIMARY KEY (order_id, sku),
    CONSTRAINT lapse_order_items_order FOREIGN KEY (order_id) REFERENCES lapse_orders (id),
    CHECK (qty > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_stock_ledger
-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE IF NOT EXISTS lapse_stock_ledger (
    order_id   VARCHAR(128) NOT NULL,
    sku        VARCHAR(128) NOT NULL,
    action     VARCHAR(16)  NOT NULL,
    qty        BIGINT       NOT NULL,
    created_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (order_id, sku, action),
    CHECK (action IN ('reserve', 'release', 'commit'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_idempotency_keys
CREATE TABLE IF NOT EXISTS lapse_idempotency_keys (
    idempotency_key VARCHAR(255) NOT NULL,
    request_hash    VARCHAR(128) NOT NULL,
    order_id        VARCHAR(128) NOT NULL,
    created_at      DATETIME(3)  NOT NULL,
    PRIMARY KEY (idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_outbox
-- payload is text, not JSON: MySQL's JSON type would rewrite the bytes
-- (key order, spacing) that consumers may have signed or hashed.
CREATE TABLE IF NOT EXISTS lapse_outbox (
    seq          BIGINT       NOT NULL AUTO_INCREMENT,
    event_id     CHAR(36)     NOT NULL,
    type         VARCHAR(64)  NOT NULL,
    order_id     VARCHAR(128) NOT NULL,
    payload      MEDIUMTEXT   NOT NULL,
    created_at   DATETIME(3)  NOT NULL,
    published_at DATETIME(3)  NULL,
    fanned_out   BOOLEAN      NOT NULL DEFAULT FALSE,
    PRIMARY KEY (seq),
    UNIQUE KEY outbox_event_id (event_id),
    -- MySQL has no partial index: unpublished rows are the NULL prefix of this one.
    KEY outbox_unpublished (published_at, seq),
    KEY outbox_order (order_id, type),
    -- MySQL has no partial indexes: the unfanned rows are the FALSE prefix.
    KEY outbox_unfanned (fanned_out, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_payment_callbacks
CREATE TABLE IF NOT EXISTS lapse_payment_callbacks (
    callback_id VARCHAR(128) NOT NULL,
    order_id    VARCHAR(128) NOT NULL,
    seen_at     DATETIME(3)  NOT NULL,
    PRIMARY KEY (callback_id),
    KEY payment_callbacks_seen_at (seen_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_payments
-- payment_id is as wide as lapse_orders.payment_id, which every attempt's
-- id is copied to.
CREATE TABLE IF NOT EXISTS lapse_payments (
    order_id     VARCHAR(128) NOT NULL,
    payment_id   VARCHAR(255) NOT NULL,
    status       VARCHAR(16)  NOT NULL,
    amount_cents BIGINT       NOT NULL DEFAULT 0,
    created_at   DATETIME(3)  NOT NULL,
    updated_at   DATETIME(3)  NOT NULL,
    currency     VARCHAR(16)  NOT NULL DEFAULT '',
    conflicts    INT          NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, payment_id),
    -- One payment id, one order; a notification naming only the payment
    -- finds its order here.
    UNIQUE KEY payments_payment_id_unique (payment_id),
    KEY payments_refund_required (status, updated_at),
    CONSTRAINT lapse_payments_order FOREIGN KEY (order_id) REFERENCES lapse_orders (id),
    CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_outbox_sinks
CREATE TABLE IF NOT EXISTS lapse_outbox_sinks (
    name          VARCHAR(255) NOT NULL,
    registered_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_outbox_fanout
CREATE TABLE IF NOT EXISTS lapse_outbox_fanout (
    id INT NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- name: fill_outbox_fanout
INSERT IGNORE INTO lapse_outbox_fanout (id) VALUES (1);

-- name: create_outbox_deliveries
CREATE TABLE IF NOT EXISTS lapse_outbox_deliveries (
    sink             VARCHAR(255) NOT NULL,
    seq              BIGINT       NOT NULL,
    order_id         VARCHAR(128) NOT NULL,
    next_at          DATETIME(3)  NOT NULL,
    attempts         INT          NOT NULL DEFAULT 0,
    refusals         INT          NOT NULL DEFAULT 0,
    first_refused_at DATETIME(3)  NULL,
    last_error       TEXT         NULL,
    dead             BOOLEAN      NOT NULL DEFAULT FALSE,
    dead_at          DATETIME(3)  NULL,
    PRIMARY KEY (sink, seq),
    KEY outbox_deliveries_order (sink, order_id, seq),
    KEY outbox_deliveries_seq (seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_stock_tasks
CREATE TABLE IF NOT EXISTS lapse_stock_tasks (
    id             VARCHAR(64)  NOT NULL,
    order_id       VARCHAR(128) NOT NULL,
    action         VARCHAR(16)  NOT NULL,
    reservation_id VARCHAR(255) NOT NULL,
    items          TEXT         NOT NULL,
    status         VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts       INT          NOT NULL DEFAULT 0,
    failures       INT          NOT NULL DEFAULT 0,
    next_at        DATETIME(3)  NOT NULL,
    since          DATETIME(3)  NOT NULL,
    created_at     DATETIME(3)  NOT NULL,
    done_at        DATETIME(3)  NULL,
    dead_at        DATETIME(3)  NULL,
    result         VARCHAR(32)  NOT NULL DEFAULT '',
    last_error     TEXT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY stock_tasks_reservation_action (reservation_id, action),
    KEY stock_tasks_order (order_id),
    KEY stock_tasks_due (status, next_at),
    KEY stock_tasks_open (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
