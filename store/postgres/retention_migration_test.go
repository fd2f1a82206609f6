package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
)

// wantRetentionSchema checks a schema migrated through 014: the retention
// turn's one row, the carried totals (zero unless written), and the index
// that finds an order's idempotency keys.
func wantRetentionSchema(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	var turns int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lapse_retention_turn WHERE id = 1`).Scan(&turns); err != nil || turns != 1 {
		t.Errorf("lapse_retention_turn: %d rows with id 1 (%v), want 1", turns, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO lapse_retention_turn (id) VALUES (2)`); !refusedByCheck(err) {
		t.Errorf("a second turn row: %v, want the CHECK to refuse it", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var reserved, released, committed, orders int64
	err = tx.QueryRow(ctx, `INSERT INTO lapse_sku_carried (sku, committed, updated_at) VALUES ('probe', 3, now())
		RETURNING reserved, released, committed, orders`).Scan(&reserved, &released, &committed, &orders)
	if err != nil || reserved != 0 || released != 0 || committed != 3 || orders != 0 {
		t.Errorf("a carried row: %d %d %d %d (%v), want 0 0 3 0", reserved, released, committed, orders, err)
	}
	var def string
	if err := conn.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
		AND indexname = 'lapse_idempotency_keys_order'`).Scan(&def); err != nil {
		t.Errorf("the index of idempotency keys by order: %v", err)
	}
}

// Migration 014 adds retention's tables and index on a fresh schema.
func TestRetentionMigrationOnAFreshSchema(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	wantRetentionSchema(t, connect(t, u))
}

// And on a schema renamed from an earlier lapse.
func TestRetentionMigrationOnARenamedSchema(t *testing.T) {
	t.Parallel()
	wantRetentionSchema(t, migrateRenamed(t, "payments", "%SUPERSEDED%"))
}
