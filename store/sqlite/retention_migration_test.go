package sqlite_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lapsehq/lapse/store"
)

// Migration 014 adds retention's tables and the index of idempotency keys by
// order: every row survives, the schema is a fresh one's, the turn has its
// one row, and the store prunes the migrated orders that are finished —
// every PAID or CANCELLED one but those flagged refund_required — carrying
// their ledger units forward.
func TestRetentionMigrationKeepsEveryRowAndPrunes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := migratedBefore(t, 14)
	s := migrateKeepingRows(t, path, db, 14, "lapse_sku_carried", []string{"lapse_orders", "lapse_order_items", "lapse_stock_ledger", "lapse_payments"})
	if got := strings1(t, db, `SELECT id FROM lapse_retention_turn`); !slices.Equal(got, []string{"1"}) {
		t.Errorf("lapse_retention_turn holds %v, want its one row", got)
	}
	if _, err := db.Exec(`INSERT INTO lapse_retention_turn (id) VALUES (2)`); !refusedBy(err, "CHECK") {
		t.Errorf("a second turn row: %v, want the CHECK to refuse it", err)
	}
	if got := strings1(t, db, `SELECT name FROM pragma_index_list('lapse_idempotency_keys') WHERE origin = 'c'`); !slices.Equal(got, []string{"lapse_idempotency_keys_order"}) {
		t.Errorf("lapse_idempotency_keys' indexes %v, want lapse_idempotency_keys_order", got)
	}
	want := strings1(t, db, `SELECT count(*) FROM lapse_orders WHERE status IN ('PAID', 'CANCELLED') AND refund_required = 0`)
	units := strings1(t, db, `SELECT sum(qty) FROM lapse_stock_ledger`)
	res, err := s.PruneOrders(ctx, store.PruneOrdersParams{Age: 24 * time.Hour, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{strconv.Itoa(res.Orders)}; !slices.Equal(got, want) {
		t.Errorf("pruned %v orders of the migrated ones, want %v", got, want)
	}
	if left := strings1(t, db, `SELECT count(*) FROM lapse_stock_ledger l WHERE NOT EXISTS (SELECT 1 FROM lapse_orders o WHERE o.id = l.order_id)`); !slices.Equal(left, []string{"0"}) {
		t.Errorf("ledger rows of deleted orders left: %v", left)
	}
	if got := strings1(t, db, `SELECT (SELECT sum(reserved) FROM lapse_sku_carried) + (SELECT sum(qty) FROM lapse_stock_ledger)`); !slices.Equal(got, units) {
		t.Errorf("carried plus left: %v units, want the %v the ledger held", got, units)
	}
}
