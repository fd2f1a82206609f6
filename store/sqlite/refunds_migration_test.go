package sqlite_test

import (
	"context"
	"slices"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Migration 012 builds lapse_payments again (SQLite cannot alter a CHECK):
// every attempt survives, its foreign key still names lapse_orders (and
// holds), its indexes are back, no table is left aside, the schema is a
// fresh one's, and REFUNDED can be written while the CHECK still refuses
// what is not a status.
func TestRefundsMigrationRebuildsPaymentsKeepingEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := migratedBefore(t, 12)
	s := migrateKeepingRows(t, path, db, 12, "lapse_payments", []string{"lapse_orders", "lapse_order_items", "lapse_payments"})
	wantOrdersForeignKey(t, db, "lapse_payments")
	indexes := strings1(t, db, `SELECT name FROM pragma_index_list('lapse_payments') WHERE origin = 'c' ORDER BY name`)
	if want := []string{"lapse_payments_payment_id_unique", "lapse_payments_refund_required"}; !slices.Equal(indexes, want) {
		t.Errorf("lapse_payments' indexes %v, want %v", indexes, want)
	}
	if _, err := db.Exec(`UPDATE lapse_payments SET status = 'REFUNDED' WHERE payment_id = 'pay-1'`); err != nil {
		t.Errorf("write REFUNDED: %v", err)
	}
	if _, err := db.Exec(`UPDATE lapse_payments SET status = 'BOGUS' WHERE payment_id = 'pay-2'`); !refusedBy(err, "CHECK") {
		t.Errorf("write BOGUS: %v, want the CHECK to refuse it", err)
	}
	if _, err := db.Exec(`INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at) VALUES ('no-such-order', 'p', 'PENDING', 0, 0)`); !refusedBy(err, "FOREIGN KEY") {
		t.Errorf("a payment of no order: %v, want the foreign key to refuse it", err)
	}

	// The store works on it: a migrated attempt owing money is refunded on
	// demand, and a second Migrate changes nothing.
	if _, err := db.Exec(`UPDATE lapse_payments SET status = 'REFUND_REQUIRED' WHERE payment_id = 'pay-5'`); err != nil {
		t.Fatal(err)
	}
	if r, err := s.EnqueueRefund(ctx, "pay-5"); err != nil || r.OrderID != "o-5" || r.Status != order.TaskPending {
		t.Errorf("enqueue the refund of a migrated attempt: %+v, %v", r, err)
	}
	if _, err := s.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: "pay-5", Manual: true}); err != nil {
		t.Errorf("mark a migrated attempt refunded: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("a second migrate: %v", err)
	}
}
