package mysql_test

import (
	"database/sql"
	"testing"
)

// retentionVersion is the migration that adds retention's tables.
const retentionVersion = 14

// wantRetentionSchema checks a database migrated through 014: the
// retention turn's one row, the carried totals (zero unless written), and
// the index that finds an order's idempotency keys.
func wantRetentionSchema(t *testing.T, db *sql.DB) {
	t.Helper()
	var turns int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_retention_turn`).Scan(&turns); err != nil || turns != 1 {
		t.Errorf("lapse_retention_turn: %d rows (%v), want 1", turns, err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO lapse_sku_carried (sku, committed, updated_at) VALUES ('probe', 3, '2024-01-01')`); err != nil {
		t.Fatalf("a carried row: %v", err)
	}
	var reserved, released, committed, orders int64
	if err := tx.QueryRow(`SELECT reserved, released, committed, orders FROM lapse_sku_carried WHERE sku = 'probe'`).
		Scan(&reserved, &released, &committed, &orders); err != nil || reserved != 0 || released != 0 || committed != 3 || orders != 0 {
		t.Errorf("a carried row: %d %d %d %d (%v), want 0 0 3 0", reserved, released, committed, orders, err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'lapse_idempotency_keys' AND INDEX_NAME = 'idempotency_keys_order'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the index of idempotency keys by order: %d columns (%v), want 1", n, err)
	}
}

// Migration 014 adds retention's tables and index, and runs again from
// wherever a run stopped: after any of its steps (a new session, as after a
// crash), or after all of them with the version not yet recorded.
func TestRetentionMigrationRunsAgainFromAnyStep(t *testing.T) {
	t.Parallel()
	runsAgainFromAnyStep(t, retentionVersion, wantRetentionSchema)
}

// The same on a database renamed from an earlier lapse.
func TestRetentionMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	wantRetentionSchema(t, migratedLegacy(t))
}
