-- The reference inventory's statements on SQLite. postgres.sql holds the same
-- names for PostgreSQL; parameters are numbered (?1) so that both files take
-- them in the same order.

-- name: migrate_table
CREATE TABLE IF NOT EXISTS inv_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)

-- name: migrate_lock
-- SQLite's write transactions already run one at a time (BEGIN IMMEDIATE).
SELECT 1

-- name: migrate_applied
SELECT EXISTS (SELECT 1 FROM inv_schema_migrations WHERE version = ?1)

-- name: migrate_record
INSERT INTO inv_schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)

-- name: reservation_take
-- Takes the reservation's row for the transaction, inserting it NEW when
-- absent, and returns its status. The no-op update makes the conflict
-- return the existing row.
INSERT INTO inv_reservations (reservation_id, order_id, status, created_at, updated_at)
VALUES (?1, ?2, 'NEW', ?3, ?3)
ON CONFLICT (reservation_id) DO UPDATE SET status = inv_reservations.status
RETURNING status

-- name: reservation_set
UPDATE inv_reservations
SET status = ?2, updated_at = ?3, order_id = CASE WHEN order_id = '' THEN ?4 ELSE order_id END
WHERE reservation_id = ?1

-- name: reservation_get
SELECT order_id, status, created_at, updated_at FROM inv_reservations
WHERE reservation_id = ?1 AND status <> 'NEW'

-- name: items_insert
INSERT INTO inv_reservation_items (reservation_id, sku, qty) VALUES (?1, ?2, ?3)

-- name: items_of
SELECT sku, qty FROM inv_reservation_items WHERE reservation_id = ?1

-- name: sku_reserve
UPDATE inv_skus SET available = available - ?2, reserved = reserved + ?2
WHERE sku = ?1 AND available >= ?2

-- name: sku_release
UPDATE inv_skus SET reserved = reserved - ?2, available = available + ?2
WHERE sku = ?1 AND reserved >= ?2

-- name: sku_confirm
UPDATE inv_skus SET reserved = reserved - ?2, sold = sold + ?2
WHERE sku = ?1 AND reserved >= ?2

-- name: sku_put
INSERT INTO inv_skus (sku, available) VALUES (?1, ?2)
ON CONFLICT (sku) DO UPDATE SET available = excluded.available
RETURNING sku, available, reserved, sold

-- name: sku_get
SELECT sku, available, reserved, sold FROM inv_skus WHERE sku = ?1

-- name: ledger_insert
INSERT INTO inv_ledger (reservation_id, action, task_id, at, tombstone)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (reservation_id, action) DO NOTHING

-- name: ledger_of
SELECT seq, reservation_id, action, task_id, at, tombstone FROM inv_ledger
WHERE reservation_id = ?1 ORDER BY seq

-- name: ledger_page
SELECT seq, reservation_id, action, task_id, at, tombstone FROM inv_ledger
WHERE seq > ?1 ORDER BY seq LIMIT ?2
