-- The reference inventory's schema. Every table is prefixed inv_ so that it
-- can share a database with lapse's own tables. Times are Unix milliseconds.

CREATE TABLE inv_skus (
    sku       TEXT PRIMARY KEY,
    available INTEGER NOT NULL CHECK (available >= 0),
    reserved  INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold      INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0)
);

-- A reservation's row is what serialises the commands about it: each one
-- starts by taking the row (inserting it NEW when absent). NEW is never
-- committed: a command either moves it on or rolls back.
CREATE TABLE inv_reservations (
    reservation_id TEXT PRIMARY KEY,
    order_id       TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL CHECK (status IN ('NEW', 'RESERVED', 'RELEASED', 'CONFIRMED')),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE inv_reservation_items (
    reservation_id TEXT NOT NULL REFERENCES inv_reservations (reservation_id),
    sku            TEXT NOT NULL,
    qty            INTEGER NOT NULL CHECK (qty > 0),
    PRIMARY KEY (reservation_id, sku)
);

-- One row per applied (reservation, action): the unique key is the
-- idempotency of the whole service. seq orders the rows for GET /ledger.
-- tombstone marks a release of a reservation never reserved.
CREATE TABLE inv_ledger (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    reservation_id TEXT NOT NULL,
    action         TEXT NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    task_id        TEXT NOT NULL,
    at             INTEGER NOT NULL,
    tombstone      INTEGER NOT NULL DEFAULT 0,
    UNIQUE (reservation_id, action)
);
