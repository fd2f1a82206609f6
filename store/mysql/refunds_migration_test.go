package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store/mysql"
)

// refundsVersion is the migration that adds REFUNDED and the refunds.
const refundsVersion = 12

// refundsSteps are the sections of migration 012, in file order.
func refundsSteps(t *testing.T) []sqlfile.Query {
	t.Helper()
	names, err := fs.Glob(mysql.Files, fmt.Sprintf("migrations/%03d_*.up.sql", refundsVersion))
	if err != nil || len(names) != 1 {
		t.Fatalf("migration %d: %v (%v)", refundsVersion, names, err)
	}
	return sqlfile.MustLoadOrdered(mysql.Files, names[0])
}

// wantPaymentStatusCheckReplaced checks a database migrated through 012:
// one status CHECK on lapse_payments, named lapse_payments_status_check,
// that takes REFUNDED and refuses what is not a status; and lapse_refunds.
func wantPaymentStatusCheckReplaced(t *testing.T, db *sql.DB) {
	t.Helper()
	var status []string
	for _, c := range checks(t, db, "lapse_payments") {
		if strings.Contains(c, "SUPERSEDED") {
			status = append(status, c)
		}
	}
	if len(status) != 1 || !strings.HasPrefix(status[0], "lapse_payments_status_check: ") || !strings.Contains(status[0], "REFUNDED") {
		t.Errorf("lapse_payments' status checks: %q, want lapse_payments_status_check alone, with REFUNDED", status)
	}
	if _, err := db.Exec(`INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
		VALUES ('check-probe', 'CANCELLED', 1, 'EUR', '2024-01-01', '2024-01-01', '2024-01-01')`); err != nil {
		t.Fatalf("insert a probe order: %v", err)
	}
	if _, err := db.Exec(`INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at)
		VALUES ('check-probe', 'check-probe-1', 'REFUND_REQUIRED', '2024-01-01', '2024-01-01')`); err != nil {
		t.Fatalf("insert a probe attempt: %v", err)
	}
	defer func() {
		for _, q := range []string{`DELETE FROM lapse_payments WHERE order_id = 'check-probe'`, `DELETE FROM lapse_orders WHERE id = 'check-probe'`} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
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
	steps := refundsSteps(t)
	below := migrationsBelow(t, refundsVersion)
	for k := 0; k <= len(steps); k++ {
		name := "before any step"
		if k > 0 {
			name = "after step " + steps[k-1].Name
		}
		t.Run("interrupted "+name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, db := emptyDatabase(t)
			s := openURL(t, url, nil)
			if err := s.MigrateFS(ctx, below, "m"); err != nil {
				t.Fatalf("migrate below 012: %v", err)
			}
			ordersBeforeCommands(t, db)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range steps[:k] {
				if _, err := conn.ExecContext(ctx, st.SQL); err != nil {
					t.Fatalf("step %s: %v", st.Name, err)
				}
			}
			conn.Close()
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("migrate after the interruption: %v", err)
			}
			if n := recorded(t, db, refundsVersion); n != 1 {
				t.Fatalf("012 recorded %d times", n)
			}
			wantPaymentStatusCheckReplaced(t, db)
			ordersAfterCommands(t, db)
			// Every step done, the version not recorded: it runs again.
			if _, err := db.Exec(`DELETE FROM lapse_schema_migrations WHERE version = ?`, refundsVersion); err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("run 012 again: %v", err)
			}
			if n := recorded(t, db, refundsVersion); n != 1 {
				t.Fatalf("012 recorded %d times", n)
			}
			wantPaymentStatusCheckReplaced(t, db)
			ordersAfterCommands(t, db)
		})
	}
}

// The same on a database renamed from an earlier lapse, whose payments'
// check kept what the rename left it.
func TestRefundsMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	_, db, s := legacyDatabase(t, 8)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	wantPaymentStatusCheckReplaced(t, db)
}
