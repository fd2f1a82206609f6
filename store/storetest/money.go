package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseMoney runs the cases of the money paths that once left states the
// audit rejects (issue 23's defects 1–4 and 10), then the generated sequences.
func exerciseMoney(t *testing.T, newStore Factory) {
	t.Run("an ended attempt is terminal: a later report of it is a conflict that changes nothing", func(t *testing.T) { testEndedAttemptTerminal(t, newStore) })
	t.Run("a success of another amount on the current attempt ends it: the order is PENDING again", func(t *testing.T) { testWrongAmountEndsAttempt(t, newStore) })
	t.Run("a success of an attempt lapse never started supersedes the open one", func(t *testing.T) { testUnknownSuccessSupersedes(t, newStore) })
	t.Run("a payment in another currency cannot pay the order", func(t *testing.T) { testCurrency(t, newStore) })
	t.Run("a payment id belongs to one order", func(t *testing.T) { testPaymentIDAcrossOrders(t, newStore) })
	t.Run("a confirmed cancel ends the order's open attempts", func(t *testing.T) { testConfirmedCancelEndsAttempts(t, newStore) })
	t.Run("generated sequences of pays, reports, cancels and timeouts leave the audit passing", func(t *testing.T) { testMoneySequences(t, newStore) })
}

// testEndedAttemptTerminal: defect 1. pay-1 reported SUCCEEDED with 999 is
// money to give back; its re-report with the order's amount must not pay the
// order (it did: MarkPaid checked only status and amount, and save_payment
// then overwrote the REFUND_REQUIRED row).
func testEndedAttemptTerminal(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "t1", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "t1", PaymentID: "pay-1"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "t1", PaymentID: "pay-1", AmountCents: 999})
	if err != nil || res.Outcome != store.OutcomeRefundRequired || !res.Order.RefundRequired {
		t.Fatalf("SUCCEEDED pay-1 999: %+v %v, want refund_required", res, err)
	}
	res, err = s.CompletePayment(ctx, store.PaymentParams{OrderID: "t1", PaymentID: "pay-1", AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomeConflict || res.Order.Status == order.Paid {
		t.Fatalf("SUCCEEDED pay-1 1000 after 999: %+v %v, want a conflict that does not pay", res, err)
	}
	o := get(t, s, "t1")
	p := paymentOf(t, o, "pay-1")
	if o.Status == order.Paid || p.Status != order.PaymentRefundRequired || p.AmountCents != 999 || p.Conflicts != 1 {
		t.Fatalf("after the re-report: order %s, attempt %+v; want not PAID, REFUND_REQUIRED of 999 with 1 conflict", o.Status, p)
	}
	// A FAILED of the ended attempt is a conflict too.
	if res, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "t1", PaymentID: "pay-1"}); err != nil || res.Outcome != store.OutcomeConflict {
		t.Fatalf("FAILED of an ended attempt: %+v %v, want a conflict", res, err)
	}
	if p := paymentOf(t, get(t, s, "t1"), "pay-1"); p.Status != order.PaymentRefundRequired || p.Conflicts != 2 {
		t.Fatalf("after FAILED: %+v, want REFUND_REQUIRED with 2 conflicts", p)
	}
	wantSKU(t, s, "a", 9, 1, 0)

	// The paying attempt of a PAID order reported again with another
	// amount: a conflict, never a second refund nor a rewrite of the row.
	Create(t, s, "t2", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "t2", PaymentID: "pay-2"}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "t2", PaymentID: "pay-2", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomePaid {
		t.Fatalf("pay t2: %+v %v", res, err)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "t2", PaymentID: "pay-2", AmountCents: 5}); err != nil || res.Outcome != store.OutcomeConflict {
		t.Fatalf("the paying attempt again with 5: %+v %v, want a conflict", res, err)
	}
	if o := get(t, s, "t2"); o.RefundRequired || paymentOf(t, o, "pay-2").Status != order.PaymentSucceeded || paymentOf(t, o, "pay-2").AmountCents != 1000 {
		t.Fatalf("t2 after the conflict: %+v", o)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "t2", PaymentID: "pay-2", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomeNoChange {
		t.Fatalf("the same success again: %+v %v, want no change", res, err)
	}
	AuditOK(t, s)
}

// testWrongAmountEndsAttempt: defect 2. A success that cannot pay ends its
// attempt: the order returns to PENDING as a failure would, keeping the
// refund flag, so its timer cancels it (stock back) or a new attempt pays it.
func testWrongAmountEndsAttempt(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	w1 := Create(t, s, "w1", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "w1"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "w1", PaymentID: "w1-1", AmountCents: 999})
	if err != nil || res.Outcome != store.OutcomeRefundRequired || res.Order.Status != order.Pending ||
		!res.Order.RefundRequired || res.Order.PaymentAttempts != 1 {
		t.Fatalf("wrong amount on the current attempt: %+v %v, want PENDING, refund_required, 1 attempt", res, err)
	}
	clk.Set(w1.CancelAfter)
	cres, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"w1"}})
	if err != nil || len(cres.Cancelled) != 1 {
		t.Fatalf("timeout of w1: %+v %v, want it cancelled", cres, err)
	}
	if o := get(t, s, "w1"); o.Status != order.Cancelled || !o.RefundRequired {
		t.Fatalf("w1: %+v", o)
	}
	wantSKU(t, s, "a", 10, 0, 0)

	clk.Set(t0)
	Create(t, s, "w2", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "w2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "w2", PaymentID: "w2-1", AmountCents: 1}); err != nil {
		t.Fatal(err)
	}
	o, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "w2"})
	if err != nil || o.Status != order.Paying || o.PaymentID != "w2-2" {
		t.Fatalf("a new attempt: %+v %v", o, err)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "w2", PaymentID: "w2-2", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomePaid {
		t.Fatalf("the new attempt pays: %+v %v", res, err)
	}
	wantStatuses(t, get(t, s, "w2"), map[string]order.PaymentStatus{"w2-1": order.PaymentRefundRequired, "w2-2": order.PaymentSucceeded})
	wantSKU(t, s, "a", 9, 0, 1)
	AuditOK(t, s)
}

// testUnknownSuccessSupersedes: defect 3. /pay opened o-2-1, the gateway
// reports pay_1: money pays the order, and o-2-1 is SUPERSEDED (to be closed
// at the gateway), never left PENDING on a PAID order.
func testUnknownSuccessSupersedes(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "o-2", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "o-2"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "o-2", PaymentID: "pay_1", AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomePaid || res.Order.PaymentID != "pay_1" {
		t.Fatalf("SUCCEEDED of pay_1: %+v %v, want PAID by pay_1", res, err)
	}
	wantStatuses(t, get(t, s, "o-2"), map[string]order.PaymentStatus{"o-2-1": order.PaymentSuperseded, "pay_1": order.PaymentSucceeded})
	AuditOK(t, s)
}

// testCurrency: defect 4. A 1000 JPY payment does not pay a 1000 EUR order.
func testCurrency(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, "a")
	for _, c := range []struct {
		id, currency string
		paid         bool
	}{{"c-jpy", "JPY", false}, {"c-eur", "EUR", true}, {"c-none", "", true}} {
		Create(t, s, c.id, "a")
		if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: c.id}); err != nil {
			t.Fatal(err)
		}
		res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: c.id, PaymentID: c.id + "-1", AmountCents: 1000, Currency: c.currency})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Outcome == store.OutcomePaid; got != c.paid {
			t.Fatalf("%s: 1000 %q on a 1000 EUR order: %+v, want paid %v", c.id, c.currency, res, c.paid)
		}
		want := c.currency
		if want == "" {
			want = "EUR" // the order's
		}
		if p := paymentOf(t, get(t, s, c.id), c.id+"-1"); p.Currency != want {
			t.Fatalf("%s: attempt %+v, want currency %s", c.id, p, want)
		}
	}
	if o := get(t, s, "c-jpy"); o.Status != order.Pending || !o.RefundRequired {
		t.Fatalf("c-jpy: %+v, want PENDING with refund_required", o)
	}
	AuditOK(t, s)
}

// testPaymentIDAcrossOrders: defect 10. One payment id, one order: a second
// order may neither start an attempt by it nor be paid by it.
func testPaymentIDAcrossOrders(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "x1", "a")
	Create(t, s, "x2", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "x1", PaymentID: "pi_shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "x2", PaymentID: "pi_shared"}); !errors.Is(err, store.ErrPaymentIDUsed) {
		t.Fatalf("second order starts pi_shared: %v, want ErrPaymentIDUsed", err)
	}
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "x2", PaymentID: "pi_shared", AmountCents: 1000}); !errors.Is(err, store.ErrPaymentIDUsed) {
		t.Fatalf("pi_shared reported for the second order: %v, want ErrPaymentIDUsed", err)
	}
	if o := get(t, s, "x2"); o.Status != order.Pending || len(o.Payments) != 0 || o.Version != 1 {
		t.Fatalf("x2 after the refusals: %+v, want untouched", o)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "x1", PaymentID: "pi_shared", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomePaid {
		t.Fatalf("pi_shared pays x1: %+v %v", res, err)
	}
	if id, err := s.OrderOfPayment(ctx, "pi_shared"); err != nil || id != "x1" {
		t.Fatalf("order of pi_shared: %q %v", id, err)
	}
	wantSKU(t, s, "a", 8, 1, 1)
	AuditOK(t, s)
}

// testConfirmedCancelEndsAttempts: the gateway confirmed every open attempt
// closed and unpaid; the cancel records them so (FAILED), leaving no PENDING
// attempt on a CANCELLED order.
func testConfirmedCancelEndsAttempts(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	o := Create(t, s, "k1", "a")
	for _, id := range []string{"k1-a", "k1-b"} {
		if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "k1", PaymentID: id}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(o.CancelAfter)
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"k1"}, Confirmed: true})
	if err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("confirmed cancel: %+v %v", res, err)
	}
	wantStatuses(t, get(t, s, "k1"), map[string]order.PaymentStatus{"k1-a": order.PaymentFailed, "k1-b": order.PaymentFailed})
	wantSKU(t, s, "a", 10, 0, 0)
	AuditOK(t, s)
}

// testMoneySequences: a few thousand random interleavings of payment starts,
// SUCCEEDED and FAILED reports (of the current attempt, an earlier one or one
// lapse never started; with the order's amount or another, in its currency,
// another or none), exact re-reports, buyer cancels and timeouts (plain and
// gateway-confirmed), over groups of orders created together; the audit must
// pass after them. The seed is fixed so a failure reproduces;
// LAPSE_TEST_SEED picks another.
func testMoneySequences(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	seed := uint64(23)
	if v, err := strconv.ParseUint(os.Getenv("LAPSE_TEST_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	const groups, perGroup, opsPerOrder = 60, 4, 12
	Stock(t, s, groups*perGroup, "a", "b")
	ops := 0
	for g := range groups {
		type state struct {
			o       order.Order
			ids     []string // payment ids reported or started so far
			reports []store.PaymentParams
			failed  []bool
		}
		group := make([]*state, perGroup)
		var ids []string
		for i := range group {
			id := fmt.Sprintf("seq-%d-%d", g, i)
			group[i] = &state{o: Create(t, s, id, "a", "b")}
			ids = append(ids, id)
		}
		for range perGroup * opsPerOrder {
			st := group[rng.IntN(perGroup)]
			id := st.o.ID
			pick := func() string {
				switch r := rng.IntN(4); {
				case r == 0 || len(st.ids) == 0:
					return fmt.Sprintf("%s-x%d", id, rng.IntN(3)) // maybe never started
				case r == 1:
					if cur := get(t, s, id).PaymentID; cur != "" {
						return cur
					}
				}
				return st.ids[rng.IntN(len(st.ids))]
			}
			var err error
			ops++
			switch op := rng.IntN(10); {
			case op < 2:
				pid := ""
				if rng.IntN(2) == 0 {
					pid = fmt.Sprintf("%s-n%d", id, rng.IntN(4))
				}
				var o order.Order
				if o, err = s.StartPayment(ctx, store.StartPaymentParams{OrderID: id, PaymentID: pid}); err == nil {
					st.ids = append(st.ids, o.PaymentID)
				}
			case op < 5:
				p := store.PaymentParams{OrderID: id, PaymentID: pick(), AmountCents: []int64{1000, 1000, 999}[rng.IntN(3)],
					Currency: []string{"", "EUR", "JPY"}[rng.IntN(3)]}
				st.ids = append(st.ids, p.PaymentID)
				st.reports, st.failed = append(st.reports, p), append(st.failed, false)
				_, err = s.CompletePayment(ctx, p)
			case op < 7:
				p := store.PaymentParams{OrderID: id, PaymentID: pick()}
				st.reports, st.failed = append(st.reports, p), append(st.failed, true)
				_, err = s.FailPayment(ctx, p)
			case op < 8 && len(st.reports) > 0:
				i := rng.IntN(len(st.reports))
				if st.failed[i] {
					_, err = s.FailPayment(ctx, st.reports[i])
				} else {
					_, err = s.CompletePayment(ctx, st.reports[i])
				}
			case op < 9:
				_, err = s.CancelOrder(ctx, id)
			default:
				if clk.Now().Before(st.o.CancelAfter) {
					clk.Set(st.o.CancelAfter)
				}
				_, err = s.CancelDue(ctx, store.CancelDueParams{IDs: []string{id}, SkipAttempted: rng.IntN(2) == 0, Confirmed: rng.IntN(3) == 0})
			}
			switch {
			case err == nil, errors.Is(err, store.ErrNotPending), errors.Is(err, store.ErrOrderExpired), errors.Is(err, store.ErrPaymentIDUsed):
			default:
				t.Fatalf("seed %d, group %d, order %s: %v", seed, g, id, err)
			}
		}
		// Timeouts for what is left, so no order stays PENDING past the audit's lag.
		if clk.Now().Before(group[0].o.CancelAfter) {
			clk.Set(group[0].o.CancelAfter)
		}
		if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids, Confirmed: rng.IntN(2) == 0}); err != nil {
			t.Fatal(err)
		}
		if g%20 == 19 {
			AuditOK(t, s)
		}
	}
	t.Logf("seed %d: %d operations on %d orders", seed, ops, groups*perGroup)
	AuditOK(t, s)
}
