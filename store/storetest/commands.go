package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
)

// exerciseCommands is order-service mode's part of the suite: due orders
// move to CANCELLING with one command each, and the order service's answer
// decides their transition.
func exerciseCommands(t *testing.T, newStore Factory) {
	t.Run("commands: a due order moves to CANCELLING with one command; cancelled makes it CANCELLED with its event", func(t *testing.T) { testCommandCancelled(t, newStore) })
	t.Run("commands: each answer decides its transition; paying asks again later", func(t *testing.T) { testCommandAnswers(t, newStore) })
	t.Run("commands: failures back off, a stale claim cannot settle, the dead are retried or purged", func(t *testing.T) { testCommandLifecycle(t, newStore) })
	t.Run("commands: the claim mode takes due orders, and concurrent dispatchers never hold one command twice", func(t *testing.T) { testCommandClaims(t, newStore) })
	t.Run("commands: an answer that contradicts a payment lapse recorded is a conflict, never a transition", func(t *testing.T) { testCommandConflict(t, newStore) })
	t.Run("commands: the audit reports an order past its deadline with no final answer, and DEAD commands", func(t *testing.T) { testCommandAudit(t, newStore) })
	t.Run("commands: a cancel can write its commands claimed for the caller, held until their lease runs out", func(t *testing.T) { testCommandClaimedAtWrite(t, newStore) })
}

// CreateCommanded registers an order of order-service mode: no items, no
// stock held.
func CreateCommanded(t testing.TB, s store.Store, id string) order.Order {
	t.Helper()
	res, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
		ID: id, AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return res.Order
}

func commandDue(t testing.TB, s store.Store, ids ...string) store.CancelDueResult {
	t.Helper()
	res, err := s.CancelDue(context.Background(), store.CancelDueParams{IDs: ids, Command: true})
	if err != nil {
		t.Fatalf("command due %v: %v", ids, err)
	}
	return res
}

func claimCommands(t testing.TB, s store.Store, limit int, lease time.Duration) []store.ClaimedCommand {
	t.Helper()
	cs, err := s.ClaimCommands(context.Background(), store.ClaimTasksParams{Limit: limit, Lease: lease})
	if err != nil {
		t.Fatalf("claim commands: %v", err)
	}
	return cs
}

func answer(c store.ClaimedCommand, r ordersvc.Result) store.CommandOutcome {
	return store.CommandOutcome{ID: c.ID, OrderID: c.OrderID, Attempts: c.Attempts, Result: string(r)}
}

func settleCommands(t testing.TB, s store.Store, os ...store.CommandOutcome) store.SettleCommandsResult {
	t.Helper()
	res, err := s.SettleCommands(context.Background(), os)
	if err != nil {
		t.Fatalf("settle commands: %v", err)
	}
	return res
}

func eventsOf(t testing.TB, s store.Store, id string) []string {
	t.Helper()
	evs, err := s.UnpublishedEvents(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.OrderID == id {
			out = append(out, e.Type)
		}
	}
	return out
}

func testCommandCancelled(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	o := CreateCommanded(t, s, "c1")
	CreateCommanded(t, s, "c-later")
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("claimed %d commands before any deadline", len(cs))
	}
	clk.Advance(timeout + grace - time.Millisecond)
	if res := commandDue(t, s, "c1"); len(res.Cancelled) != 0 || len(res.Skipped) != 1 || res.Skipped[0].Status != order.Pending {
		t.Fatalf("a millisecond early: %+v, want it skipped PENDING", res)
	}
	clk.Advance(time.Millisecond)
	res := commandDue(t, s, "c1")
	if got := cancelledIDs(res); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("commanded %v, want c1", got)
	}
	if got := get(t, s, "c1"); got.Status != order.Cancelling || !got.CancelledAt.IsZero() {
		t.Fatalf("after the command: %s cancelled_at %v, want CANCELLING and no cancelled_at", got.Status, got.CancelledAt)
	}
	if evs := eventsOf(t, s, "c1"); !slices.Equal(evs, []string{order.EventCreated}) {
		t.Fatalf("events %v: the command writes none", evs)
	}
	// The same batch again (a timer delivered twice) writes nothing more.
	if again := commandDue(t, s, "c1"); len(again.Cancelled) != 0 {
		t.Fatalf("a second delivery commanded %v", cancelledIDs(again))
	}
	cs := claimCommands(t, s, 10, time.Minute)
	if len(cs) != 1 {
		t.Fatalf("claimed %d commands, want 1", len(cs))
	}
	c := cs[0]
	if c.ID != ordersvc.CommandID("c1", o.CancelAfter) || c.OrderID != "c1" || !c.CancelAfter.Equal(o.CancelAfter) || c.Attempts != 1 {
		t.Fatalf("claimed %+v, want the command of c1 at %v, attempt 1", c.Command, o.CancelAfter)
	}
	if c.Order.ID != "c1" || c.Order.AmountCents != 1000 || c.Order.Currency != "EUR" || !c.Order.ExpiresAt.Equal(o.ExpiresAt) || c.Order.Payments == nil {
		t.Fatalf("the command's order %+v, want c1's body with its (empty) attempts", c.Order)
	}
	clk.Advance(25 * time.Millisecond)
	sr := settleCommands(t, s, answer(c, ordersvc.Cancelled))
	if len(sr.Cancelled) != 1 || sr.Cancelled[0].ID != "c1" || len(sr.Conflicts) != 0 {
		t.Fatalf("settle: %+v, want c1 cancelled", sr)
	}
	got := get(t, s, "c1")
	if got.Status != order.Cancelled || got.CancelReason != order.ReasonTimeout || !got.CancelledAt.Equal(clk.Now()) {
		t.Fatalf("after cancelled: %s %s at %v, want CANCELLED by timeout at %v", got.Status, got.CancelReason, got.CancelledAt, clk.Now())
	}
	if evs := eventsOf(t, s, "c1"); !slices.Equal(evs, []string{order.EventCreated, order.EventCancelled}) {
		t.Fatalf("events %v", evs)
	}
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("a DONE command was claimed again: %+v", cs)
	}
	list, err := s.ListCommands(context.Background(), store.ListTasksParams{OrderID: "c1"})
	if err != nil || len(list) != 1 || list[0].Status != order.TaskDone || list[0].Result != string(ordersvc.Cancelled) || list[0].DoneAt.IsZero() {
		t.Fatalf("the order's commands: %+v, %v; want one DONE with result cancelled", list, err)
	}
	if got := get(t, s, "c-later"); got.Status != order.Pending {
		t.Fatalf("the other order is %s", got.Status)
	}
	AuditOK(t, s)
}

func testCommandAnswers(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	for _, id := range []string{"a-cancelled", "a-already", "a-paid", "a-paying", "a-gone"} {
		CreateCommanded(t, s, id)
	}
	clk.Advance(timeout + grace)
	commandDue(t, s, "a-cancelled", "a-already", "a-paid", "a-paying", "a-gone")
	cs := claimCommands(t, s, 10, time.Minute)
	if len(cs) != 5 {
		t.Fatalf("claimed %d, want 5", len(cs))
	}
	by := map[string]store.ClaimedCommand{}
	for _, c := range cs {
		by[c.OrderID] = c
	}
	paying := answer(by["a-paying"], ordersvc.Paying)
	paying.RetryIn = 30 * time.Second
	sr := settleCommands(t, s,
		answer(by["a-cancelled"], ordersvc.Cancelled), answer(by["a-already"], ordersvc.AlreadyCancelled),
		answer(by["a-paid"], ordersvc.AlreadyPaid), paying, answer(by["a-gone"], ordersvc.NotFound))
	if len(sr.Cancelled) != 2 || len(sr.Paid) != 1 || !slices.Equal(sr.Paying, []string{"a-paying"}) || len(sr.Conflicts) != 0 {
		t.Fatalf("settle: %+v", sr)
	}
	want := map[string]order.Status{"a-cancelled": order.Cancelled, "a-already": order.Cancelled, "a-paid": order.Paid,
		"a-paying": order.Paying, "a-gone": order.Cancelling}
	for id, st := range want {
		if got := get(t, s, id); got.Status != st {
			t.Errorf("%s is %s, want %s", id, got.Status, st)
		}
	}
	if got := get(t, s, "a-paid"); !got.PaidAt.Equal(clk.Now()) || got.RefundRequired {
		t.Errorf("a-paid: paid_at %v refund %v", got.PaidAt, got.RefundRequired)
	}
	if evs := eventsOf(t, s, "a-paid"); !slices.Equal(evs, []string{order.EventCreated, order.EventPaid}) {
		t.Errorf("a-paid events %v", evs)
	}
	if evs := eventsOf(t, s, "a-paying"); !slices.Equal(evs, []string{order.EventCreated}) {
		t.Errorf("a-paying events %v", evs)
	}
	dead, err := s.ListCommands(context.Background(), store.ListTasksParams{Dead: true})
	if err != nil || len(dead) != 1 || dead[0].OrderID != "a-gone" || dead[0].Result != string(ordersvc.NotFound) {
		t.Fatalf("dead commands %+v, %v; want a-gone's", dead, err)
	}
	// paying: asked again after its retry, with the same command id.
	clk.Advance(29 * time.Second)
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("claimed %d before the paying answer's retry", len(cs))
	}
	clk.Advance(time.Second)
	again := claimCommands(t, s, 10, time.Minute)
	if len(again) != 1 || again[0].ID != by["a-paying"].ID || again[0].Attempts != 2 || again[0].Order.Status != order.Paying {
		t.Fatalf("asked again: %+v, want a-paying's command, attempt 2, order PAYING", again)
	}
	if again[0].Failures != 0 {
		t.Fatalf("a paying answer counted as a failure: %d", again[0].Failures)
	}
	settleCommands(t, s, answer(again[0], ordersvc.AlreadyCancelled))
	if got := get(t, s, "a-paying"); got.Status != order.Cancelled || got.CancelReason != order.ReasonTimeout {
		t.Fatalf("a-paying after already_cancelled: %s %s", got.Status, got.CancelReason)
	}
	AuditOK(t, s)
}

func testCommandLifecycle(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	CreateCommanded(t, s, "l1")
	clk.Advance(timeout + grace)
	commandDue(t, s, "l1")
	c := claimCommands(t, s, 10, time.Minute)[0]
	// The lease runs out: another dispatcher claims it; the first one's
	// settle is ignored.
	clk.Advance(time.Minute)
	c2 := claimCommands(t, s, 10, time.Minute)
	if len(c2) != 1 || c2[0].Attempts != 2 {
		t.Fatalf("after the lease: %+v", c2)
	}
	settleCommands(t, s, answer(c, ordersvc.Cancelled))
	if got := get(t, s, "l1"); got.Status != order.Cancelling {
		t.Fatalf("a stale claim's answer moved the order to %s", got.Status)
	}
	// A failed send backs off and counts.
	settleCommands(t, s, store.CommandOutcome{ID: c2[0].ID, OrderID: "l1", Attempts: c2[0].Attempts, Error: "503", RetryIn: 10 * time.Second})
	clk.Advance(9 * time.Second)
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("claimed during the backoff")
	}
	clk.Advance(time.Second)
	c3 := claimCommands(t, s, 10, time.Minute)
	if len(c3) != 1 || c3[0].Failures != 1 || c3[0].LastError != "503" {
		t.Fatalf("after the backoff: %+v", c3)
	}
	// Dead: listed, retried, dead again, purged.
	settleCommands(t, s, store.CommandOutcome{ID: c3[0].ID, OrderID: "l1", Attempts: c3[0].Attempts, Error: "400 bad request", Dead: true})
	st, err := s.CommandStats(ctx)
	if err != nil || st.Dead != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if n, err := s.RetryCommands(ctx, store.RetryTasksParams{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	c4 := claimCommands(t, s, 10, time.Minute)
	if len(c4) != 1 || c4[0].Failures != 0 {
		t.Fatalf("after retry: %+v, want it claimable with failures counted afresh", c4)
	}
	settleCommands(t, s, store.CommandOutcome{ID: c4[0].ID, OrderID: "l1", Attempts: c4[0].Attempts, Error: "400", Dead: true})
	if n, err := s.PurgeCommands(ctx, store.RetryTasksParams{IDs: []string{c4[0].ID}}); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if list, err := s.ListCommands(ctx, store.ListTasksParams{OrderID: "l1"}); err != nil || len(list) != 0 {
		t.Fatalf("after purge: %+v, %v", list, err)
	}
	if got := get(t, s, "l1"); got.Status != order.Cancelling {
		t.Fatalf("after purge the order is %s, want CANCELLING", got.Status)
	}
}

func testCommandClaims(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	const n = 60
	for i := range n {
		CreateCommanded(t, s, fmt.Sprintf("cc-%02d", i))
	}
	clk.Advance(timeout + grace)
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: n / 2, Command: true})
	if err != nil || len(res.Cancelled) != n/2 {
		t.Fatalf("claim mode: %d commanded, %v; want %d", len(res.Cancelled), err, n/2)
	}
	if res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: n, Command: true}); err != nil || len(res.Cancelled) != n/2 {
		t.Fatalf("second claim: %d commanded, %v; want the other %d", len(res.Cancelled), err, n/2)
	}
	claimEachOnce(t, "commands", n, func() ([]store.ClaimedCommand, error) {
		return s.ClaimCommands(ctx, store.ClaimTasksParams{Limit: 7, Lease: time.Hour})
	}, func(c store.ClaimedCommand) string { return c.ID }, nil)
}

func testCommandConflict(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	CreateCommanded(t, s, "x1")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "x1", PaymentID: "x1-1"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(timeout + grace)
	// The gateway check found the attempt closed and unpaid: the confirmed
	// cancel commands it.
	if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"x1"}, Command: true, Confirmed: true, SkipAttempted: true}); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("confirmed command: %+v, %v", res, err)
	}
	c := claimCommands(t, s, 10, time.Minute)[0]
	if len(c.Order.Payments) != 1 || c.Order.Payments[0].PaymentID != "x1-1" || c.Order.Payments[0].Status != order.PaymentFailed {
		t.Fatalf("the command's attempts %+v, want x1-1 FAILED (closed by the check)", c.Order.Payments)
	}
	// A success arrives while the command is out: money for an order whose
	// cancel lapse commanded is money to give back; the order stays
	// CANCELLING for the answer to decide.
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "x1", PaymentID: "x1-late", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "x1"); got.Status != order.Cancelling || !got.RefundRequired {
		t.Fatalf("after a late success: %s refund_required %v, want CANCELLING and a refund", got.Status, got.RefundRequired)
	}
	sr := settleCommands(t, s, answer(c, ordersvc.Cancelled))
	if len(sr.Cancelled) != 1 {
		t.Fatalf("settle: %+v", sr)
	}
	if got := get(t, s, "x1"); got.Status != order.Cancelled || !got.RefundRequired {
		t.Fatalf("after cancelled: %s refund %v", got.Status, got.RefundRequired)
	}
	AuditOK(t, s)

	// An order lapse saw paid, answered cancelled: a conflict.
	CreateCommanded(t, s, "x2")
	clk.Advance(timeout + grace)
	commandDue(t, s, "x2")
	c = claimCommands(t, s, 10, time.Minute)[0]
	paying := answer(c, ordersvc.Paying)
	paying.RetryIn = time.Second
	settleCommands(t, s, paying)
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "x2", PaymentID: "x2-1", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "x2"); got.Status != order.Paid {
		t.Fatalf("a success for an order the order service said is paying: %s, want PAID", got.Status)
	}
	// Paid at lapse before the command went out again: it never goes out
	// (a shop that was not told of the payment would cancel a paid order),
	// and it ends DONE, not sent.
	clk.Advance(time.Second)
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("claimed %d commands of an order lapse recorded PAID: %+v", len(cs), cs)
	}
	cmds, err := s.ListCommands(ctx, store.ListTasksParams{OrderID: "x2", Limit: 10})
	if err != nil || len(cmds) != 1 || cmds[0].Status != order.TaskDone || cmds[0].Result != "" || cmds[0].LastError == "" {
		t.Fatalf("the command of a PAID order: %+v, %v; want it DONE with no answer and a note", cmds, err)
	}
	if got := get(t, s, "x2"); got.Status != order.Paid {
		t.Fatalf("after the claim the order is %s, want PAID", got.Status)
	}
	AuditOK(t, s)

	// Paid at lapse while the command is out, answered cancelled (the
	// owner cancelled before it saw the money): a conflict, lapse's record
	// left PAID — but the money was taken for an order its owner cancelled:
	// the attempt owes it back (REFUND_REQUIRED, refund_required,
	// order.refund_required), and with AutoRefund a refund is written.
	for _, tc := range []struct {
		id     string
		result ordersvc.Result
		auto   bool
	}{{"x3", ordersvc.Cancelled, false}, {"x4", ordersvc.AlreadyCancelled, true}} {
		CreateCommanded(t, s, tc.id)
		clk.Advance(timeout + grace)
		commandDue(t, s, tc.id)
		c = claimCommands(t, s, 10, time.Minute)[0]
		paying = answer(c, ordersvc.Paying)
		paying.RetryIn = time.Second
		settleCommands(t, s, paying)
		clk.Advance(time.Second)
		c = claimCommands(t, s, 10, time.Minute)[0]
		pid := tc.id + "-1"
		if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: tc.id, PaymentID: pid, AmountCents: 1000}); err != nil {
			t.Fatal(err)
		}
		out := answer(c, tc.result)
		out.AutoRefund = tc.auto
		sr = settleCommands(t, s, out)
		if len(sr.Conflicts) != 1 || sr.Conflicts[0].OrderID != tc.id || sr.Conflicts[0].Status != order.Paid || len(sr.Cancelled) != 0 {
			t.Fatalf("%s: settle of a contradicting answer: %+v, want one conflict", tc.id, sr)
		}
		if !sr.Conflicts[0].RefundRequired {
			t.Fatalf("%s: the conflict does not say the money is owed back: %+v", tc.id, sr.Conflicts[0])
		}
		got := get(t, s, tc.id)
		if got.Status != order.Paid || !got.RefundRequired {
			t.Fatalf("%s: after %s for an order lapse saw paid: %s, refund_required %v; want PAID and the money owed back", tc.id, tc.result, got.Status, got.RefundRequired)
		}
		if p := paymentOf(t, got, pid); p.Status != order.PaymentRefundRequired {
			t.Fatalf("%s: the attempt that paid is %s, want REFUND_REQUIRED", tc.id, p.Status)
		}
		if n := count(eventsOf(t, s, tc.id), order.EventRefundRequired); n != 1 {
			t.Fatalf("%s: %d %s events, want 1: %v", tc.id, n, order.EventRefundRequired, eventsOf(t, s, tc.id))
		}
		if rs := refundsOf(t, s, tc.id); (len(rs) == 1) != tc.auto || (tc.auto && rs[0].PaymentID != pid) {
			t.Fatalf("%s: refunds %+v with AutoRefund %v", tc.id, rs, tc.auto)
		}
		// The same answer settled again (a claim whose lease ran out)
		// changes nothing.
		if sr := settleCommands(t, s, out); len(sr.Conflicts) != 0 {
			t.Fatalf("%s: a stale settle of the same answer: %+v", tc.id, sr)
		}
		if n := count(eventsOf(t, s, tc.id), order.EventRefundRequired); n != 1 {
			t.Fatalf("%s: after a second settle, %d %s events", tc.id, n, order.EventRefundRequired)
		}
		AuditOK(t, s)
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

func testCommandAudit(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	ids := []string{"u-silent", "u-dead", "u-paying", "u-paying-silent", "u-done", "u-purged"}
	for _, id := range ids {
		CreateCommanded(t, s, id)
	}
	clk.Advance(timeout + grace)
	commandDue(t, s, ids...)
	by := map[string]store.ClaimedCommand{}
	for _, c := range claimCommands(t, s, 10, time.Minute) {
		by[c.OrderID] = c
	}
	if len(by) != len(ids) {
		t.Fatalf("claimed %d commands, want %d", len(by), len(ids))
	}
	failed := func(c store.ClaimedCommand, retryIn time.Duration) store.CommandOutcome {
		return store.CommandOutcome{ID: c.ID, OrderID: c.OrderID, Attempts: c.Attempts, Error: "503 Service Unavailable", RetryIn: retryIn}
	}
	paying := func(c store.ClaimedCommand, retryIn time.Duration) store.CommandOutcome {
		o := answer(c, ordersvc.Paying)
		o.RetryIn = retryIn
		return o
	}
	refused := failed(by["u-purged"], 0)
	refused.Error, refused.Dead = "400 Bad Request", true
	settleCommands(t, s, failed(by["u-silent"], time.Hour), answer(by["u-dead"], ordersvc.NotFound),
		paying(by["u-paying"], 10*time.Second), paying(by["u-paying-silent"], 10*time.Second),
		answer(by["u-done"], ordersvc.Cancelled), refused)
	if n, err := s.PurgeCommands(ctx, store.RetryTasksParams{IDs: []string{by["u-purged"].ID}}); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	// Asked again: one order service still says paying, the other no longer answers.
	clk.Advance(10 * time.Second)
	again := map[string]store.ClaimedCommand{}
	for _, c := range claimCommands(t, s, 10, time.Minute) {
		again[c.OrderID] = c
	}
	if len(again) != 2 || again["u-paying"].ID == "" || again["u-paying-silent"].ID == "" {
		t.Fatalf("asked again: %v, want the two paying orders", again)
	}
	settleCommands(t, s, paying(again["u-paying"], 2*time.Hour), failed(again["u-paying-silent"], 2*time.Hour))
	// A read of one order carries its commands, and only then.
	if cs := get(t, s, "u-done").Commands; len(cs) != 1 || cs[0].ID != by["u-done"].ID || cs[0].Status != order.TaskDone || cs[0].Result != string(ordersvc.Cancelled) {
		t.Fatalf("u-done's commands: %+v, want its one command DONE", cs)
	}
	if cs := get(t, s, "u-purged").Commands; cs != nil {
		t.Fatalf("u-purged's commands after the purge: %+v, want none", cs)
	}

	audit := func(lag time.Duration) (unanswered, dead store.AuditCheck, ok bool) {
		t.Helper()
		rep, err := s.Audit(ctx, store.AuditParams{AllowedLag: lag, MaxExamples: 20})
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		for _, c := range rep.Checks {
			switch c.Name {
			case "commanded_unanswered":
				unanswered = c
			case "commands_dead":
				dead = c
			}
		}
		if unanswered.Name == "" || dead.Name == "" {
			t.Fatalf("the audit has no check commanded_unanswered and warning commands_dead: %+v", rep.Checks)
		}
		if unanswered.Warning || !dead.Warning {
			t.Fatalf("commanded_unanswered warning=%v, commands_dead warning=%v: want a violation and a warning", unanswered.Warning, dead.Warning)
		}
		return unanswered, dead, rep.OK()
	}
	named := func(c store.AuditCheck, prefix string, want ...string) {
		t.Helper()
		var got []string
		for _, ex := range c.Examples {
			for _, id := range want {
				if strings.HasPrefix(ex, prefix+id+" ") || strings.HasPrefix(ex, prefix+id+":") {
					got = append(got, id)
				}
			}
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if c.Count != int64(len(want)) || !slices.Equal(got, want) {
			t.Errorf("%s: %d finding(s) naming %v, want %v: %q", c.Name, c.Count, got, want, c.Examples)
		}
	}

	// Within the allowed lag the deadlines are not late yet; the DEAD
	// command is a warning whatever its age.
	unanswered, dead, ok := audit(time.Hour)
	if !ok || unanswered.Count != 0 {
		t.Fatalf("within the allowed lag: ok %v, commanded_unanswered %d %q", ok, unanswered.Count, unanswered.Examples)
	}
	named(dead, "command ", by["u-dead"].ID)
	if !strings.Contains(dead.Examples[0], "u-dead") {
		t.Errorf("commands_dead does not name the order: %q", dead.Examples[0])
	}

	// Past it: CANCELLING with its command failing, DEAD or purged, and
	// PAYING whose order service stopped answering, are violations; PAYING
	// still answered paying, and an order answered for good, are not.
	unanswered, dead, ok = audit(time.Second)
	if ok {
		t.Fatal("the audit passed with deadlines past due and no final answer")
	}
	named(unanswered, "order ", "u-silent", "u-dead", "u-purged", "u-paying-silent")
	named(dead, "command ", by["u-dead"].ID)

	// The DEAD command sent again and answered: its order is off both lists.
	if n, err := s.RetryCommands(ctx, store.RetryTasksParams{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	retried := claimCommands(t, s, 10, time.Minute)
	if len(retried) != 1 || retried[0].OrderID != "u-dead" {
		t.Fatalf("claimed after the retry: %+v, want u-dead's command", retried)
	}
	settleCommands(t, s, answer(retried[0], ordersvc.AlreadyCancelled))
	unanswered, dead, _ = audit(time.Second)
	named(unanswered, "order ", "u-silent", "u-purged", "u-paying-silent")
	named(dead, "command ")

	// The dashboard counts the CANCELLING orders.
	ov, err := s.Overview(ctx, store.OverviewParams{})
	if err != nil || ov.ByStatus[order.Cancelling] != 2 || ov.ByStatus[order.Paying] != 2 || ov.ByStatus[order.Cancelled] != 2 {
		t.Fatalf("overview: %v, %v; want 2 CANCELLING, 2 PAYING, 2 CANCELLED", ov.ByStatus, err)
	}
}

// commandDueClaimed is commandDue with the commands claimed for the caller
// for lease (CancelDueParams.CommandLease); confirmed takes PAYING orders
// too, as the gateway check's cancel does.
func commandDueClaimed(t testing.TB, s store.Store, lease time.Duration, confirmed bool, ids ...string) store.CancelDueResult {
	t.Helper()
	res, err := s.CancelDue(context.Background(), store.CancelDueParams{IDs: ids, Command: true, CommandLease: lease, Confirmed: confirmed})
	if err != nil {
		t.Fatalf("command due %v, claimed for %s: %v", ids, lease, err)
	}
	return res
}

// testCommandClaimedAtWrite: a cancel that asks for its commands claimed
// (CancelDueParams.CommandLease) gets each it wrote with its body, held as
// a claim holds it — no dispatcher claims it until the lease runs out, then
// any does, and the first holder's late answer is stale. A command written
// before (the same order and deadline, answered paying) is not handed out:
// its own schedule stands. A store that cannot claim at write (MySQL) hands
// out none, and its commands are due at once.
func testCommandClaimedAtWrite(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	o := CreateCommanded(t, s, "w1")
	CreateCommanded(t, s, "w2")
	CreateCommanded(t, s, "w-paying")
	clk.Advance(timeout + grace)
	res := commandDueClaimed(t, s, time.Minute, false, "w1", "w2", "w-paying")
	if got := cancelledIDs(res); !slices.Equal(got, []string{"w-paying", "w1", "w2"}) && !slices.Equal(got, []string{"w1", "w2", "w-paying"}) {
		t.Fatalf("commanded %v, want the three", got)
	}
	if len(res.Commands) == 0 {
		// Not claimed at write: due at once, for the dispatchers.
		if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 3 {
			t.Fatalf("no command handed out, and %d claimable at once: want 3", len(cs))
		}
		return
	}
	by := map[string]store.ClaimedCommand{}
	for _, c := range res.Commands {
		by[c.OrderID] = c
	}
	c := by["w1"]
	if len(res.Commands) != 3 || c.ID != ordersvc.CommandID("w1", o.CancelAfter) || c.Attempts != 1 || c.Status != order.TaskPending ||
		!c.ClaimedAt.Equal(clk.Now()) || !c.Since.Equal(clk.Now()) || c.Failures != 0 {
		t.Fatalf("handed out %d commands, w1's %+v (claimed at %v): want 3, w1's command at attempt 1 claimed now (%v)", len(res.Commands), c, c.ClaimedAt, clk.Now())
	}
	if c.Order.ID != "w1" || c.Order.Status != order.Cancelling || c.Order.AmountCents != 1000 || c.Order.Currency != "EUR" ||
		!c.Order.ExpiresAt.Equal(o.ExpiresAt) || c.Order.Payments == nil {
		t.Fatalf("w1's body %+v, want the CANCELLING order with its (empty) attempts", c.Order)
	}
	if cs := claimCommands(t, s, 10, time.Minute); len(cs) != 0 {
		t.Fatalf("a dispatcher claimed %d commands the cancel holds", len(cs))
	}
	// The holder answers two; the third's holder dies.
	paying := answer(by["w-paying"], ordersvc.Paying)
	paying.RetryIn = time.Second
	sr := settleCommands(t, s, answer(c, ordersvc.Cancelled), paying)
	if len(sr.Cancelled) != 1 || sr.Cancelled[0].ID != "w1" || !slices.Equal(sr.Paying, []string{"w-paying"}) {
		t.Fatalf("settle of the handed-out commands: %+v, want w1 cancelled, w-paying PAYING", sr)
	}
	clk.Advance(time.Minute)
	cs := claimCommands(t, s, 10, time.Minute)
	if len(cs) != 2 {
		t.Fatalf("after the lease: claimed %d, want w2's (its holder died) and w-paying's (asked again)", len(cs))
	}
	for _, x := range cs {
		if x.Attempts != 2 {
			t.Fatalf("claimed %s at attempt %d, want 2", x.OrderID, x.Attempts)
		}
	}
	if late := settleCommands(t, s, answer(by["w2"], ordersvc.Cancelled)); len(late.Cancelled) != 0 {
		t.Fatalf("the dead holder's late answer settled: %+v", late)
	}
	// w-paying, PAYING, cancelled again once its trade is confirmed closed:
	// its command exists (the same order and deadline) and is not handed out.
	again := commandDueClaimed(t, s, time.Minute, true, "w-paying")
	if got := cancelledIDs(again); !slices.Equal(got, []string{"w-paying"}) || len(again.Commands) != 0 {
		t.Fatalf("w-paying confirmed: commanded %v, handed out %+v; want it commanded, its existing command not handed out", got, again.Commands)
	}
}

// RequireClaimAtWrite fails t unless s writes the commands of a cancel
// claimed for the caller when asked (CancelDueParams.CommandLease): the
// drivers that can (PostgreSQL, SQLite) say so in their own tests.
func RequireClaimAtWrite(t *testing.T, s store.Store) {
	t.Helper()
	id := fmt.Sprintf("claim-at-write-%d", time.Now().UnixNano())
	res, err := s.CreateOrder(context.Background(), store.CreateOrderParams{ID: id, AmountCents: 1, Currency: "EUR", Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := commandDueClaimed(t, s, time.Minute, false, id)
		if len(r.Cancelled) == 1 {
			if len(r.Commands) != 1 || r.Commands[0].OrderID != id || r.Commands[0].Attempts != 1 {
				t.Fatalf("the cancel of %s handed out %+v: want its command, claimed", id, r.Commands)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (cancel_after %v) never came due", id, res.Order.CancelAfter)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
