package postgres_test

import (
	"context"
	"strings"
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
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'lapse_orders'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%cancel_reason%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	reason, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(reason) != 1 || !strings.HasPrefix(reason[0], "lapse_orders_cancel_reason_check: ") || !strings.Contains(reason[0], "operator") {
		t.Errorf("lapse_orders' cancel_reason checks: %q, want lapse_orders_cancel_reason_check alone, with operator", reason)
	}
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
	for _, r := range []string{"operator", "timeout", "buyer"} {
		if err := probe(`UPDATE lapse_orders SET status = 'CANCELLED', cancelled_at = now(), cancel_reason = '` + r + `' WHERE id = 'check-probe'`); err != nil {
			t.Errorf("write cancel_reason %s: %v", r, err)
		}
	}
	if err := probe(`UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a cancel reason 'whim': %v, want the reason's CHECK to refuse it", err)
	}
	if err := probe(`UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'check-probe'`); !refusedByCheck(err) {
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
	ctx := context.Background()
	s, u := legacySchema(t)
	conn := connect(t, u)
	var before string
	if err := conn.QueryRow(ctx, `SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
		WHERE conrelid = 'orders'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%cancel_reason%'`).Scan(&before); err != nil || before == "" {
		t.Fatalf("the earlier cancel_reason check: %q (%v)", before, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier schema: %v", err)
	}
	wantReasonCheckReplaced(t, conn)
	wantStatusCheckReplaced(t, conn)
}
