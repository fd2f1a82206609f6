package mysql_test

import (
	"database/sql"
	"slices"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
)

// operatorVersion is the migration that adds cancel_reason 'operator'.
const operatorVersion = 13

// wantReasonCheckReplaced checks a database migrated through 013: one
// cancel_reason CHECK, named lapse_orders_cancel_reason_check, that takes
// operator and the earlier reasons and refuses what is not a reason, beside
// the status CHECK, which still holds.
func wantReasonCheckReplaced(t *testing.T, db *sql.DB) {
	t.Helper()
	wantOneCheck(t, db, "lapse_orders", "cancel_reason", "lapse_orders_cancel_reason_check", "operator")
	defer probeOrder(t, db, "reason-probe", "PENDING")()
	for _, r := range []string{"operator", "timeout", "buyer"} {
		if _, err := db.Exec(`UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = '2024-01-01', cancel_reason = ? WHERE id = 'reason-probe'`, r); err != nil {
			t.Errorf("write cancel_reason %s: %v", r, err)
		}
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'reason-probe'`); !refusedByCheck(err) {
		t.Errorf("write a cancel reason 'whim': %v, want the reason's CHECK to refuse it", err)
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'reason-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want the status CHECK to refuse it", err)
	}
}

// Migration 013 replaces lapse_orders' unnamed cancel_reason CHECK by a named
// one that takes operator, and runs again from wherever a run stopped: after
// any of its steps (a new session), or after all of them with the version
// not yet recorded; the rows are kept.
func TestOperatorCancelMigrationRunsAgainFromAnyStep(t *testing.T) {
	t.Parallel()
	runsAgainFromAnyStep(t, operatorVersion, wantReasonCheckReplaced)
}

// On a database renamed from an earlier lapse, the checks end as a fresh
// database's.
func TestOperatorCancelMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	db := migratedLegacy(t)
	wantReasonCheckReplaced(t, db)
	_, fresh := open(t, clock.Real{})
	if got, want := checks(t, db, "lapse_orders"), checks(t, fresh, "lapse_orders"); !slices.Equal(got, want) {
		t.Errorf("lapse_orders' checks:\nrenamed %q\nfresh   %q", got, want)
	}
}
