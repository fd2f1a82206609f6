-- Events out to several sinks (see the PostgreSQL migration of the same
-- name for the design). SQLite has one writer: fan-outs and claims are
-- serialized by it, and outbox_fanout exists for the same statements only.
ALTER TABLE outbox ADD COLUMN fanned_out INTEGER NOT NULL DEFAULT 0;
UPDATE outbox SET fanned_out = 1 WHERE published_at IS NOT NULL;
CREATE INDEX outbox_unfanned ON outbox (seq) WHERE fanned_out = 0;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE outbox_sinks (
    name          TEXT    PRIMARY KEY,
    registered_at INTEGER NOT NULL
);

CREATE TABLE outbox_deliveries (
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
CREATE INDEX outbox_deliveries_order ON outbox_deliveries (sink, order_id, seq);
CREATE INDEX outbox_deliveries_seq ON outbox_deliveries (seq);
