package storetest

import (
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

// payOp is one payment call of PaymentsAtOnce: what it sends, and what
// checks its answer (alone; pairs on one order are checked together).
type payOp struct {
	name string
	call func(ctx context.Context) (store.PaymentResult, error)
	res  store.PaymentResult
	err  error
}

func start(s store.Store, id, paymentID string) func(context.Context) (store.PaymentResult, error) {
	return func(ctx context.Context) (store.PaymentResult, error) {
		o, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id, PaymentID: paymentID})
		return store.PaymentResult{Order: o}, err
	}
}

func complete(s store.Store, p store.PaymentParams) func(context.Context) (store.PaymentResult, error) {
	return func(ctx context.Context) (store.PaymentResult, error) { return s.CompletePayment(ctx, p) }
}

func fail(s store.Store, p store.PaymentParams) func(context.Context) (store.PaymentResult, error) {
	return func(ctx context.Context) (store.PaymentResult, error) { return s.FailPayment(ctx, p) }
}

func testPaymentsAtOnce(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	PaymentsAtOnce(t, newStore(t, clk), clk, nil)
}

// PaymentsAtOnce sends payment starts and reports of different orders and
// of the same order at once — a store that groups them commits them
// together — and checks that each is answered as it would be alone: starts,
// successes, failures, a success of another amount, a success for a
// CANCELLED order (refund_required), a start too late or for an order no
// longer PENDING, an unknown order, a replayed callback, two callbacks of
// one success, a start and its success. s is new and reads clk.
//
// hold, when not nil, is called with the number of calls before they are
// sent, and the function it returns once they all have been: a driver's
// test holds its writer in between so that the calls queue into one group.
func PaymentsAtOnce(t *testing.T, s store.Store, clk *clock.Fake, hold func(calls int) (release func())) {
	t.Helper()
	ctx := context.Background()
	Stock(t, s, 100, "a")
	exp := Create(t, s, "g-exp", "a")
	clk.Advance(timeout / 2) // every other order's window outlives g-exp's
	mk := func(id string, st order.Status, paymentID string) {
		Create(t, s, id, "a")
		switch st {
		case order.Paying:
			if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id, PaymentID: paymentID}); err != nil {
				t.Fatalf("start %s: %v", id, err)
			}
		case order.Cancelled:
			into(t, s, id, order.Cancelled)
		}
	}
	var ops []*payOp
	add := func(name string, call func(context.Context) (store.PaymentResult, error)) {
		ops = append(ops, &payOp{name: name, call: call})
	}
	for i := range 4 {
		id := fmt.Sprintf("g-start-%d", i)
		mk(id, order.Pending, "")
		add(id, start(s, id, "ps-"+id))
	}
	for i := range 4 {
		id := fmt.Sprintf("g-paid-%d", i)
		mk(id, order.Paying, "pp-"+id)
		add(id, complete(s, store.PaymentParams{OrderID: id, PaymentID: "pp-" + id, AmountCents: 1000, CallbackID: "cb-" + id}))
	}
	for i := range 2 {
		id := fmt.Sprintf("g-fail-%d", i)
		mk(id, order.Paying, "pf-"+id)
		add(id, fail(s, store.PaymentParams{OrderID: id, PaymentID: "pf-" + id, CallbackID: "cb-" + id}))
	}
	mk("g-amount", order.Paying, "pa")
	add("g-amount", complete(s, store.PaymentParams{OrderID: "g-amount", PaymentID: "pa", AmountCents: 999, CallbackID: "cb-amount"}))
	mk("g-cancelled", order.Cancelled, "")
	add("g-cancelled", complete(s, store.PaymentParams{OrderID: "g-cancelled", PaymentID: "pc", AmountCents: 1000, CallbackID: "cb-cancelled"}))
	mk("g-notpending", order.Cancelled, "")
	add("g-notpending", start(s, "g-notpending", "pn"))
	add("g-exp", start(s, "g-exp", "pe"))
	add("g-ghost", complete(s, store.PaymentParams{OrderID: "g-ghost", PaymentID: "px", AmountCents: 1000, CallbackID: "cb-ghost"}))
	// Pairs on one order.
	mk("g-twice", order.Pending, "")
	add("g-twice", start(s, "g-twice", "pt"))
	add("g-twice", start(s, "g-twice", "pt"))
	mk("g-replay", order.Paying, "pr")
	replay := store.PaymentParams{OrderID: "g-replay", PaymentID: "pr", AmountCents: 1000, CallbackID: "cb-replay"}
	add("g-replay", complete(s, replay))
	add("g-replay", complete(s, replay))
	mk("g-dup", order.Paying, "pd")
	add("g-dup", complete(s, store.PaymentParams{OrderID: "g-dup", PaymentID: "pd", AmountCents: 1000, CallbackID: "cb-dup-1"}))
	add("g-dup", complete(s, store.PaymentParams{OrderID: "g-dup", PaymentID: "pd", AmountCents: 1000, CallbackID: "cb-dup-2"}))
	mk("g-both", order.Pending, "")
	add("g-both", start(s, "g-both", "pb"))
	add("g-both", complete(s, store.PaymentParams{OrderID: "g-both", PaymentID: "pb", AmountCents: 1000, CallbackID: "cb-both"}))

	clk.Set(exp.ExpiresAt) // g-exp's window closed, the others' open
	var release func()
	if hold != nil {
		release = hold(len(ops))
	}
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			op.res, op.err = op.call(ctx)
		})
	}
	if release != nil {
		release()
	}
	wg.Wait()

	by := map[string][]*payOp{}
	for _, op := range ops {
		by[op.name] = append(by[op.name], op)
	}
	want := func(op *payOp, outcome store.PaymentOutcome, status order.Status) {
		t.Helper()
		if op.err != nil || op.res.Outcome != outcome || op.res.Order.Status != status || op.res.Order.ID != op.name {
			t.Errorf("%s: %+v %v, want outcome %v and %s", op.name, op.res, op.err, outcome, status)
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("g-start-%d", i)
		want(by[id][0], 0, order.Paying)
		if o := get(t, s, id); o.Status != order.Paying || o.PaymentID != "ps-"+id {
			t.Errorf("%s: %+v, want PAYING with ps-%s", id, o, id)
		} else {
			wantStatuses(t, o, map[string]order.PaymentStatus{"ps-" + id: order.PaymentPending})
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("g-paid-%d", i)
		want(by[id][0], store.OutcomePaid, order.Paid)
		if o := get(t, s, id); o.Status != order.Paid || o.PaymentID != "pp-"+id {
			t.Errorf("%s: %+v, want PAID by pp-%s", id, o, id)
		}
	}
	for i := range 2 {
		id := fmt.Sprintf("g-fail-%d", i)
		want(by[id][0], store.OutcomeFailed, order.Pending)
		if o := get(t, s, id); o.Status != order.Pending || o.PaymentAttempts != 1 {
			t.Errorf("%s: %+v, want PENDING after 1 attempt", id, o)
		} else {
			wantStatuses(t, o, map[string]order.PaymentStatus{"pf-" + id: order.PaymentFailed})
		}
	}
	// The current attempt's success of another amount ends it: PENDING again.
	want(by["g-amount"][0], store.OutcomeRefundRequired, order.Pending)
	if o := get(t, s, "g-amount"); !o.RefundRequired || paymentOf(t, o, "pa").Status != order.PaymentRefundRequired {
		t.Errorf("g-amount: %+v, want refund_required and the attempt REFUND_REQUIRED", o)
	}
	want(by["g-cancelled"][0], store.OutcomeRefundRequired, order.Cancelled)
	if o := get(t, s, "g-cancelled"); o.Status != order.Cancelled || !o.RefundRequired {
		t.Errorf("g-cancelled: %+v, want CANCELLED with refund_required", o)
	}
	if err := by["g-notpending"][0].err; !errors.Is(err, store.ErrNotPending) {
		t.Errorf("g-notpending: %v, want ErrNotPending", err)
	}
	if err := by["g-exp"][0].err; !errors.Is(err, store.ErrOrderExpired) {
		t.Errorf("g-exp: %v, want ErrOrderExpired", err)
	}
	if o := get(t, s, "g-exp"); o.Status != order.Pending || o.Version != exp.Version {
		t.Errorf("g-exp: an expired start changed the order: %+v", o)
	}
	if err := by["g-ghost"][0].err; !errors.Is(err, store.ErrNotFound) {
		t.Errorf("g-ghost: %v, want ErrNotFound", err)
	}
	for _, op := range by["g-twice"] {
		want(op, 0, order.Paying)
	}
	if o := get(t, s, "g-twice"); o.PaymentID != "pt" || o.Status != order.Paying {
		t.Errorf("g-twice: %+v, want PAYING with pt", o)
	} else {
		wantStatuses(t, o, map[string]order.PaymentStatus{"pt": order.PaymentPending})
	}
	outcomes := func(id string) []store.PaymentOutcome {
		var out []store.PaymentOutcome
		for _, op := range by[id] {
			if op.err != nil || op.res.Order.Status != order.Paid {
				t.Errorf("%s: %+v %v, want PAID", id, op.res, op.err)
			}
			out = append(out, op.res.Outcome)
		}
		slices.Sort(out)
		return out
	}
	if got, w := outcomes("g-replay"), sorted(store.OutcomePaid, store.OutcomeReplayed); !slices.Equal(got, w) {
		t.Errorf("g-replay: outcomes %v, want %v", got, w)
	}
	if got, w := outcomes("g-dup"), sorted(store.OutcomePaid, store.OutcomeNoChange); !slices.Equal(got, w) {
		t.Errorf("g-dup: outcomes %v, want %v", got, w)
	}
	// g-both: the success pays the order whichever came first; the start
	// finds it PAYING (nil) or already PAID (ErrNotPending).
	st, ok := by["g-both"][0], by["g-both"][1]
	want(ok, store.OutcomePaid, order.Paid)
	if st.err != nil && !errors.Is(st.err, store.ErrNotPending) {
		t.Errorf("g-both: start %v, want nil or ErrNotPending", st.err)
	}
	// The unknown order's callback was rolled back with it, not remembered:
	// sent again once the order exists, it applies.
	mk("g-ghost", order.Paying, "px")
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "g-ghost", PaymentID: "px", AmountCents: 1000, CallbackID: "cb-ghost"}); err != nil || res.Outcome != store.OutcomePaid {
		t.Errorf("g-ghost's callback once the order exists: %+v %v, want OutcomePaid", res, err)
	}
	// Eight orders paid, each once; the audit checks every ledger row,
	// counter and event (order.paid, order.refund_required) once.
	if got := sku(t, s, "a").Sold; got != 8 {
		t.Errorf("sold %d units, want 8", got)
	}
	AuditOK(t, s)
}

func sorted(os ...store.PaymentOutcome) []store.PaymentOutcome {
	slices.Sort(os)
	return os
}
