package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
)

// wantReasonCheckReplaced checks a schema migrated through 013: one
// cancel_reason CHECK on lapse_orders, named
// lapse_orders_cancel_reason_check, that takes operator (and the earlier
// reasons) and refuses what is not a reason; the status CHECK still holds.
func wantReasonCheckReplaced(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	wantOneCheck(t, conn, "lapse_orders", "%cancel_reason%", "lapse_orders_cancel_reason_check", "operator")
	for _, r := range []string{"operator", "timeout", "buyer"} {
		if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = now(), cancel_reason = $1 WHERE id = 'check-probe'`, r); err != nil {
			t.Errorf("write cancel_reason %s: %v", r, err)
		}
	}
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a cancel reason 'whim': %v, want the reason's CHECK to refuse it", err)
	}
	if err := probe(t, conn, "PENDING", `UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want the status CHECK to refuse it", err)
	}
}

// Migration 013 replaces lapse_orders' cancel_reason CHECK on a fresh schema.
func TestOperatorCancelMigrationOnAFreshSchema(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	wantReasonCheckReplaced(t, connect(t, u))
}

// And on a schema renamed from an earlier lapse, whose cancel_reason CHECK
// kept the name it had on orders.
func TestOperatorCancelMigrationOnARenamedSchema(t *testing.T) {
	t.Parallel()
	conn := migrateRenamed(t, "orders", "%cancel_reason%")
	wantReasonCheckReplaced(t, conn)
	wantStatusCheckReplaced(t, conn)
}
