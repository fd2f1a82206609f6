package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
)

// wantStatusCheckReplaced checks a schema migrated through 011: one status
// CHECK on lapse_orders, named lapse_orders_status_check, that takes
// CANCELLING and refuses what is not a status, beside lapse_orders' other
// checks, which still hold.
func wantStatusCheckReplaced(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	wantOneCheck(t, conn, "lapse_orders", "%PAYING%", "lapse_orders_status_check", "CANCELLING")
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET status = 'CANCELLING' WHERE id = 'check-probe'`); err != nil {
		t.Errorf("write CANCELLING: %v", err)
	}
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want a CHECK to refuse it", err)
	}
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET amount_cents = -1 WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a negative amount: %v, want the amount's CHECK to refuse it", err)
	}
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a cancel reason 'whim': %v, want the reason's CHECK to refuse it", err)
	}
}

// Migration 011 replaces lapse_orders' status CHECK on a fresh schema.
func TestOrderCommandsMigrationOnAFreshSchema(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	wantStatusCheckReplaced(t, connect(t, u))
}

// And on a schema renamed from an earlier lapse, whose status CHECK kept the
// name it had on orders.
func TestOrderCommandsMigrationOnARenamedSchema(t *testing.T) {
	t.Parallel()
	wantStatusCheckReplaced(t, migrateRenamed(t, "orders", "%PAYING%"))
}
