package sqlite_test

import (
	"context"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// Migration 013 builds lapse_orders again for cancel_reason 'operator': every
// row survives, the foreign keys still name lapse_orders and hold, the schema
// is a fresh one's, and the CHECK takes operator while refusing what is not
// a reason.
func TestOperatorCancelMigrationRebuildsOrdersKeepingEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := migratedBefore(t, 13)
	if _, err := db.Exec(`UPDATE lapse_orders SET cancel_reason = 'operator' WHERE id = 'o-3'`); !refusedBy(err, "CHECK") {
		t.Fatalf("before 013, cancel_reason operator: %v, want the CHECK to refuse it", err)
	}
	s := migrateKeepingRows(t, path, db, 13, "lapse_orders",
		[]string{"lapse_orders", "lapse_order_items", "lapse_payments", "lapse_skus", "lapse_stock_ledger"})
	if _, err := db.Exec(`UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'o-3'`); !refusedBy(err, "CHECK") {
		t.Errorf("cancel_reason whim: %v, want the CHECK to refuse it", err)
	}
	if _, err := db.Exec(`INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at) VALUES ('no-such-order', 'p', 'PENDING', 0, 0)`); !refusedBy(err, "FOREIGN KEY") {
		t.Errorf("a payment of no order: %v, want the foreign key to refuse it", err)
	}
	// The store works on it, and cancels as an operator; a second Migrate
	// changes nothing.
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("a second migrate: %v", err)
	}
	storetest.Stock(t, s, 5, "new-sku")
	storetest.Create(t, s, "after-013", "new-sku")
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"after-013"}, Confirmed: true, Reason: order.ReasonOperator})
	if err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("an operator's cancel after 013: %+v, %v", res, err)
	}
	if got, err := s.GetOrder(ctx, "after-013"); err != nil || got.CancelReason != order.ReasonOperator {
		t.Errorf("the order cancelled: %q, %v", got.CancelReason, err)
	}
}
