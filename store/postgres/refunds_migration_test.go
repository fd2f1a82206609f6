package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
)

// wantPaymentStatusCheckReplaced checks a schema migrated through 012: one
// status CHECK on lapse_payments, named lapse_payments_status_check, that
// takes REFUNDED and refuses what is not a status.
func wantPaymentStatusCheckReplaced(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	wantOneCheck(t, conn, "lapse_payments", "%SUPERSEDED%", "lapse_payments_status_check", "REFUNDED")
	payment := `INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at)
		VALUES ('check-probe', 'check-probe-1', $1, now(), now())`
	if err := probe(t, conn, "CANCELLED", payment, "REFUNDED"); err != nil {
		t.Errorf("write REFUNDED: %v", err)
	}
	if err := probe(t, conn, "CANCELLED", payment, "BOGUS"); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want a CHECK to refuse it", err)
	}
}

// Migration 012 replaces lapse_payments' status CHECK on a fresh schema.
func TestRefundsMigrationOnAFreshSchema(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	wantPaymentStatusCheckReplaced(t, connect(t, u))
}

// And on a schema renamed from an earlier lapse, whose status CHECK kept the
// name it had on payments.
func TestRefundsMigrationOnARenamedSchema(t *testing.T) {
	t.Parallel()
	wantPaymentStatusCheckReplaced(t, migrateRenamed(t, "payments", "%SUPERSEDED%"))
}
