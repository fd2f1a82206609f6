package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

func open(t *testing.T, clk clock.Clock) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Clock: clk, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, _ := open(t, clk)
		return s
	})
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
}

// The ledger's primary key is what makes a second release impossible even if
// a guard were wrong: check it at the database.
func TestLedgerRefusesASecondRelease(t *testing.T) {
	t.Parallel()
	s, path := open(t, clock.Real{})
	storetest.Stock(t, s, 5, "a")
	storetest.Create(t, s, "o", "a")
	if _, err := s.CancelOrder(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO stock_ledger (order_id, sku, action, qty, created_at) VALUES ('o', 'a', 'release', 1, 0)`)
	if err == nil {
		t.Fatal("a second release row was accepted")
	}
}

// Audit must be able to fail: corrupt each invariant and see its check fire.
func TestAuditDetectsViolations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		check, corrupt string
	}{
		{"stock_conserved", `UPDATE skus SET available = available + 1`},
		{"locked_matches_open_orders", `UPDATE skus SET locked = locked + 1, total = total + 1`},
		{"sold_matches_commits", `UPDATE skus SET sold = sold + 1, total = total + 1`},
		{"ledger_matches_status", `DELETE FROM stock_ledger WHERE action = 'reserve'`},
		{"paid_xor_cancelled", `UPDATE orders SET cancelled_at = 1 WHERE status = 'PAID'`},
		{"timeout_not_early", `UPDATE orders SET status = 'CANCELLED', cancel_reason = 'timeout', cancelled_at = cancel_after - 1 WHERE id = 'open'`},
		{"refund_only_when_cancelled", `UPDATE orders SET refund_required = 1 WHERE status = 'PAID'`},
		{"events_once_per_transition", `DELETE FROM outbox WHERE type = 'order.paid'`},
		{"pending_past_deadline", `UPDATE orders SET cancel_after = 0 WHERE id = 'open'`},
	}
	for _, c := range cases {
		t.Run(c.check, func(t *testing.T) {
			t.Parallel()
			s, path := open(t, clock.Real{})
			storetest.Stock(t, s, 5, "a")
			storetest.Create(t, s, "open", "a")
			storetest.Create(t, s, "paid", "a")
			ctx := context.Background()
			if _, err := s.StartPayment(ctx, "paid"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "paid", PaymentID: "p", AmountCents: 1000}); err != nil {
				t.Fatal(err)
			}
			storetest.AuditOK(t, s)
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(c.corrupt); err != nil {
				t.Fatal(err)
			}
			rep, err := s.Audit(ctx, store.AuditParams{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatalf("audit passed after: %s", c.corrupt)
			}
			for _, ch := range rep.Checks {
				if ch.Name == c.check {
					if ch.Count == 0 || len(ch.Examples) == 0 {
						t.Fatalf("check %s did not fire", c.check)
					}
					return
				}
			}
			t.Fatalf("no check named %s", c.check)
		})
	}
}
