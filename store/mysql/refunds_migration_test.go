package mysql_test

import (
	"database/sql"
	"testing"
)

// refundsVersion is the migration that adds REFUNDED and the refunds.
const refundsVersion = 12

// wantPaymentStatusCheckReplaced checks a database migrated through 012:
// one status CHECK on lapse_payments, named lapse_payments_status_check,
// that takes REFUNDED and refuses what is not a status; and lapse_refunds.
func wantPaymentStatusCheckReplaced(t *testing.T, db *sql.DB) {
	t.Helper()
	wantOneCheck(t, db, "lapse_payments", "SUPERSEDED", "lapse_payments_status_check", "REFUNDED")
	defer probeOrder(t, db, "check-probe", "CANCELLED")()
	if _, err := db.Exec(`INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at)
		VALUES ('check-probe', 'check-probe-1', 'REFUND_REQUIRED', '2024-01-01', '2024-01-01')`); err != nil {
		t.Fatalf("insert a probe attempt: %v", err)
	}
	defer func() {
		if _, err := db.Exec(`DELETE FROM lapse_payments WHERE order_id = 'check-probe'`); err != nil {
			t.Fatal(err)
		}
	}()
	if _, err := db.Exec(`UPDATE lapse_payments SET status = 'REFUNDED' WHERE order_id = 'check-probe'`); err != nil {
		t.Errorf("write REFUNDED: %v", err)
	}
	if _, err := db.Exec(`UPDATE lapse_payments SET status = 'BOGUS' WHERE order_id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want a CHECK to refuse it", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_refunds`).Scan(&n); err != nil {
		t.Errorf("lapse_refunds: %v", err)
	}
}

// Migration 012 replaces lapse_payments' unnamed status CHECK by a named
// one that takes REFUNDED, creates lapse_refunds, and runs again from
// wherever a run stopped: after any of its steps (a new session, as after a
// crash), or after all of them with the version not yet recorded.
func TestRefundsMigrationRunsAgainFromAnyStep(t *testing.T) {
	t.Parallel()
	runsAgainFromAnyStep(t, refundsVersion, wantPaymentStatusCheckReplaced)
}

// The same on a database renamed from an earlier lapse, whose payments'
// check kept what the rename left it.
func TestRefundsMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	db := migratedLegacy(t)
	wantPaymentStatusCheckReplaced(t, db)
}
