-- Callbacks already applied, by a digest of their signature and body, so a
-- replayed callback (same signed message, inside the signature's window)
-- changes nothing. Rows older than an hour are purged as callbacks arrive.
-- One statement, safe to run again (see 001_init.up.sql).

-- name: create_payment_callbacks
CREATE TABLE IF NOT EXISTS payment_callbacks (
    callback_id VARCHAR(128) NOT NULL,
    order_id    VARCHAR(128) NOT NULL,
    seen_at     DATETIME(3)  NOT NULL,
    PRIMARY KEY (callback_id),
    KEY payment_callbacks_seen_at (seen_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
