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

// The steps the migration tests share (011 order commands, 012 refunds,
// 013 operator cancel): a migration run again from after each of its steps,
// the CHECK a migration replaced, found by what it mentions, and a probe
// order written against it. Each test supplies its version and what it
// checks.

// stepsOf are the sections of migration version, in file order.
func stepsOf(t *testing.T, version int) []sqlfile.Query {
	t.Helper()
	names, err := fs.Glob(mysql.Files, fmt.Sprintf("migrations/%03d_*.up.sql", version))
	if err != nil || len(names) != 1 {
		t.Fatalf("migration %d: %v (%v)", version, names, err)
	}
	return sqlfile.MustLoadOrdered(mysql.Files, names[0])
}

// runsAgainFromAnyStep runs migration version from wherever a run stopped:
// for each k, a database below version with rows (ordersBeforeCommands)
// gets the first k steps in a session of their own (as a crashed run left
// it), then Migrate, then Migrate again with the version not recorded (a
// run that did every step and was interrupted before recording it). After
// each, the version is recorded once, want holds and the rows are kept.
func runsAgainFromAnyStep(t *testing.T, version int, want func(*testing.T, *sql.DB)) {
	t.Helper()
	steps := stepsOf(t, version)
	below := migrationsBelow(t, version)
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
				t.Fatalf("migrate below %03d: %v", version, err)
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
			// Migrate runs on a session of the store's own: the stopped
			// run's variables and prepared statement are not there.
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("migrate after the interruption: %v", err)
			}
			if n := recorded(t, db, version); n != 1 {
				t.Fatalf("%03d recorded %d times", version, n)
			}
			want(t, db)
			ordersAfterCommands(t, db)
			runAgain(t, s, db, version)
			want(t, db)
			ordersAfterCommands(t, db)
		})
	}
}

// runAgain makes Migrate run version once more, as after a run that did
// every step and was interrupted before recording it.
func runAgain(t *testing.T, s *mysql.Store, db *sql.DB, version int) {
	t.Helper()
	if _, err := db.Exec(`DELETE FROM lapse_schema_migrations WHERE version = ?`, version); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("run %03d again: %v", version, err)
	}
	if n := recorded(t, db, version); n != 1 {
		t.Fatalf("%03d recorded %d times", version, n)
	}
}

// wantOneCheck fails the test unless table has one CHECK that mentions
// like, named name, that mentions takes (what the migration added to it).
func wantOneCheck(t *testing.T, db *sql.DB, table, like, name, takes string) {
	t.Helper()
	var found []string
	for _, c := range checks(t, db, table) {
		if strings.Contains(c, like) {
			found = append(found, c)
		}
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], name+": ") || !strings.Contains(found[0], takes) {
		t.Errorf("%s' checks with %s: %q, want %s alone, with %s", table, like, found, name, takes)
	}
}

// probeOrder writes order id of status for a check's probes, and returns
// what deletes it again (the caller defers it).
func probeOrder(t *testing.T, db *sql.DB, id, status string) func() {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
		VALUES (?, ?, 1, 'EUR', '2024-01-01', '2024-01-01', '2024-01-01')`, id, status); err != nil {
		t.Fatalf("insert a probe order: %v", err)
	}
	return func() {
		if _, err := db.Exec(`DELETE FROM lapse_orders WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
}

// migratedLegacy is a database renamed from an earlier lapse (its tables
// and their checks renamed in place, with rows), migrated through the
// latest version.
func migratedLegacy(t *testing.T) *sql.DB {
	t.Helper()
	_, db, s := legacyDatabase(t, 8)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	return db
}
