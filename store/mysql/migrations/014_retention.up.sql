-- Retention (lapse serve --order-retention, store.Retention): finished
-- orders are deleted with every row that belongs to them, in small
-- batches, one instance at a time. Each section is one statement, and each
-- can run again: a migration interrupted half-way finishes on the next run
-- (MySQL has no transactional DDL).

-- name: create_sku_carried
-- Per SKU, the units of the ledger rows retention deleted, by action, added
-- in the deleting transaction. The counters of lapse_skus are never
-- touched; the audit sums the ledger rows left plus these
-- (sold_matches_commits), so it stays true on a trimmed database.
CREATE TABLE IF NOT EXISTS lapse_sku_carried (
    sku        VARCHAR(128) NOT NULL,
    reserved   BIGINT       NOT NULL DEFAULT 0,
    released   BIGINT       NOT NULL DEFAULT 0,
    committed  BIGINT       NOT NULL DEFAULT 0,
    orders     BIGINT       NOT NULL DEFAULT 0,
    updated_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_retention_turn
-- The retention turn: a batch takes this row (FOR UPDATE SKIP LOCKED) and
-- an instance that finds it held skips its run, as the relay's fan-out does
-- with lapse_outbox_fanout.
CREATE TABLE IF NOT EXISTS lapse_retention_turn (
    id INT NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- name: fill_retention_turn
INSERT IGNORE INTO lapse_retention_turn (id) VALUES (1);

-- name: find_keys_order_index
-- The keys of a deleted order go with it, found by their order. MySQL 8 has
-- no CREATE INDEX IF NOT EXISTS: the index is looked for first.
SET @lapse_sql = IF(EXISTS (SELECT 1 FROM information_schema.STATISTICS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'lapse_idempotency_keys' AND INDEX_NAME = 'idempotency_keys_order'),
  'DO 0', 'CREATE INDEX idempotency_keys_order ON lapse_idempotency_keys (order_id)');

-- name: create_keys_order_index_prepare
PREPARE lapse_stmt FROM @lapse_sql;

-- name: create_keys_order_index
EXECUTE lapse_stmt;

-- name: create_keys_order_index_deallocate
DEALLOCATE PREPARE lapse_stmt;
