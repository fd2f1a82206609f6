package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/internal/clock"
)

// refusedByCheck reports whether err is a CHECK constraint refusing a row.
func refusedByCheck(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514"
}

// wantStatusCheckReplaced checks a schema migrated through 011: one status
// CHECK on lapse_orders, named lapse_orders_status_check, that takes
// CANCELLING and refuses what is not a status, beside lapse_orders' other
// checks, which still hold.
func wantStatusCheckReplaced(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'lapse_orders'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%PAYING%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	status, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(status) != 1 || !strings.HasPrefix(status[0], "lapse_orders_status_check: ") || !strings.Contains(status[0], "CANCELLING") {
		t.Errorf("lapse_orders' status checks: %q, want lapse_orders_status_check alone, with CANCELLING", status)
	}
	// Each probe in a transaction rolled back: a refusal aborts it.
	probe := func(update string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
			VALUES ('check-probe', 'PENDING', 1, 'EUR', now(), now(), now())`); err != nil {
			t.Fatalf("insert a probe order: %v", err)
		}
		_, err = tx.Exec(ctx, update)
		return err
	}
	if err := probe(`UPDATE lapse_orders SET status = 'CANCELLING' WHERE id = 'check-probe'`); err != nil {
		t.Errorf("write CANCELLING: %v", err)
	}
	if err := probe(`UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want a CHECK to refuse it", err)
	}
	if err := probe(`UPDATE lapse_orders SET amount_cents = -1 WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a negative amount: %v, want the amount's CHECK to refuse it", err)
	}
	if err := probe(`UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'check-probe'`); !refusedByCheck(err) {
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
	ctx := context.Background()
	s, u := legacySchema(t)
	conn := connect(t, u)
	var before string
	if err := conn.QueryRow(ctx, `SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
		WHERE conrelid = 'orders'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%PAYING%'`).Scan(&before); err != nil || before == "" {
		t.Fatalf("the earlier status check: %q (%v)", before, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier schema: %v", err)
	}
	wantStatusCheckReplaced(t, conn)
}
