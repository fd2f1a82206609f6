package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// Once migrated, every query of queries.sql is prepared on the writer and the
// write transactions run those statements; a second Migrate prepares them
// afresh and the store still writes. The writer keeps savepoints' journals
// in memory.
func TestWriterRunsPreparedStatements(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.prepared.Load() != nil {
		t.Fatal("statements prepared before the schema was migrated")
	}
	var tempStore int
	if err := s.w.QueryRowContext(ctx, "PRAGMA temp_store").Scan(&tempStore); err != nil || tempStore != 2 {
		t.Fatalf("writer temp_store = %d (%v), want 2 (MEMORY)", tempStore, err)
	}
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		m := s.prepared.Load()
		if m == nil || len(*m) != len(q) {
			t.Fatalf("prepared %v of %d queries", m, len(q))
		}
		err := s.WithTx(ctx, core.TxOptions{}, func(tx *core.Tx) error {
			ptx, ok := tx.ExecutorTx.(*txExecutor).db.(preparedTx)
			if !ok || ptx.stmts[q.Get("start_payment")] == nil || ptx.stmts[q.Get("insert_order")] == nil {
				t.Errorf("a write transaction runs %T without the prepared statements", tx.ExecutorTx.(*txExecutor).db)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetStock(ctx, "a", 5); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "o", Items: []order.Item{{SKU: "a", Qty: 1}}, AmountCents: 1, Currency: "EUR", Timeout: time.Minute}); err != nil {
		t.Fatalf("create after a second Migrate: %v", err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "o"}); err != nil {
		t.Fatalf("start payment after a second Migrate: %v", err)
	}
}
