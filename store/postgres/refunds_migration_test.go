package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
)

// wantPaymentStatusCheckReplaced checks a schema migrated through 012: one
// status CHECK on lapse_payments, named lapse_payments_status_check, that
// takes REFUNDED and refuses what is not a status.
func wantPaymentStatusCheckReplaced(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'lapse_payments'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%SUPERSEDED%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	status, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(status) != 1 || !strings.HasPrefix(status[0], "lapse_payments_status_check: ") || !strings.Contains(status[0], "REFUNDED") {
		t.Errorf("lapse_payments' status checks: %q, want lapse_payments_status_check alone, with REFUNDED", status)
	}
	probe := func(status string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
			VALUES ('check-probe', 'CANCELLED', 1, 'EUR', now(), now(), now())`); err != nil {
			t.Fatalf("insert a probe order: %v", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at)
			VALUES ('check-probe', 'check-probe-1', $1, now(), now())`, status)
		return err
	}
	if err := probe("REFUNDED"); err != nil {
		t.Errorf("write REFUNDED: %v", err)
	}
	if err := probe("BOGUS"); !refusedByCheck(err) {
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
	ctx := context.Background()
	s, u := legacySchema(t)
	conn := connect(t, u)
	var before string
	if err := conn.QueryRow(ctx, `SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
		WHERE conrelid = 'payments'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%SUPERSEDED%'`).Scan(&before); err != nil || before == "" {
		t.Fatalf("the earlier status check: %q (%v)", before, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier schema: %v", err)
	}
	wantPaymentStatusCheckReplaced(t, conn)
}
