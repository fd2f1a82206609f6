package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseRefunds is --auto-refund's part of the suite: money an attempt
// owes back gets one refund task, whose settle gives the attempt REFUNDED
// with its event, and an operator can record a refund made outside lapse.
func exerciseRefunds(t *testing.T, newStore Factory) {
	t.Run("refunds: an attempt that owes money gets one task with AutoRefund, none without, and one on demand", func(t *testing.T) { testRefundWritten(t, newStore) })
	t.Run("refunds: concurrent claimers never hold one refund twice; a lease that runs out frees it", func(t *testing.T) { testRefundClaims(t, newStore) })
	t.Run("refunds: a done refund gives REFUNDED and its event; refund_required clears with the last one owed", func(t *testing.T) { testRefundLifecycle(t, newStore) })
	t.Run("refunds: an operator marks an attempt refunded once, and the dispatcher's claim of it goes stale", func(t *testing.T) { testMarkRefunded(t, newStore) })
}

// owing creates order id and cancels it, then reports a late success of each
// payment id: each attempt is money to give back.
func owing(t testing.TB, s store.Store, auto bool, id string, paymentIDs ...string) {
	t.Helper()
	ctx := context.Background()
	Stock(t, s, 100, "r-sku")
	Create(t, s, id, "r-sku")
	if _, err := s.CancelOrder(ctx, id); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	for _, pid := range paymentIDs {
		res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: pid, AmountCents: 1000, AutoRefund: auto})
		if err != nil || res.Outcome != store.OutcomeRefundRequired {
			t.Fatalf("late payment %s of %s: %+v, %v; want refund required", pid, id, res.Outcome, err)
		}
	}
}

func refundsOf(t testing.TB, s store.Store, orderID string) []order.Refund {
	t.Helper()
	rs, err := s.ListRefunds(context.Background(), store.ListTasksParams{OrderID: orderID})
	if err != nil {
		t.Fatalf("list refunds of %s: %v", orderID, err)
	}
	return rs
}

func claimRefunds(t testing.TB, s store.Store, limit int, lease time.Duration) []store.ClaimedRefund {
	t.Helper()
	rs, err := s.ClaimRefunds(context.Background(), store.ClaimTasksParams{Limit: limit, Lease: lease})
	if err != nil {
		t.Fatalf("claim refunds: %v", err)
	}
	return rs
}

func settleRefunds(t testing.TB, s store.Store, os ...store.RefundOutcome) store.SettleRefundsResult {
	t.Helper()
	res, err := s.SettleRefunds(context.Background(), os)
	if err != nil {
		t.Fatalf("settle refunds: %v", err)
	}
	return res
}

func refunded(c store.ClaimedRefund, refundID string) store.RefundOutcome {
	return store.RefundOutcome{PaymentID: c.PaymentID, OrderID: c.OrderID, Attempts: c.Attempts, Done: true, RefundID: refundID}
}

// refundedEvents are the order.refunded events of order id, decoded.
func refundedEvents(t testing.TB, s store.Store, id string) []refundedPayload {
	t.Helper()
	evs, err := s.UnpublishedEvents(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []refundedPayload
	for _, e := range evs {
		if e.OrderID != id || e.Type != order.EventRefunded {
			continue
		}
		var p refundedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatalf("order.refunded payload %s: %v", e.Payload, err)
		}
		out = append(out, p)
	}
	return out
}

type refundedPayload struct {
	SchemaVersion  int    `json:"schema_version"`
	ID             string `json:"id"`
	Status         string `json:"status"`
	RefundRequired bool   `json:"refund_required"`
	Refund         struct {
		PaymentID   string `json:"payment_id"`
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
		RefundID    string `json:"refund_id"`
		Manual      bool   `json:"manual"`
		Note        string `json:"note"`
		Actor       string `json:"actor"`
	} `json:"refund"`
}

func testRefundWritten(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	owing(t, s, true, "auto", "auto-1")
	rs := refundsOf(t, s, "auto")
	if len(rs) != 1 {
		t.Fatalf("refunds of auto: %+v, want one", rs)
	}
	if r := rs[0]; r.PaymentID != "auto-1" || r.OrderID != "auto" || r.AmountCents != 1000 || r.Currency != "EUR" ||
		r.Status != order.TaskPending || r.Attempts != 0 || r.RefundID != "" || r.Manual || !r.NextAt.Equal(t0) || !r.CreatedAt.Equal(t0) {
		t.Fatalf("the refund: %+v, want auto-1 of 1000 EUR, PENDING, due now", r)
	}
	// The same success again changes nothing: still one task.
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "auto", PaymentID: "auto-1", AmountCents: 1000, AutoRefund: true}); err != nil || res.Outcome != store.OutcomeNoChange {
		t.Fatalf("the success again: %+v, %v", res.Outcome, err)
	}
	if rs := refundsOf(t, s, "auto"); len(rs) != 1 {
		t.Fatalf("after the success again: %d refunds", len(rs))
	}
	// A second success of a paid order owes money too; the paying one does not.
	Create(t, s, "paid", "r-sku")
	for _, pid := range []string{"paid-1", "paid-2"} {
		if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "paid", PaymentID: pid, AmountCents: 1000, AutoRefund: true}); err != nil {
			t.Fatal(err)
		}
	}
	if rs := refundsOf(t, s, "paid"); len(rs) != 1 || rs[0].PaymentID != "paid-2" {
		t.Fatalf("refunds of the paid order: %+v, want paid-2's alone", rs)
	}
	// Without AutoRefund, none; EnqueueRefund writes it on demand, once.
	owing(t, s, false, "manual", "manual-1")
	if rs := refundsOf(t, s, "manual"); len(rs) != 0 {
		t.Fatalf("refunds without AutoRefund: %+v", rs)
	}
	for range 2 {
		r, err := s.EnqueueRefund(ctx, "manual-1")
		if err != nil || r.PaymentID != "manual-1" || r.OrderID != "manual" || r.Status != order.TaskPending || r.AmountCents != 1000 {
			t.Fatalf("enqueue: %+v, %v", r, err)
		}
	}
	if rs := refundsOf(t, s, "manual"); len(rs) != 1 {
		t.Fatalf("after enqueue twice: %+v, want one", rs)
	}
	if _, err := s.EnqueueRefund(ctx, "paid-1"); !errors.Is(err, store.ErrNotRefundable) {
		t.Fatalf("enqueue the paying attempt: %v, want ErrNotRefundable", err)
	}
	if _, err := s.EnqueueRefund(ctx, "no-such-payment"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("enqueue an unknown payment: %v, want ErrNotFound", err)
	}
	if st, err := s.RefundStats(ctx); err != nil || st.Pending != 3 || st.Dead != 0 || !st.OldestPending.Equal(t0) || !st.Now.Equal(t0) {
		t.Fatalf("stats: %+v, %v; want 3 pending", st, err)
	}
	if all, err := s.ListRefunds(ctx, store.ListTasksParams{}); err != nil || len(all) != 3 {
		t.Fatalf("list of the refunds not done: %+v, %v", all, err)
	}
	AuditOK(t, s)
}

func testRefundClaims(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	const n = 30
	for i := range n {
		owing(t, s, true, fmt.Sprintf("rc-%02d", i), fmt.Sprintf("rc-%02d-1", i))
	}
	claimEachOnce(t, "refunds", n, func() ([]store.ClaimedRefund, error) {
		return s.ClaimRefunds(ctx, store.ClaimTasksParams{Limit: 7, Lease: time.Hour})
	}, func(r store.ClaimedRefund) string { return r.PaymentID }, func(rs []store.ClaimedRefund) error {
		for _, r := range rs {
			if r.Attempts != 1 || !r.ClaimedAt.Equal(t0) || !r.NextAt.Equal(t0.Add(time.Hour)) {
				t.Errorf("claimed %+v, want attempt 1, leased for an hour", r)
			}
		}
		return nil
	})
	clk.Advance(time.Hour - time.Millisecond)
	if rs := claimRefunds(t, s, n, time.Minute); len(rs) != 0 {
		t.Fatalf("claimed %d refunds under their lease", len(rs))
	}
	clk.Advance(time.Millisecond)
	rs := claimRefunds(t, s, n, time.Minute)
	if len(rs) != n {
		t.Fatalf("after the lease: %d claimed, want %d", len(rs), n)
	}
	for _, r := range rs {
		if r.Attempts != 2 || r.Failures != 0 || !r.Since.Equal(t0) {
			t.Fatalf("claimed again: %+v, want attempt 2", r)
		}
	}
}

func testRefundLifecycle(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	owing(t, s, true, "two", "two-1", "two-2")
	if o := get(t, s, "two"); !o.RefundRequired {
		t.Fatalf("the order owes two payments but is not refund_required")
	}
	first := claimRefunds(t, s, 10, time.Minute)
	if len(first) != 2 {
		t.Fatalf("claimed %+v, want both", first)
	}
	slices.SortFunc(first, func(a, b store.ClaimedRefund) int { return strings.Compare(a.PaymentID, b.PaymentID) })
	if r := first[0]; r.PaymentID != "two-1" || r.OrderID != "two" || r.AmountCents != 1000 || r.Currency != "EUR" {
		t.Fatalf("the claim: %+v", r)
	}
	// The lease runs out and another dispatcher claims them: the first
	// claim's settle is ignored.
	clk.Advance(time.Minute)
	second := claimRefunds(t, s, 10, time.Minute)
	slices.SortFunc(second, func(a, b store.ClaimedRefund) int { return strings.Compare(a.PaymentID, b.PaymentID) })
	if len(second) != 2 || second[0].Attempts != 2 {
		t.Fatalf("after the lease: %+v", second)
	}
	if res := settleRefunds(t, s, refunded(first[0], "re_stale")); !slices.Equal(res.Stale, []string{"two-1"}) || len(res.Refunded) != 0 {
		t.Fatalf("a stale settle: %+v, want it ignored", res)
	}
	if p := paymentOf(t, get(t, s, "two"), "two-1"); p.Status != order.PaymentRefundRequired {
		t.Fatalf("a stale settle moved the attempt to %s", p.Status)
	}
	// One done: REFUNDED with its event; the other still owes money.
	res := settleRefunds(t, s, refunded(second[0], "re_1"),
		store.RefundOutcome{PaymentID: "two-2", OrderID: "two", Attempts: second[1].Attempts, Error: "gateway 503", RetryIn: 10 * time.Second})
	if len(res.Refunded) != 1 || res.Refunded[0].ID != "two" || !res.Refunded[0].RefundRequired || len(res.Stale) != 0 {
		t.Fatalf("settle: %+v, want two refunded and still refund_required", res)
	}
	o := get(t, s, "two")
	wantStatuses(t, o, map[string]order.PaymentStatus{"two-1": order.PaymentRefunded, "two-2": order.PaymentRefundRequired})
	if !o.RefundRequired {
		t.Fatalf("refund_required cleared while two-2 still owes money")
	}
	evs := refundedEvents(t, s, "two")
	if len(evs) != 1 {
		t.Fatalf("order.refunded events: %+v, want one", evs)
	}
	if e := evs[0]; e.SchemaVersion != order.EventSchemaVersion || e.ID != "two" || e.Status != string(order.Cancelled) || !e.RefundRequired ||
		e.Refund.PaymentID != "two-1" || e.Refund.AmountCents != 1000 || e.Refund.Currency != "EUR" || e.Refund.RefundID != "re_1" || e.Refund.Manual {
		t.Fatalf("order.refunded: %+v", e)
	}
	if rs := refundsOf(t, s, "two"); len(rs) != 2 || rs[0].Status != order.TaskDone || rs[0].RefundID != "re_1" || rs[0].DoneAt.IsZero() {
		t.Fatalf("refunds of two: %+v, want two-1 DONE with re_1", rs)
	}
	// The failure backs off and counts.
	clk.Advance(9 * time.Second)
	if rs := claimRefunds(t, s, 10, time.Minute); len(rs) != 0 {
		t.Fatalf("claimed during the backoff: %+v", rs)
	}
	clk.Advance(time.Second)
	third := claimRefunds(t, s, 10, time.Minute)
	if len(third) != 1 || third[0].PaymentID != "two-2" || third[0].Failures != 1 || third[0].LastError != "gateway 503" || third[0].Attempts != 3 {
		t.Fatalf("after the backoff: %+v", third)
	}
	// Dead: counted, listed, retried with its failures afresh.
	settleRefunds(t, s, store.RefundOutcome{PaymentID: "two-2", OrderID: "two", Attempts: third[0].Attempts, Error: "card expired", Dead: true})
	if st, err := s.RefundStats(ctx); err != nil || st.Dead != 1 || st.Pending != 0 {
		t.Fatalf("stats: %+v, %v; want one DEAD", st, err)
	}
	if dead, err := s.ListRefunds(ctx, store.ListTasksParams{Dead: true}); err != nil || len(dead) != 1 || dead[0].PaymentID != "two-2" || dead[0].DeadAt.IsZero() {
		t.Fatalf("dead refunds: %+v, %v", dead, err)
	}
	if rs := claimRefunds(t, s, 10, time.Minute); len(rs) != 0 {
		t.Fatalf("a DEAD refund was claimed: %+v", rs)
	}
	if n, err := s.RetryRefunds(ctx, store.RetryTasksParams{IDs: []string{"two-2"}}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	fourth := claimRefunds(t, s, 10, time.Minute)
	if len(fourth) != 1 || fourth[0].Failures != 0 || !fourth[0].Since.Equal(clk.Now().UTC().Truncate(time.Millisecond)) {
		t.Fatalf("after retry: %+v, want it claimable with failures counted afresh", fourth)
	}
	// The last one owed: refund_required clears.
	res = settleRefunds(t, s, refunded(fourth[0], "re_2"))
	if len(res.Refunded) != 1 || res.Refunded[0].RefundRequired {
		t.Fatalf("the last refund: %+v, want refund_required cleared", res)
	}
	o = get(t, s, "two")
	wantStatuses(t, o, map[string]order.PaymentStatus{"two-1": order.PaymentRefunded, "two-2": order.PaymentRefunded})
	if o.RefundRequired || o.Status != order.Cancelled {
		t.Fatalf("after both refunds: %s, refund_required %v", o.Status, o.RefundRequired)
	}
	if evs := refundedEvents(t, s, "two"); len(evs) != 2 || evs[1].RefundRequired || evs[1].Refund.RefundID != "re_2" {
		t.Fatalf("order.refunded events: %+v", evs)
	}
	// A refunded attempt has ended: its success again pays nothing, changes nothing.
	if r, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "two", PaymentID: "two-1", AmountCents: 1000, AutoRefund: true}); err != nil || r.Outcome != store.OutcomeNoChange {
		t.Fatalf("the refunded attempt's success again: %+v, %v", r.Outcome, err)
	}
	if st, err := s.RefundStats(ctx); err != nil || st.Dead != 0 || st.Pending != 0 {
		t.Fatalf("stats at the end: %+v, %v", st, err)
	}
	AuditOK(t, s)
}

func testMarkRefunded(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	owing(t, s, false, "m", "m-1")
	mark := store.MarkRefundedParams{PaymentID: "m-1", Manual: true, Note: "refunded in the gateway's console", Actor: "alice"}
	o, err := s.MarkRefunded(ctx, mark)
	if err != nil || o.ID != "m" || o.RefundRequired || paymentOf(t, o, "m-1").Status != order.PaymentRefunded {
		t.Fatalf("mark refunded: %+v, %v", o, err)
	}
	rs := refundsOf(t, s, "m")
	if len(rs) != 1 || rs[0].Status != order.TaskDone || !rs[0].Manual || rs[0].Note != mark.Note || rs[0].Actor != "alice" || rs[0].AmountCents != 1000 {
		t.Fatalf("the refund recorded: %+v", rs)
	}
	// Again: the same answer, nothing written.
	again, err := s.MarkRefunded(ctx, mark)
	if err != nil || again.ID != "m" || again.RefundRequired || again.Version != o.Version {
		t.Fatalf("mark refunded again: %+v, %v", again, err)
	}
	evs := refundedEvents(t, s, "m")
	if len(evs) != 1 {
		t.Fatalf("order.refunded events: %+v, want one", evs)
	}
	if e := evs[0].Refund; e.PaymentID != "m-1" || !e.Manual || e.Note != mark.Note || e.Actor != "alice" || evs[0].RefundRequired {
		t.Fatalf("order.refunded: %+v", evs[0])
	}
	if _, err := s.EnqueueRefund(ctx, "m-1"); !errors.Is(err, store.ErrNotRefundable) {
		t.Fatalf("enqueue a refunded attempt: %v, want ErrNotRefundable", err)
	}
	// An attempt that owes nothing, or no attempt at all.
	Create(t, s, "p", "r-sku")
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "p", PaymentID: "p-1", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: "p-1", Manual: true}); !errors.Is(err, store.ErrNotRefundable) {
		t.Fatalf("mark the paying attempt refunded: %v, want ErrNotRefundable", err)
	}
	if _, err := s.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: "nope", Manual: true}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("mark an unknown payment refunded: %v, want ErrNotFound", err)
	}
	// A refund a dispatcher holds, marked refunded by the API's refund
	// now: the task is DONE with the gateway's id, and the dispatcher's
	// settle goes stale.
	owing(t, s, true, "held", "held-1")
	c := claimRefunds(t, s, 10, time.Minute)
	if len(c) != 1 || c[0].PaymentID != "held-1" {
		t.Fatalf("claim: %+v", c)
	}
	if o, err := s.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: "held-1", RefundID: "re_api", Actor: "api"}); err != nil || o.RefundRequired {
		t.Fatalf("mark the held refund: %+v, %v", o, err)
	}
	if res := settleRefunds(t, s, refunded(c[0], "re_dispatcher")); !slices.Equal(res.Stale, []string{"held-1"}) {
		t.Fatalf("the dispatcher's settle: %+v, want it stale", res)
	}
	rs = refundsOf(t, s, "held")
	if len(rs) != 1 || rs[0].Status != order.TaskDone || rs[0].RefundID != "re_api" || rs[0].Manual || rs[0].Actor != "api" {
		t.Fatalf("the held refund: %+v", rs)
	}
	if evs := refundedEvents(t, s, "held"); len(evs) != 1 || evs[0].Refund.RefundID != "re_api" {
		t.Fatalf("order.refunded of held: %+v, want one with re_api", evs)
	}
	AuditOK(t, s)
}
