-- lapse schema v1 for MySQL 8.0+ and MariaDB 10.6+.
--
-- Times are DATETIME(3) in UTC (every session runs with time_zone '+00:00'):
-- millisecond precision like the rest of lapse, comparable with the server's
-- UTC_TIMESTAMP(3) when the database's clock decides, and readable in a SQL shell.
-- Identifiers use utf8mb4_bin: compared byte for byte, as in the other stores.
--
-- MySQL commits every DDL statement on its own, so a migration cannot be rolled
-- back as a whole. Each `-- name:` section below is ONE statement that is safe
-- to run again (CREATE TABLE IF NOT EXISTS, indexes declared inside their
-- table); Migrate records the version only after the last section succeeded,
-- so a migration that failed part-way is completed by the next Migrate.
-- Released files are never edited: a change is a new file.

-- name: create_skus
CREATE TABLE IF NOT EXISTS skus (
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
CREATE TABLE IF NOT EXISTS orders (
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
    PRIMARY KEY (id),
    -- The durable schedule: due orders by status and deadline. The claim
    -- (status = 'PENDING' AND cancel_after <= ? ORDER BY cancel_after LIMIT n)
    -- is a range scan of this index that reads only due rows.
    KEY orders_status_cancel_after (status, cancel_after),
    -- Listing, newest first.
    KEY orders_created (created_at, id),
    CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED')),
    CHECK (amount_cents >= 0),
    CHECK (cancel_reason IN ('timeout', 'buyer'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_order_items
CREATE TABLE IF NOT EXISTS order_items (
    order_id VARCHAR(128) NOT NULL,
    sku      VARCHAR(128) NOT NULL,
    qty      BIGINT       NOT NULL,
    PRIMARY KEY (order_id, sku),
    CONSTRAINT order_items_order FOREIGN KEY (order_id) REFERENCES orders (id),
    CHECK (qty > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_stock_ledger
-- One row per order, SKU and action: the primary key makes a second release
-- or commit of the same item impossible.
CREATE TABLE IF NOT EXISTS stock_ledger (
    order_id   VARCHAR(128) NOT NULL,
    sku        VARCHAR(128) NOT NULL,
    action     VARCHAR(16)  NOT NULL,
    qty        BIGINT       NOT NULL,
    created_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (order_id, sku, action),
    CHECK (action IN ('reserve', 'release', 'commit'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_idempotency_keys
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idempotency_key VARCHAR(255) NOT NULL,
    request_hash    VARCHAR(128) NOT NULL,
    order_id        VARCHAR(128) NOT NULL,
    created_at      DATETIME(3)  NOT NULL,
    PRIMARY KEY (idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_outbox
-- payload is text, not JSON: MySQL's JSON type would rewrite the bytes
-- (key order, spacing) that consumers may have signed or hashed.
CREATE TABLE IF NOT EXISTS outbox (
    seq          BIGINT       NOT NULL AUTO_INCREMENT,
    event_id     CHAR(36)     NOT NULL,
    type         VARCHAR(64)  NOT NULL,
    order_id     VARCHAR(128) NOT NULL,
    payload      MEDIUMTEXT   NOT NULL,
    created_at   DATETIME(3)  NOT NULL,
    published_at DATETIME(3)  NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY outbox_event_id (event_id),
    -- MySQL has no partial index: unpublished rows are the NULL prefix of this one.
    KEY outbox_unpublished (published_at, seq),
    KEY outbox_order (order_id, type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
