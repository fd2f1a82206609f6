package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The steps the migration tests share (011 order commands, 012 refunds,
// 013 operator cancel): a schema renamed from an earlier lapse, migrated;
// the CHECK a migration replaced, found by what it mentions; and a probe
// row written against it. Each test supplies the table, the check and the
// statements.

// refusedByCheck reports whether err is a CHECK constraint refusing a row.
func refusedByCheck(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514"
}

// checksOn lists table's CHECK constraints whose definition matches like,
// as "name: definition", in name order.
func checksOn(t *testing.T, conn *pgx.Conn, table, like string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE $2 ORDER BY 1`, table, like)
	if err != nil {
		t.Fatal(err)
	}
	checks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return checks
}

// wantOneCheck fails the test unless table has one CHECK matching like,
// named name, that mentions takes (what the migration added to it).
func wantOneCheck(t *testing.T, conn *pgx.Conn, table, like, name, takes string) {
	t.Helper()
	checks := checksOn(t, conn, table, like)
	if len(checks) != 1 || !strings.HasPrefix(checks[0], name+": ") || !strings.Contains(checks[0], takes) {
		t.Errorf("%s' checks like %s: %q, want %s alone, with %s", table, like, checks, name, takes)
	}
}

// probe writes a probe order of status, then runs stmt (with args), in a
// transaction rolled back — a refusal aborts it — and returns stmt's error.
func probe(t *testing.T, conn *pgx.Conn, status, stmt string, args ...any) error {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
		VALUES ('check-probe', $1, 1, 'EUR', now(), now(), now())`, status); err != nil {
		t.Fatalf("insert a probe order: %v", err)
	}
	_, err = tx.Exec(ctx, stmt, args...)
	return err
}

// migrateRenamed migrates a schema of an earlier lapse, whose table (by its
// old name) has a CHECK matching like before, and returns a connection to
// it.
func migrateRenamed(t *testing.T, table, like string) *pgx.Conn {
	t.Helper()
	s, u := legacySchema(t)
	conn := connect(t, u)
	if before := checksOn(t, conn, table, like); len(before) == 0 {
		t.Fatalf("the earlier schema has no %s check like %s", table, like)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate the earlier schema: %v", err)
	}
	return conn
}
