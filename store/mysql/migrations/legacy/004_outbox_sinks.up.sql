-- Events out to several sinks (see the PostgreSQL migration of the same
-- name for the design). MySQL has no partial indexes: the unfanned and the
-- published rows are prefixes of (fanned_out, seq) and (published_at, seq).
-- One statement per section, each safe to run again (see 001_init.up.sql).

-- name: add_fanned_out
ALTER TABLE outbox ADD COLUMN fanned_out BOOLEAN NOT NULL DEFAULT FALSE;

-- name: add_outbox_unfanned
ALTER TABLE outbox ADD KEY outbox_unfanned (fanned_out, seq);

-- name: backfill_fanned_out
UPDATE outbox SET fanned_out = TRUE WHERE published_at IS NOT NULL AND NOT fanned_out;

-- name: create_outbox_sinks
CREATE TABLE IF NOT EXISTS outbox_sinks (
    name          VARCHAR(255) NOT NULL,
    registered_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: create_outbox_fanout
CREATE TABLE IF NOT EXISTS outbox_fanout (
    id INT NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- name: fill_outbox_fanout
INSERT IGNORE INTO outbox_fanout (id) VALUES (1);

-- name: create_outbox_deliveries
CREATE TABLE IF NOT EXISTS outbox_deliveries (
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
