-- The reference inventory's schema. Every table is prefixed inv_ so that it
-- can share a database (and a schema) with lapse's own tables. Times are
-- Unix milliseconds, as in the SQLite schema, so both scan alike.

CREATE TABLE inv_skus (
    sku       TEXT PRIMARY KEY,
    available BIGINT NOT NULL CHECK (available >= 0),
    reserved  BIGINT NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold      BIGINT NOT NULL DEFAULT 0 CHECK (sold >= 0)
);

-- A reservation's row is what serialises the commands about it: each one
-- starts by taking the row (inserting it NEW when absent) with an upsert,
-- which locks it until the transaction ends. NEW is never committed: a
-- command either moves it on or rolls back.
CREATE TABLE inv_reservations (
    reservation_id TEXT PRIMARY KEY,
    order_id       TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL CHECK (status IN ('NEW', 'RESERVED', 'RELEASED', 'CONFIRMED')),
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);

CREATE TABLE inv_reservation_items (
    reservation_id TEXT NOT NULL REFERENCES inv_reservations (reservation_id),
    sku            TEXT NOT NULL,
    qty            BIGINT NOT NULL CHECK (qty > 0),
    PRIMARY KEY (reservation_id, sku)
);

-- One row per applied (reservation, action): the unique key is the
-- idempotency of the whole service. seq orders the rows for GET /ledger.
-- tombstone marks a release of a reservation never reserved.
CREATE TABLE inv_ledger (
    seq            BIGSERIAL PRIMARY KEY,
    reservation_id TEXT NOT NULL,
    action         TEXT NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    task_id        TEXT NOT NULL,
    at             BIGINT NOT NULL,
    tombstone      BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (reservation_id, action)
);
