// Package storetest is the conformance suite every store driver passes
// against a real database before lapse runs on it (one shared suite,
// one test line per driver):
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store { … })
//	}
//
// The factory returns an empty, migrated store whose guards read clk; the
// suite closes nothing itself, so the factory registers cleanup with t.Cleanup.
package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Factory returns a new, empty, migrated store reading time from clk.
type Factory func(t *testing.T, clk clock.Clock) store.Store

// t0 is the fake clock's start for every test: a fixed instant so failures reproduce.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	timeout = 10 * time.Minute
	grace   = time.Minute
)

// Exercise runs the whole suite.
func Exercise(t *testing.T, newStore Factory) {
	exerciseCommands(t, newStore)
	exerciseRefunds(t, newStore)
	t.Run("every status and action follows the transition table", func(t *testing.T) { testTransitionTable(t, newStore) })
	t.Run("create reserves every item or nothing", func(t *testing.T) { testCreateAllOrNothing(t, newStore) })
	t.Run("create refuses a duplicate id", func(t *testing.T) { testDuplicateID(t, newStore) })
	t.Run("idempotency keys replay the same order and reserve once", func(t *testing.T) { testIdempotency(t, newStore) })
	t.Run("creates sent at once are answered as if alone", func(t *testing.T) { testConcurrentCreates(t, newStore) })
	t.Run("start payment needs expires_at ahead", func(t *testing.T) { testStartPaymentExpiry(t, newStore) })
	t.Run("a payment with another amount is money to give back", func(t *testing.T) { testAmountMismatch(t, newStore) })
	t.Run("cancel due honours cancel_after and payment attempts", func(t *testing.T) { testCancelDueGuards(t, newStore) })
	t.Run("cancel due handles batches of 200 in one call", func(t *testing.T) { testCancelDueBatch(t, newStore) })
	t.Run("claim mode takes due orders earliest first, honouring lag", func(t *testing.T) { testClaim(t, newStore) })
	t.Run("concurrent claimers never take the same order", func(t *testing.T) { testConcurrentClaim(t, newStore) })
	t.Run("a confirmed cancel takes PAYING orders, only when due", func(t *testing.T) { testConfirmedCancel(t, newStore) })
	t.Run("an operator's cancel takes PENDING and PAYING orders before their deadline, as operator", func(t *testing.T) { testOperatorCancel(t, newStore) })
	t.Run("payment checks list PAYING and attempted orders past their deadline", func(t *testing.T) { testPaymentChecks(t, newStore) })
	t.Run("a replayed callback changes nothing", func(t *testing.T) { testReplayedCallback(t, newStore) })
	t.Run("payment starts and reports sent at once are answered as if alone", func(t *testing.T) { testPaymentsAtOnce(t, newStore) })
	t.Run("stock is released and committed at most once", func(t *testing.T) { testStockOnce(t, newStore) })
	t.Run("every transition writes its outbox event", func(t *testing.T) { testOutbox(t, newStore) })
	exerciseExtend(t, newStore)
	exerciseOutbox(t, newStore)
	t.Run("a store names its data the same way every time, and another database another way", func(t *testing.T) { testIdentity(t, newStore) })
	exerciseTasks(t, newStore)
	exerciseReserve(t, newStore)
	t.Run("a payment id finds its order", func(t *testing.T) { testOrderOfPayment(t, newStore) })
	t.Run("list pages through every order once", func(t *testing.T) { testList(t, newStore) })
	t.Run("pending deadlines page in due order", func(t *testing.T) { testPendingDeadlines(t, newStore) })
	t.Run("stuck payments are counted and audited as warnings", func(t *testing.T) { testStuck(t, newStore) })
	t.Run("the dashboard's counts, series and finder", func(t *testing.T) { testDashboard(t, newStore) })
	t.Run("the finder's past-deadline filter lists open orders most overdue first", func(t *testing.T) { testFindPastDeadline(t, newStore) })
	t.Run("set stock adjusts the total", func(t *testing.T) { testSetStock(t, newStore) })
	t.Run("concurrent pay, callback, buyer cancel and timeout at the deadline", func(t *testing.T) { testRace(t, newStore) })
	t.Run("items given out of SKU order are answered, announced and read in one order", func(t *testing.T) { testItemsOutOfOrder(t, newStore) })
	t.Run("a second start payment racing the first attempt's failure is never expired", func(t *testing.T) { testStartRacingFail(t, newStore) })
	t.Run("a retried create of the order that took the last unit is order_exists, alone or grouped", func(t *testing.T) { testGroupAnswersAsAlone(t, newStore) })
	t.Run("creates, buyer cancels and timeouts on shared SKUs never deadlock", func(t *testing.T) { testNoDeadlocks(t, newStore) })
	t.Run("payment attempts: each report acts on the attempt it names", func(t *testing.T) { testPaymentAttempts(t, newStore) })
	t.Run("the next deadline skips what the claim skips; a claim never reaches past now", func(t *testing.T) { testClaimAgreesWithNextDeadline(t, newStore) })
	t.Run("a failing hook's record backs its order off the claim, and the audit warns of it", func(t *testing.T) { testHookFailures(t, newStore) })
	exerciseMoney(t, newStore)
	exerciseRetention(t, newStore)
}

// Create places an order of qty 1 per SKU with the suite's timeout and grace.
func Create(t testing.TB, s store.Store, id string, skus ...string) order.Order {
	t.Helper()
	items := make([]order.Item, len(skus))
	for i, sku := range skus {
		items[i] = order.Item{SKU: sku, Qty: 1}
	}
	res, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
		ID: id, Items: items, AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return res.Order
}

// Stock sets each SKU's available quantity.
func Stock(t testing.TB, s store.Store, available int64, skus ...string) {
	t.Helper()
	for _, sku := range skus {
		if _, err := s.SetStock(context.Background(), sku, available); err != nil {
			t.Fatalf("set stock %s: %v", sku, err)
		}
	}
}

// AuditOK fails the test unless every invariant holds.
func AuditOK(t testing.TB, s store.Store) {
	t.Helper()
	rep, err := s.Audit(context.Background(), store.AuditParams{AllowedLag: time.Hour})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	if !rep.OK() {
		for _, c := range rep.Checks {
			if c.Count > 0 && !c.Warning {
				t.Errorf("audit %s: %d violation(s): %v", c.Name, c.Count, c.Examples)
			}
		}
		t.FailNow()
	}
}

func sku(t testing.TB, s store.Store, name string) store.SKU {
	t.Helper()
	k, err := s.GetSKU(context.Background(), name)
	if err != nil {
		t.Fatalf("get sku %s: %v", name, err)
	}
	return k
}

func wantSKU(t testing.TB, s store.Store, name string, available, locked, sold int64) {
	t.Helper()
	got := sku(t, s, name)
	want := store.SKU{SKU: name, Available: available, Locked: locked, Sold: sold}
	if got != want {
		t.Fatalf("sku %s = %+v, want %+v", name, got, want)
	}
}

func get(t testing.TB, s store.Store, id string) order.Order {
	t.Helper()
	o, err := s.GetOrder(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return o
}

// apply performs one action the way lapse does, returning the error.
func apply(ctx context.Context, s store.Store, id string, a order.Action) (store.PaymentOutcome, error) {
	switch a {
	case order.ActStartPayment:
		_, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id})
		return 0, err
	case order.ActPaymentSucceeded, order.ActPaymentFailed:
		// The report is of the order's current attempt (or, for a PAID order,
		// of the payment that paid it: a duplicate).
		o, err := s.GetOrder(ctx, id)
		if err != nil {
			return 0, err
		}
		p := store.PaymentParams{OrderID: id, PaymentID: cmp.Or(o.PaymentID, "pay-"+id), AmountCents: 1000}
		var res store.PaymentResult
		if a == order.ActPaymentSucceeded {
			res, err = s.CompletePayment(ctx, p)
		} else {
			res, err = s.FailPayment(ctx, p)
		}
		return res.Outcome, err
	case order.ActBuyerCancel:
		_, err := s.CancelOrder(ctx, id)
		return 0, err
	case order.ActTimeout:
		_, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{id}})
		return 0, err
	}
	return 0, fmt.Errorf("unknown action %s", a)
}

// into drives a fresh order into status from PENDING.
func into(t testing.TB, s store.Store, id string, status order.Status) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch status {
	case order.Paying:
		_, err = s.StartPayment(ctx, store.StartPaymentParams{OrderID: id})
	case order.Paid:
		if _, err = s.StartPayment(ctx, store.StartPaymentParams{OrderID: id}); err == nil {
			_, err = s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: "first-" + id, AmountCents: 1000})
		}
	case order.Cancelled:
		_, err = s.CancelOrder(ctx, id)
	}
	if err != nil {
		t.Fatalf("drive %s into %s: %v", id, status, err)
	}
	if got := get(t, s, id).Status; got != status {
		t.Fatalf("drive %s into %s: got %s", id, status, got)
	}
}

// intoCancelling drives a fresh order of order-service mode into
// CANCELLING: its deadline passes and its cancel is commanded. The clock is
// back at t0 afterwards.
func intoCancelling(t testing.TB, s store.Store, clk *clock.Fake, id string) {
	t.Helper()
	clk.Set(get(t, s, id).CancelAfter)
	defer clk.Set(t0)
	if res := commandDue(t, s, id); len(res.Cancelled) != 1 {
		t.Fatalf("drive %s into CANCELLING: %+v", id, res)
	}
	if got := get(t, s, id).Status; got != order.Cancelling {
		t.Fatalf("drive %s into CANCELLING: got %s", id, got)
	}
}

func testTransitionTable(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	for _, from := range order.Statuses {
		for _, a := range order.Actions {
			t.Run(fmt.Sprintf("%s + %s", from, a), func(t *testing.T) {
				clk.Set(t0)
				id := fmt.Sprintf("tt-%s-%s", from, a)
				sk := "sku-" + id
				if from == order.Cancelling {
					// Only order-service mode has it, and its orders hold no stock.
					sk = ""
					CreateCommanded(t, s, id)
					intoCancelling(t, s, clk, id)
				} else {
					Stock(t, s, 5, sk)
					Create(t, s, id, sk)
					into(t, s, id, from)
				}
				before := get(t, s, id)
				if a == order.ActTimeout {
					clk.Set(before.CancelAfter) // the guard is cancel_after <= now
				}
				outcome, err := apply(ctx, s, id, a)
				want := order.Transition(from, a)
				after := get(t, s, id)

				if want.Refused {
					wantErr := store.ErrNotPending
					if err == nil || !errors.Is(err, wantErr) {
						t.Fatalf("%s on %s: err = %v, want %v", a, from, err, wantErr)
					}
				} else if err != nil {
					t.Fatalf("%s on %s: unexpected error %v", a, from, err)
				}
				if after.Status != want.To {
					t.Fatalf("%s on %s: status %s, want %s", a, from, after.Status, want.To)
				}
				if changed := after.Version != before.Version; changed != want.Changed {
					t.Fatalf("%s on %s: version %d → %d, want changed=%v", a, from, before.Version, after.Version, want.Changed)
				}
				if after.RefundRequired != (want.RefundRequired || before.RefundRequired) {
					t.Fatalf("%s on %s: refund_required=%v, want %v", a, from, after.RefundRequired, want.RefundRequired)
				}
				switch {
				case a == order.ActPaymentSucceeded && (from == order.Cancelled || from == order.Cancelling) && outcome != store.OutcomeRefundRequired,
					a == order.ActPaymentSucceeded && (from == order.Pending || from == order.Paying) && outcome != store.OutcomePaid,
					a == order.ActPaymentFailed && from == order.Paying && outcome != store.OutcomeFailed,
					// A FAILED of the attempt that paid: a conflict, nothing changes.
					a == order.ActPaymentFailed && from == order.Paid && outcome != store.OutcomeConflict,
					a == order.ActPaymentFailed && from != order.Paying && from != order.Paid && outcome != store.OutcomeNoChange:
					t.Fatalf("%s on %s: outcome %d", a, from, outcome)
				}
				if a == order.ActPaymentFailed && from == order.Paying && after.PaymentAttempts != before.PaymentAttempts+1 {
					t.Fatalf("failed payment: attempts %d → %d", before.PaymentAttempts, after.PaymentAttempts)
				}
				if after.Status == order.Cancelled && from != order.Cancelled {
					wantReason := order.ReasonBuyer
					if a == order.ActTimeout {
						wantReason = order.ReasonTimeout
					}
					if after.CancelReason != wantReason || after.CancelledAt.IsZero() {
						t.Fatalf("cancel reason %q at %v, want %q", after.CancelReason, after.CancelledAt, wantReason)
					}
				}
				switch {
				case sk == "":
				case after.Status == order.Pending, after.Status == order.Paying:
					wantSKU(t, s, sk, 4, 1, 0)
				case after.Status == order.Paid:
					wantSKU(t, s, sk, 4, 0, 1)
				case after.Status == order.Cancelled:
					wantSKU(t, s, sk, 5, 0, 0)
				}
				clk.Set(t0)
				AuditOK(t, s)
			})
		}
	}
}

func testCreateAllOrNothing(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 1, "a", "b")
	_, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "o1", Items: []order.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}},
		AmountCents: 1, Currency: "EUR", Timeout: timeout})
	if !errors.Is(err, store.ErrInsufficientStock) {
		t.Fatalf("short on b: err = %v, want ErrInsufficientStock", err)
	}
	_, err = s.CreateOrder(ctx, store.CreateOrderParams{ID: "o2", Items: []order.Item{{SKU: "a", Qty: 1}, {SKU: "nope", Qty: 1}},
		AmountCents: 1, Currency: "EUR", Timeout: timeout})
	if !errors.Is(err, store.ErrInsufficientStock) {
		t.Fatalf("unknown sku: err = %v, want ErrInsufficientStock", err)
	}
	for _, id := range []string{"o1", "o2"} {
		if _, err := s.GetOrder(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused order %s was written: %v", id, err)
		}
	}
	wantSKU(t, s, "a", 1, 0, 0)
	wantSKU(t, s, "b", 1, 0, 0)
	if evs, err := s.UnpublishedEvents(ctx, 10); err != nil || len(evs) != 0 {
		t.Fatalf("refused orders left events: %v %v", evs, err)
	}
	o := Create(t, s, "o3", "a", "b")
	if o.Status != order.Pending || o.Version != 1 || len(o.Items) != 2 {
		t.Fatalf("created %+v", o)
	}
	if !o.ExpiresAt.Equal(t0.Add(timeout)) || !o.CancelAfter.Equal(t0.Add(timeout+grace)) || !o.CreatedAt.Equal(t0) {
		t.Fatalf("times: created %v expires %v cancel_after %v", o.CreatedAt, o.ExpiresAt, o.CancelAfter)
	}
	if got := get(t, s, "o3"); !equalOrders(got, o) {
		t.Fatalf("read back %+v, want %+v", got, o)
	}
	wantSKU(t, s, "a", 0, 1, 0)
	AuditOK(t, s)
}

func equalOrders(a, b order.Order) bool {
	return a.ID == b.ID && a.Status == b.Status && slices.Equal(a.Items, b.Items) && a.AmountCents == b.AmountCents &&
		a.Currency == b.Currency && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.CancelAfter.Equal(b.CancelAfter) && a.Version == b.Version && a.PaymentAttempts == b.PaymentAttempts
}

func testDuplicateID(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	Stock(t, s, 5, "a")
	Create(t, s, "dup", "a")
	_, err := s.CreateOrder(context.Background(), store.CreateOrderParams{ID: "dup", Items: []order.Item{{SKU: "a", Qty: 1}},
		AmountCents: 1000, Currency: "EUR", Timeout: timeout})
	if !errors.Is(err, store.ErrOrderExists) {
		t.Fatalf("err = %v, want ErrOrderExists", err)
	}
	wantSKU(t, s, "a", 4, 1, 0)
	AuditOK(t, s)
}

func testIdempotency(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 100, "a")
	p := store.CreateOrderParams{ID: "idem-1", Items: []order.Item{{SKU: "a", Qty: 3}}, AmountCents: 10, Currency: "EUR",
		Timeout: timeout, IdempotencyKey: "key-1", RequestHash: "h1"}
	first, err := s.CreateOrder(ctx, p)
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	p2 := p
	p2.ID = "idem-2" // a retry whose id was generated again
	again, err := s.CreateOrder(ctx, p2)
	if err != nil || !again.Replayed || again.Order.ID != "idem-1" {
		t.Fatalf("replay: %+v %v", again, err)
	}
	p3 := p
	p3.RequestHash = "h2"
	if _, err := s.CreateOrder(ctx, p3); !errors.Is(err, store.ErrIdempotencyMismatch) {
		t.Fatalf("other request: err = %v, want ErrIdempotencyMismatch", err)
	}
	wantSKU(t, s, "a", 97, 3, 0)

	// Concurrent retries of one key make one order.
	var wg sync.WaitGroup
	ids := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := p
			q.ID, q.IdempotencyKey = fmt.Sprintf("race-%d", i), "key-race"
			res, err := s.CreateOrder(ctx, q)
			if err != nil {
				t.Errorf("concurrent create: %v", err)
				return
			}
			ids <- res.Order.ID
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Fatalf("one key made %d orders: %v", len(seen), seen)
	}
	wantSKU(t, s, "a", 94, 6, 0)
	AuditOK(t, s)
}

func testStartPaymentExpiry(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 5, "a")
	o := Create(t, s, "exp", "a")
	Create(t, s, "exp2", "a")
	clk.Set(o.ExpiresAt.Add(-time.Millisecond))
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "exp"}); err != nil {
		t.Fatalf("1 ms before expiry: %v", err)
	}
	clk.Set(o.ExpiresAt) // expires_at > now is false
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "exp2"}); !errors.Is(err, store.ErrOrderExpired) {
		t.Fatalf("at expiry: err = %v, want ErrOrderExpired", err)
	}
	if got := get(t, s, "exp2"); got.Status != order.Pending || got.Version != 1 {
		t.Fatalf("expired start changed the order: %+v", got)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "exp"}); err != nil {
		t.Fatalf("already PAYING after expiry must answer as before: %v", err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "missing"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown order: err = %v, want ErrNotFound", err)
	}
}

// A success of another amount than the order's cannot pay it, in any
// status; the money exists, so it is recorded and flagged for a refund —
// never dropped, never a silent no-change — and the status stays.
func testAmountMismatch(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 5, "a")
	for _, st := range []order.Status{order.Pending, order.Paying, order.Paid, order.Cancelled} {
		id := "amt-" + string(st)
		Create(t, s, id, "a")
		into(t, s, id, st)
		before := get(t, s, id)
		pid := id + "-p" // a payment id belongs to one order
		res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: pid, AmountCents: 999})
		if err != nil || res.Outcome != store.OutcomeRefundRequired {
			t.Fatalf("%s: %+v %v, want OutcomeRefundRequired", st, res, err)
		}
		after := get(t, s, id)
		if after.Version != before.Version+1 || after.Status != before.Status || !after.RefundRequired {
			t.Fatalf("%s: after a payment of another amount %+v, want the status kept and refund_required", st, after)
		}
		if p := paymentOf(t, after, pid); p.Status != order.PaymentRefundRequired || p.AmountCents != 999 {
			t.Fatalf("%s: the attempt is %+v, want REFUND_REQUIRED of 999", st, p)
		}
		// The same report again changes nothing.
		if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: pid, AmountCents: 999}); err != nil || res.Outcome != store.OutcomeNoChange {
			t.Fatalf("%s: the same report again: %+v %v, want OutcomeNoChange", st, res, err)
		}
	}
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "missing", PaymentID: "p", AmountCents: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown order: err = %v, want ErrNotFound", err)
	}
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "missing", PaymentID: "p"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown order: err = %v, want ErrNotFound", err)
	}
	AuditOK(t, s)
}

func testCancelDueGuards(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	o := Create(t, s, "due", "a")
	Create(t, s, "attempted", "a")
	into(t, s, "attempted", order.Paying)
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "attempted", PaymentID: "attempted-1"}); err != nil {
		t.Fatal(err)
	}
	Create(t, s, "paying", "a")
	into(t, s, "paying", order.Paying)

	clk.Set(o.CancelAfter.Add(-time.Millisecond))
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"due"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 0 || len(res.Skipped) != 1 || res.Skipped[0].Status != order.Pending ||
		!res.Skipped[0].CancelAfter.Equal(o.CancelAfter) || !res.Now.Before(o.CancelAfter) {
		t.Fatalf("1 ms early: %+v", res)
	}

	clk.Set(o.CancelAfter)
	res, err = s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"due", "attempted", "paying", "ghost"}, SkipAttempted: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 1 || res.Cancelled[0].ID != "due" || !res.Cancelled[0].CancelledAt.Equal(o.CancelAfter) {
		t.Fatalf("at cancel_after: cancelled %+v", res.Cancelled)
	}
	skipped := map[string]store.Skipped{}
	for _, sk := range res.Skipped {
		skipped[sk.ID] = sk
	}
	if sk := skipped["attempted"]; sk.Status != order.Pending || sk.PaymentAttempts != 1 {
		t.Fatalf("attempted: %+v", sk)
	}
	if sk := skipped["paying"]; sk.Status != order.Paying {
		t.Fatalf("paying: %+v", sk)
	}
	if sk := skipped["ghost"]; !sk.Missing {
		t.Fatalf("ghost: %+v", sk)
	}
	// Without SkipAttempted (no gateway), an attempted PENDING order is cancelled; PAYING never.
	res, err = s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"attempted", "paying"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 1 || res.Cancelled[0].ID != "attempted" || res.Cancelled[0].PaymentAttempts != 1 {
		t.Fatalf("no gateway: %+v", res)
	}
	if get(t, s, "paying").Status != order.Paying {
		t.Fatal("a PAYING order was cancelled blind")
	}
	wantSKU(t, s, "a", 9, 1, 0)
	AuditOK(t, s)
}

func testCancelDueBatch(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 1000, "a", "b")
	var ids []string
	for i := range 250 {
		id := fmt.Sprintf("batch-%03d", i)
		Create(t, s, id, "a", "b")
		ids = append(ids, id)
	}
	into(t, s, "batch-007", order.Paid)
	clk.Advance(timeout + grace)
	first, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids[:200]})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.CancelDue(ctx, store.CancelDueParams{IDs: append(ids[200:], ids[:10]...)})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Cancelled) != 199 || len(first.Skipped) != 1 || len(second.Cancelled) != 50 || len(second.Skipped) != 10 {
		t.Fatalf("cancelled %d+%d, skipped %d+%d", len(first.Cancelled), len(second.Cancelled), len(first.Skipped), len(second.Skipped))
	}
	wantSKU(t, s, "a", 999, 0, 1)
	wantSKU(t, s, "b", 999, 0, 1)
	AuditOK(t, s)
}

func testStockOnce(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 3, "a")
	Create(t, s, "once", "a")
	if _, err := s.CancelOrder(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(timeout + grace)
	for range 3 {
		if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"once", "once"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelOrder(ctx, "once"); !errors.Is(err, store.ErrNotPending) {
			t.Fatalf("second buyer cancel: %v", err)
		}
	}
	wantSKU(t, s, "a", 3, 0, 0)
	Create(t, s, "paid", "a")
	into(t, s, "paid", order.Paid)
	for range 3 {
		res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "paid", PaymentID: "first-paid", AmountCents: 1000})
		if err != nil || res.Outcome != store.OutcomeNoChange {
			t.Fatalf("duplicate success: %+v %v", res, err)
		}
	}
	wantSKU(t, s, "a", 2, 0, 1)
	AuditOK(t, s)
}

func testOutbox(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "e1", "a")
	into(t, s, "e1", order.Paid)
	Create(t, s, "e2", "a")
	into(t, s, "e2", order.Cancelled)
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "e2", PaymentID: "late", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	Create(t, s, "e3", "a")
	clk.Advance(timeout + grace)
	if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"e3"}}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.UnpublishedEvents(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ids := map[string]bool{}
	for i, e := range evs {
		got = append(got, e.OrderID+" "+e.Type)
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", e.Seq, evs[i-1].Seq)
		}
		if e.ID == "" || ids[e.ID] || len(e.Payload) == 0 {
			t.Fatalf("event %d: id %q (dup %v), payload %q", e.Seq, e.ID, ids[e.ID], e.Payload)
		}
		ids[e.ID] = true
	}
	want := []string{"e1 order.created", "e1 order.paid", "e2 order.created", "e2 order.cancelled",
		"e2 order.refund_required", "e3 order.created", "e3 order.cancelled"}
	if !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	// One sink: a claim takes the first event of each order; settling two
	// of them publishes them.
	if err := s.RegisterSinks(ctx, []string{"only"}); err != nil {
		t.Fatal(err)
	}
	ds := claim(t, s, "only", 100)
	if got := deliveryNames(ds); !slices.Equal(got, []string{"e1 order.created", "e2 order.created", "e3 order.created"}) {
		t.Fatalf("first claim %v, want the first event of each order", got)
	}
	settle(t, s, "only", ds[:2]...)
	rest, err := s.UnpublishedEvents(ctx, 100)
	if err != nil || len(rest) != len(evs)-2 || rest[0].Seq != evs[1].Seq {
		t.Fatalf("after delivering two: %d left (%v)", len(rest), err)
	}
	AuditOK(t, s)
}

func testList(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a")
	for i := range 23 {
		Create(t, s, fmt.Sprintf("l-%02d", i), "a")
		if i%3 == 0 {
			clk.Advance(time.Millisecond) // some share a created_at, some do not
		}
	}
	into(t, s, "l-05", order.Cancelled)
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		res, err := s.ListOrders(ctx, store.ListOrdersParams{Limit: 5, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range res.Orders {
			if seen[o.ID] {
				t.Fatalf("%s listed twice", o.ID)
			}
			seen[o.ID] = true
			if len(o.Items) != 1 {
				t.Fatalf("%s listed without items", o.ID)
			}
			if i > 0 && o.CreatedAt.After(res.Orders[i-1].CreatedAt) {
				t.Fatal("not newest first")
			}
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	if len(seen) != 23 {
		t.Fatalf("listed %d of 23", len(seen))
	}
	res, err := s.ListOrders(ctx, store.ListOrdersParams{Status: order.Cancelled, Limit: 50})
	if err != nil || len(res.Orders) != 1 || res.Orders[0].ID != "l-05" || res.NextCursor != "" {
		t.Fatalf("status filter: %+v %v", res, err)
	}
	if _, err := s.ListOrders(ctx, store.ListOrdersParams{Limit: 5, Cursor: "!!not-a-cursor"}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Fatalf("bad cursor: err = %v", err)
	}
}

func testPendingDeadlines(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a")
	for i := range 25 {
		clk.Set(t0.Add(time.Duration(25-i) * time.Second)) // created in reverse deadline order
		Create(t, s, fmt.Sprintf("pd-%02d", i), "a")
	}
	into(t, s, "pd-03", order.Paying)
	var all []store.Deadline
	var after store.Deadline
	for {
		page, err := s.PendingDeadlines(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 7 {
			break
		}
		after = page[len(page)-1]
	}
	if len(all) != 24 {
		t.Fatalf("got %d deadlines, want 24 (PENDING only)", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].CancelAfter.Before(all[i-1].CancelAfter) {
			t.Fatal("deadlines not in due order")
		}
	}
	if all[0].OrderID != "pd-24" || !all[0].CancelAfter.Equal(t0.Add(time.Second+timeout+grace)) {
		t.Fatalf("first deadline %+v", all[0])
	}
}

func testStuck(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "stuck", "a")
	into(t, s, "stuck", order.Paying)
	Create(t, s, "fine", "a")
	clk.Advance(timeout + grace + 2*time.Second)
	n, err := s.CountStuck(ctx)
	if err != nil || n != 1 {
		t.Fatalf("stuck = %d, %v; want 1", n, err)
	}
	rep, err := s.Audit(ctx, store.AuditParams{AllowedLag: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var warned, pendingLate bool
	for _, c := range rep.Checks {
		if c.Warning && c.Count == 1 {
			warned = true
		}
		if !c.Warning && c.Count == 1 {
			pendingLate = true // "fine" is PENDING past cancel_after: a violation
		}
	}
	if !warned || !pendingLate || rep.OK() {
		t.Fatalf("audit should warn about the stuck payment and fail on the late PENDING order: %+v", rep)
	}
	if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"fine", "stuck"}}); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Audit(ctx, store.AuditParams{AllowedLag: time.Second})
	if err != nil || !rep.OK() {
		t.Fatalf("a stuck payment alone must not fail the audit: %+v %v", rep, err)
	}
}

func testSetStock(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	if _, err := s.GetSKU(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown sku: %v", err)
	}
	Stock(t, s, 5, "x")
	Create(t, s, "s1", "x")
	into(t, s, "s1", order.Paid)
	Create(t, s, "s2", "x")
	got, err := s.SetStock(ctx, "x", 10)
	if err != nil || got != (store.SKU{SKU: "x", Available: 10, Locked: 1, Sold: 1}) {
		t.Fatalf("set stock: %+v %v", got, err)
	}
	AuditOK(t, s)
}

// testRace runs, for each of many orders, a payer (start payment then a
// successful callback, or on every third order a failed one), a stray
// success callback, a buyer cancel and the timer, all at the order's deadline
// on the real clock. After:
// no order is both paid and cancelled, every payment whose start was accepted
// ends PAID, stock is conserved and the audit passes.
func testRace(t *testing.T, newStore Factory) {
	s := newStore(t, clock.Real{})
	ctx := context.Background()
	const orders = 120
	Stock(t, s, orders, "hot")
	Stock(t, s, 1000, "cold")
	var ids []string
	var deadline time.Time
	for i := range orders {
		id := fmt.Sprintf("race-%03d", i)
		res, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "hot", Qty: 1}, {SKU: "cold", Qty: 2}},
			AmountCents: 500, Currency: "EUR", Timeout: 400 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		deadline = res.Order.CancelAfter
	}
	type verdict struct{ startOK, paid bool }
	var mu sync.Mutex
	verdicts := map[string]*verdict{}
	for _, id := range ids {
		verdicts[id] = &verdict{}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f()
		}()
	}
	for i, id := range ids {
		if i%3 != 0 {
			run(func() { // payer
				if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id}); err != nil {
					return
				}
				mu.Lock()
				verdicts[id].startOK = true
				mu.Unlock()
				res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: "p-" + id, AmountCents: 500})
				if err != nil {
					t.Errorf("callback for %s after accepted start: %v", id, err)
					return
				}
				mu.Lock()
				verdicts[id].paid = res.Order.Status == order.Paid
				mu.Unlock()
			})
		} else {
			// A failed attempt instead: PAYING → PENDING, the timer may then cancel.
			run(func() {
				if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id}); err == nil {
					_, _ = s.FailPayment(ctx, store.PaymentParams{OrderID: id, PaymentID: id + "-1"})
				}
			})
		}
		run(func() {
			_, _ = s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: "dup-" + id, AmountCents: 500})
		})
		if i%2 == 0 {
			run(func() { _, _ = s.CancelOrder(ctx, id) })
		}
	}
	for lo := 0; lo < len(ids); lo += 40 { // the timer, in batches
		batch := ids[lo:min(lo+40, len(ids))]
		run(func() {
			for {
				res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: batch})
				if err != nil {
					t.Errorf("cancel due: %v", err)
					return
				}
				early := 0
				for _, sk := range res.Skipped {
					if sk.Status == order.Pending && sk.CancelAfter.After(res.Now) {
						early++
					}
				}
				if early == 0 {
					return
				}
				time.Sleep(time.Until(deadline)) // fired before the deadline: wait for it, as a scheduler would
			}
		})
	}
	time.Sleep(time.Until(deadline.Add(-2 * time.Millisecond)))
	close(start)
	wg.Wait()
	// A failed attempt after the timer ran puts an order back to PENDING; lapse
	// then schedules its timer again, which this call stands for.
	if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids}); err != nil {
		t.Fatal(err)
	}

	final := map[order.Status]int{}
	for _, id := range ids {
		o := get(t, s, id)
		final[o.Status]++
		v := verdicts[id]
		if !o.PaidAt.IsZero() && !o.CancelledAt.IsZero() {
			t.Errorf("%s is both paid and cancelled", id)
		}
		if v.startOK && (o.Status != order.Paid || !v.paid) {
			t.Errorf("%s: payment start accepted and callback succeeded, yet it ended %s", id, o.Status)
		}
		if o.Status == order.Pending {
			t.Errorf("%s still PENDING after its deadline and a timer", id)
		}
	}
	t.Logf("final statuses: %v", final)
	hot := sku(t, s, "hot")
	if hot.Available+hot.Locked+hot.Sold != orders {
		t.Fatalf("hot stock not conserved: %+v", hot)
	}
	AuditOK(t, s)
}

func testClaim(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	if _, ok, err := s.NextDeadline(ctx, false); err != nil || ok {
		t.Fatalf("empty store: next deadline ok=%v err=%v", ok, err)
	}
	Stock(t, s, 100, "a")
	for i := range 6 {
		clk.Set(t0.Add(time.Duration(i) * time.Second))
		Create(t, s, fmt.Sprintf("c-%d", i), "a")
	}
	into(t, s, "c-0", order.Paying) // due but PAYING: never claimed
	Create(t, s, "c-att", "a")      // due at t0+5s+timeout+grace, with a failed attempt
	into(t, s, "c-att", order.Paying)
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "c-att", PaymentID: "c-att-1"}); err != nil {
		t.Fatal(err)
	}
	next, ok, err := s.NextDeadline(ctx, false)
	if err != nil || !ok || !next.Equal(t0.Add(time.Second+timeout+grace)) {
		t.Fatalf("next deadline %v %v %v, want c-1's", next, ok, err)
	}
	base := t0.Add(timeout + grace)
	clk.Set(base.Add(3 * time.Second)) // c-0..c-3 due; c-0 is PAYING
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := cancelledIDs(res); !slices.Equal(got, []string{"c-1", "c-2"}) {
		t.Fatalf("claim 2: cancelled %v, want earliest first [c-1 c-2]", got)
	}
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10, Lag: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := cancelledIDs(res); len(got) != 0 {
		t.Fatalf("lag 1s: c-3 is due by 0s only, got %v", got)
	}
	clk.Set(base.Add(10 * time.Second))
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10, SkipAttempted: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := cancelledIDs(res); !slices.Equal(got, []string{"c-3", "c-4", "c-5"}) {
		t.Fatalf("skip attempted: cancelled %v", got)
	}
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := cancelledIDs(res); !slices.Equal(got, []string{"c-att"}) {
		t.Fatalf("no gateway: cancelled %v", got)
	}
	if _, ok, _ := s.NextDeadline(ctx, false); ok {
		t.Fatal("no PENDING order left, yet a next deadline")
	}
	if get(t, s, "c-0").Status != order.Paying {
		t.Fatal("claim cancelled a PAYING order")
	}
	AuditOK(t, s)
}

func cancelledIDs(res store.CancelDueResult) []string {
	var ids []string
	for _, c := range res.Cancelled {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

func testConcurrentClaim(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	const n = 300
	Stock(t, s, n, "a")
	for i := range n {
		Create(t, s, fmt.Sprintf("cc-%03d", i), "a")
	}
	clk.Advance(timeout + grace)
	claimEachOnce(t, "due orders", n, func() ([]store.Cancelled, error) {
		res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 25})
		return res.Cancelled, err
	}, func(c store.Cancelled) string { return c.ID }, nil)
	wantSKU(t, s, "a", n, 0, 0)
	AuditOK(t, s)
}

func testConfirmedCancel(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	o := Create(t, s, "cf-paying", "a")
	into(t, s, "cf-paying", order.Paying)
	Create(t, s, "cf-paid", "a")
	into(t, s, "cf-paid", order.Paid)
	clk.Set(o.CancelAfter.Add(-time.Millisecond))
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"cf-paying"}, Confirmed: true})
	if err != nil || len(res.Cancelled) != 0 {
		t.Fatalf("before cancel_after: %+v %v", res, err)
	}
	clk.Set(o.CancelAfter)
	res, err = s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"cf-paying", "cf-paid"}, Confirmed: true, SkipAttempted: true})
	if err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != "cf-paying" {
		t.Fatalf("confirmed: %+v %v", res, err)
	}
	if got := get(t, s, "cf-paid"); got.Status != order.Paid {
		t.Fatalf("a confirmed cancel touched a PAID order: %s", got.Status)
	}
	wantSKU(t, s, "a", 9, 0, 1)
	AuditOK(t, s)
}

func testPaymentChecks(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	for _, id := range []string{"pc-plain", "pc-paying", "pc-attempted", "pc-paid"} {
		Create(t, s, id, "a")
		clk.Advance(time.Second)
	}
	into(t, s, "pc-paying", order.Paying)
	into(t, s, "pc-attempted", order.Paying)
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "pc-attempted", PaymentID: "pc-attempted-1"}); err != nil {
		t.Fatal(err)
	}
	into(t, s, "pc-paid", order.Paid)
	got, err := s.PaymentChecks(ctx, 0, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("before any deadline: %v %v", got, err)
	}
	clk.Set(t0.Add(timeout + grace + 10*time.Second))
	got, err = s.PaymentChecks(ctx, 0, 10)
	if err != nil || len(got) != 2 || got[0].OrderID != "pc-paying" || got[1].OrderID != "pc-attempted" {
		t.Fatalf("after the deadlines: %+v %v", got, err)
	}
	if got, _ := s.PaymentChecks(ctx, 9*time.Second, 10); len(got) != 1 {
		t.Fatalf("lag 9s: %+v, want only pc-paying (due 10s ago)", got)
	}
}

// A FAILED callback replayed after the buyer started paying again must not
// send the order back to PENDING: the store remembers callback ids.
func testReplayedCallback(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "rp", "a")
	into(t, s, "rp", order.Paying)
	fail := store.PaymentParams{OrderID: "rp", PaymentID: "rp-1", CallbackID: "cb-fail-1"}
	res, err := s.FailPayment(ctx, fail)
	if err != nil || res.Outcome != store.OutcomeFailed {
		t.Fatalf("first failure: %+v %v", res, err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "rp"}); err != nil {
		t.Fatal(err)
	}
	res, err = s.FailPayment(ctx, fail)
	if err != nil || res.Outcome != store.OutcomeReplayed || res.Order.Status != order.Paying || res.Order.PaymentAttempts != 1 {
		t.Fatalf("replayed failure: %+v %v", res, err)
	}
	// A different failure message (a second attempt that failed) still applies.
	res, err = s.FailPayment(ctx, store.PaymentParams{OrderID: "rp", PaymentID: "rp-2", CallbackID: "cb-fail-2"})
	if err != nil || res.Outcome != store.OutcomeFailed || res.Order.PaymentAttempts != 2 {
		t.Fatalf("second failure: %+v %v", res, err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "rp"}); err != nil {
		t.Fatal(err)
	}
	ok := store.PaymentParams{OrderID: "rp", PaymentID: "p2", AmountCents: 1000, CallbackID: "cb-ok"}
	if res, err := s.CompletePayment(ctx, ok); err != nil || res.Outcome != store.OutcomePaid {
		t.Fatalf("success: %+v %v", res, err)
	}
	if res, err := s.CompletePayment(ctx, ok); err != nil || res.Outcome != store.OutcomeReplayed || res.Order.Status != order.Paid {
		t.Fatalf("replayed success: %+v %v", res, err)
	}
	// An unknown order's callback is refused and not remembered.
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "ghost", CallbackID: "cb-ghost"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	// Ids are forgotten after store.CallbackMemory.
	clk.Advance(store.CallbackMemory + time.Minute)
	Create(t, s, "rp2", "a")
	into(t, s, "rp2", order.Paying)
	if res, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "rp2", PaymentID: "rp2-1", CallbackID: "cb-fail-1"}); err != nil || res.Outcome != store.OutcomeFailed {
		t.Fatalf("an id older than the memory: %+v %v", res, err)
	}
	AuditOK(t, s)
}
