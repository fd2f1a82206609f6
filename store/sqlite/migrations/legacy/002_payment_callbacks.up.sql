-- Callbacks already applied, by a digest of their signature and body, so a
-- replayed callback (same signed message, inside the signature's window)
-- changes nothing. Rows older than an hour are purged as callbacks arrive.
CREATE TABLE payment_callbacks (
    callback_id TEXT    PRIMARY KEY,
    order_id    TEXT    NOT NULL,
    seen_at     INTEGER NOT NULL
);

CREATE INDEX payment_callbacks_seen_at ON payment_callbacks (seen_at);
