package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

func open(t *testing.T, clk clock.Clock) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Clock: clk, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, _ := open(t, clk)
		return s
	})
}

// This driver writes a cancel's commands claimed for the caller when asked
// (order-service mode's handoff: core.CommandClaimer).
func TestCancelWritesCommandsClaimedForTheCaller(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	storetest.RequireClaimAtWrite(t, s)
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
}

// The ledger's primary key is what makes a second release impossible even if
// a guard were wrong: check it at the database.
func TestLedgerRefusesASecondRelease(t *testing.T) {
	t.Parallel()
	s, path := open(t, clock.Real{})
	storetest.Stock(t, s, 5, "a")
	storetest.Create(t, s, "o", "a")
	if _, err := s.CancelOrder(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at) VALUES ('o', 'a', 'release', 1, 0)`)
	if err == nil {
		t.Fatal("a second release row was accepted")
	}
}

// Audit must be able to fail: corrupt each invariant and see its check fire.
func TestAuditDetectsViolations(t *testing.T) {
	t.Parallel()
	cases := []storetest.Corruption{
		{Check: "stock_conserved", SQL: `UPDATE lapse_skus SET available = available + 1`},
		{Check: "counters_are_integers", SQL: `UPDATE lapse_skus SET available = available + 0.5, total = total + 0.5`},
		{Check: "locked_matches_open_orders", SQL: `UPDATE lapse_skus SET locked = locked + 1, total = total + 1`},
		{Check: "sold_matches_commits", SQL: `UPDATE lapse_skus SET sold = sold + 1, total = total + 1`},
		{Check: "ledger_matches_status", SQL: `DELETE FROM lapse_stock_ledger WHERE action = 'reserve'`},
		{Check: "paid_xor_cancelled", SQL: `UPDATE lapse_orders SET cancelled_at = 1 WHERE status = 'PAID'`},
		{Check: "timeout_not_early", SQL: `UPDATE lapse_orders SET status = 'CANCELLED', cancel_reason = 'timeout', cancelled_at = cancel_after - 1 WHERE id = 'open'`},
		{Check: "refund_matches_payments", SQL: `UPDATE lapse_orders SET refund_required = 1 WHERE status = 'PAID'`},
		{Check: "events_once_per_transition", SQL: `DELETE FROM lapse_outbox WHERE type = 'order.paid'`},
		{Check: "pending_past_deadline", SQL: `UPDATE lapse_orders SET cancel_after = 0 WHERE id = 'open'`},
		{Check: "commanded_unanswered", SQL: `UPDATE lapse_orders SET status = 'CANCELLING', cancel_after = 0 WHERE id = 'open'`},
		{Check: "commands_dead", Warning: true, SQL: `INSERT INTO lapse_order_commands (id, order_id, cancel_after, status, next_at, since, created_at, dead_at, last_error)
			VALUES ('cmd_x', 'open', 1, 'DEAD', 1, 1, 1, 1, '400 Bad Request')`},
		// A refund recorded DONE whose attempt is not REFUNDED, and an
		// attempt REFUNDED with no DONE refund.
		{Check: "refunds_match_attempts", SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, done_at)
			VALUES ('p', 'paid', 1000, 'EUR', 'DONE', 1, 1, 1, 1)`},
		{Check: "refunds_match_attempts", Name: "refunded_without_its_refund", SQL: `UPDATE lapse_payments SET status = 'REFUNDED' WHERE payment_id = 'p'`},
		{Check: "refunds_not_done", Warning: true, SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, dead_at)
			VALUES ('p', 'paid', 1000, 'EUR', 'DEAD', 1, 1, 1, 1)`},
	}
	var handles sync.Map // store → what exec needs to reach its database
	factory := func(t *testing.T, clk clock.Clock) store.Store {
		s, path := open(t, clk)
		handles.Store(store.Store(s), path)
		return s
	}
	storetest.AuditCatches(t, factory, func(t *testing.T, s store.Store, stmt string) {
		h, _ := handles.Load(s)
		db, err := sql.Open("sqlite", "file:"+h.(string))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}, cases)
}

// Statements (bench's db_statements_per_order) counts both pools: here the
// read goes to a reader, the create to the writer.
func TestStatementsCountsACreateAndNothingWhenIdle(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	// BEGIN IMMEDIATE, the savepoint of group commit (a group of one here),
	// the order, one reservation per item, the items, the ledger, the event,
	// the savepoint's release, COMMIT.
	if n := storetest.CountsStatements(t, s); n != 10 {
		t.Errorf("one create of two items: %d statements, want 10", n)
	}
}

// Creates sent at once share transactions (what they answer is storetest's
// "creates sent at once are answered as if alone"); CreateGroup 1 turns it off.
func TestGroupCommitGroups(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1} {
		path := filepath.Join(t.TempDir(), "lapse.db")
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, CreateGroup: size})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		storetest.Stock(t, s, 1000, "a")
		var ps []store.CreateOrderParams
		for i := range 100 {
			ps = append(ps, storetest.Params(fmt.Sprintf("o%03d", i), order.Item{SKU: "a", Qty: 1}))
		}
		_, errs := storetest.CreateAll(s, ps)
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: %v", ps[i].ID, err)
			}
		}
		groups, orders, _ := s.GroupStats()
		switch {
		case size == 1 && groups != 0:
			t.Errorf("CreateGroup 1: %d groups of %d orders, want none", groups, orders)
		case size == 0 && (orders != 100 || groups >= orders):
			t.Errorf("default CreateGroup: %d groups for %d orders, want fewer groups than the 100 orders", groups, orders)
		}
		storetest.AuditOK(t, s)
	}
}

// A read-only store (lapse audit) never creates a missing file, never writes
// the database, and refuses writes; it still audits a live database.
func TestReadOnlyOpensOnlyWhatExistsAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if s, err := sqlite.Open(ctx, sqlite.Config{Path: missing, ReadOnly: true}); err == nil {
		s.Close()
		t.Fatal("read-only open of a missing file succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing file left %v (stat: %v)", missing, err)
	}

	s, path := open(t, clock.Real{})
	storetest.Stock(t, s, 5, "a")
	storetest.Create(t, s, "o", "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	storetest.AuditOK(t, ro)
	if _, err := ro.SetStock(ctx, "a", 7); err == nil {
		t.Error("a read-only store took a write")
	}
	if o, err := ro.GetOrder(ctx, "o"); err != nil || o.ID != "o" {
		t.Errorf("read-only read: %+v %v", o, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a read-only open changed the database file")
	}
}

// Payment starts and reports that arrive while the writer is busy queue and
// are committed in one group, each answered as if alone (what they answer is
// storetest's PaymentsAtOnce); PaymentGroup 1 turns grouping off.
func TestPaymentGroupCommitGroups(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1} {
		t.Run(fmt.Sprintf("PaymentGroup %d", size), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			path := filepath.Join(t.TempDir(), "lapse.db")
			s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Clock: clk, Synchronous: "NORMAL", PaymentGroup: size})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			var calls int
			hold := func(n int) func() {
				calls = n
				want := n
				if size == 1 {
					want = 0 // no grouping: nothing waits for a group
				}
				return holdWriter(t, s, want)
			}
			before, _, _, _ := s.PaymentGroupStats()
			storetest.PaymentsAtOnce(t, s, clk, hold)
			groups, grouped, isolated, fallbacks := s.PaymentGroupStats()
			groups -= before
			switch {
			case size == 1 && groups+grouped != 0:
				t.Errorf("PaymentGroup 1: %d groups of %d calls, want none", groups, grouped)
			case size == 0 && (groups < 1 || groups > 2 || grouped < int64(calls-1) || fallbacks != 0):
				// The first call may have taken the writer's turn alone.
				t.Errorf("default PaymentGroup: %d groups of %d calls (%d fallbacks), want the %d calls in one or two groups", groups, grouped, fallbacks, calls)
			case size == 0 && isolated < 1:
				// The calls include replays and refusals: the group runs
				// again behind savepoints.
				t.Errorf("default PaymentGroup: %d groups run again behind savepoints, want the group with failures to be", isolated)
			}
		})
	}
}

// A group in which no operation fails commits in one plain transaction: it
// is not run again behind savepoints, and every start took.
func TestPaymentGroupWithoutFailuresRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 20
	storetest.Stock(t, s, n, "a")
	for i := range n {
		storetest.Create(t, s, fmt.Sprintf("g%02d", i), "a")
	}
	// Hold the writer so that the starts queue into one group.
	release := holdWriter(t, s, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: fmt.Sprintf("g%02d", i), PaymentID: fmt.Sprintf("p%02d", i)})
			errs <- err
		}()
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a start failed: %v", err)
		}
	}
	groups, grouped, isolated, fallbacks := s.PaymentGroupStats()
	if groups < 1 || grouped < n-1 || isolated != 0 || fallbacks != 0 {
		t.Fatalf("%d groups of %d starts, %d run again behind savepoints, %d fallbacks: want the starts grouped, none run again", groups, grouped, isolated, fallbacks)
	}
	for i := range n {
		if o, err := s.GetOrder(ctx, fmt.Sprintf("g%02d", i)); err != nil || o.Status != order.Paying {
			t.Fatalf("order g%02d after its start: %+v %v", i, o.Status, err)
		}
	}
}

// holdWriter takes SQLite's writer in a transaction of its own and returns
// what releases it: once waiting payment operations are queued behind it (at
// most 10 s), the transaction ends.
func holdWriter(t *testing.T, s *sqlite.Store, waiting int) (release func()) {
	t.Helper()
	held, free, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.WithTx(context.Background(), core.TxOptions{}, func(*core.Tx) error {
			close(held)
			<-free
			return nil
		})
	}()
	<-held
	return func() {
		deadline := time.Now().Add(10 * time.Second)
		for s.PaymentsWaiting() < int64(waiting) {
			if time.Now().After(deadline) {
				t.Errorf("%d of %d calls queued after 10s", s.PaymentsWaiting(), waiting)
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(free)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkPayments: b.N paid orders, each a payment start then its signed
// success, 64 at a time, on a file with synchronous FULL (lapse serve's
// default) — grouped (the default PaymentGroup) and one transaction each.
// Reports ns per paid order (two payment operations).
func BenchmarkPayments(b *testing.B) {
	for _, size := range []int{0, 1} {
		b.Run(fmt.Sprintf("PaymentGroup=%d", size), func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(b.TempDir(), "lapse.db"), PaymentGroup: size})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			storetest.Stock(b, s, int64(b.N), "a")
			ps := make([]store.CreateOrderParams, b.N)
			for i := range ps {
				ps[i] = storetest.Params(fmt.Sprintf("o%07d", i), order.Item{SKU: "a", Qty: 1})
				ps[i].Timeout = time.Hour
			}
			if _, errs := storetest.CreateAll(s, ps); errors.Join(errs...) != nil {
				b.Fatal(errors.Join(errs...))
			}
			next := make(chan string, b.N)
			for _, p := range ps {
				next <- p.ID
			}
			close(next)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for id := range next {
						o, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id})
						if err == nil {
							var res store.PaymentResult
							res, err = s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: o.PaymentID, AmountCents: o.AmountCents, CallbackID: "cb-" + id})
							if err == nil && res.Outcome != store.OutcomePaid {
								err = fmt.Errorf("outcome %v", res.Outcome)
							}
						}
						if err != nil {
							b.Error(id, err)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
