package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store/mysql"
)

// operatorVersion is the migration that adds cancel_reason 'operator'.
const operatorVersion = 13

// wantReasonCheckReplaced checks a database migrated through 013: one
// cancel_reason CHECK, named lapse_orders_cancel_reason_check, that takes
// operator and the earlier reasons and refuses what is not a reason, beside
// the status CHECK, which still holds.
func wantReasonCheckReplaced(t *testing.T, db *sql.DB) {
	t.Helper()
	var reason []string
	for _, c := range checks(t, db, "lapse_orders") {
		if strings.Contains(c, "cancel_reason") {
			reason = append(reason, c)
		}
	}
	if len(reason) != 1 || !strings.HasPrefix(reason[0], "lapse_orders_cancel_reason_check: ") || !strings.Contains(reason[0], "operator") {
		t.Errorf("lapse_orders' cancel_reason checks: %q, want lapse_orders_cancel_reason_check alone, with operator", reason)
	}
	if _, err := db.Exec(`INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
		VALUES ('reason-probe', 'PENDING', 1, 'EUR', '2024-01-01', '2024-01-01', '2024-01-01')`); err != nil {
		t.Fatalf("insert a probe order: %v", err)
	}
	defer func() {
		if _, err := db.Exec(`DELETE FROM lapse_orders WHERE id = 'reason-probe'`); err != nil {
			t.Fatal(err)
		}
	}()
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
	names, err := fs.Glob(mysql.Files, fmt.Sprintf("migrations/%03d_*.up.sql", operatorVersion))
	if err != nil || len(names) != 1 {
		t.Fatalf("migration %d: %v (%v)", operatorVersion, names, err)
	}
	steps := sqlfile.MustLoadOrdered(mysql.Files, names[0])
	below := migrationsBelow(t, operatorVersion)
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
				t.Fatalf("migrate below 013: %v", err)
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
			if n := recorded(t, db, operatorVersion); n != 1 {
				t.Fatalf("013 recorded %d times", n)
			}
			wantReasonCheckReplaced(t, db)
			ordersAfterCommands(t, db)
			if _, err := db.Exec(`DELETE FROM lapse_schema_migrations WHERE version = ?`, operatorVersion); err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("run 013 again: %v", err)
			}
			wantReasonCheckReplaced(t, db)
			ordersAfterCommands(t, db)
		})
	}
}

// On a database renamed from an earlier lapse, the checks end as a fresh
// database's.
func TestOperatorCancelMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, s := legacyDatabase(t, 8)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	wantReasonCheckReplaced(t, db)
	_, fresh := open(t, clock.Real{})
	if got, want := checks(t, db, "lapse_orders"), checks(t, fresh, "lapse_orders"); !slices.Equal(got, want) {
		t.Errorf("lapse_orders' checks:\nrenamed %q\nfresh   %q", got, want)
	}
}
