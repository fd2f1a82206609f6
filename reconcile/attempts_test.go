package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/store"
)

// attemptGateway is a gateway that keeps a trade per payment attempt, as
// Stripe does: it knows payments, not orders (its Query and Close of an
// order are errors), and a payment it never saw is an error, never NOT_PAID
// (gatewaytest's AttemptsOnly and UnknownIsError).
type attemptGateway struct {
	mu      sync.Mutex
	trades  map[string]payment.Status // by payment id
	failing map[string]error          // payment id → the error its query answers
	asked   []string                  // "order payment" of every QueryAttempt
	other   []string                  // every other call: reconcile makes none
}

func newAttemptGateway() *attemptGateway {
	return &attemptGateway{trades: map[string]payment.Status{}, failing: map[string]error{}}
}

var errNoSuchTrade = errors.New("no such payment")

func (g *attemptGateway) set(paymentID string, st payment.State, amount int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := payment.Status{State: st}
	if st == payment.StatePaid {
		s.PaymentID, s.AmountCents = paymentID, amount
	}
	g.trades[paymentID] = s
}

// setIn sets a paid trade of amount in currency.
func (g *attemptGateway) setIn(paymentID string, amount int64, currency string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trades[paymentID] = payment.Status{State: payment.StatePaid, PaymentID: paymentID, AmountCents: amount, Currency: currency}
}

func (g *attemptGateway) fail(paymentID string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing[paymentID] = err
}

func (g *attemptGateway) QueryAttempt(_ context.Context, orderID, paymentID string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, orderID+" "+paymentID)
	if err := g.failing[paymentID]; err != nil {
		return payment.Status{}, err
	}
	st, ok := g.trades[paymentID]
	if !ok {
		return payment.Status{}, fmt.Errorf("payment %q: %w", paymentID, errNoSuchTrade)
	}
	return st, nil
}

func (g *attemptGateway) Query(_ context.Context, orderID string) (payment.Status, error) {
	g.called("Query " + orderID)
	return payment.Status{}, errors.New("asked about an order as a whole: this gateway knows payments only")
}

func (g *attemptGateway) Close(_ context.Context, orderID string) error {
	g.called("Close " + orderID)
	return errors.New("close of an order as a whole")
}

func (g *attemptGateway) CloseAttempt(_ context.Context, orderID, paymentID string) error {
	g.called("CloseAttempt " + orderID + " " + paymentID)
	return errors.New("reconcile closes nothing")
}

func (g *attemptGateway) called(what string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.other = append(g.other, what)
}

// calls returns the attempts asked about, sorted, and the other calls.
func (g *attemptGateway) calls() (asked, other []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return sorted(g.asked), slices.Clone(g.other)
}

var _ payment.AttemptGateway = (*attemptGateway)(nil)

// startAttempt starts (or, on a PAYING order, supersedes with) the attempt paymentID.
func (w *world) startAttempt(id, paymentID string) {
	w.t.Helper()
	if _, err := w.store.StartPayment(w.ctx, store.StartPaymentParams{OrderID: id, PaymentID: paymentID}); err != nil {
		w.t.Fatalf("start payment %s of %s: %v", paymentID, id, err)
	}
}

// failAttempt has the gateway report the attempt paymentID of id failed.
func (w *world) failAttempt(id, paymentID string) {
	w.t.Helper()
	if _, err := w.store.FailPayment(w.ctx, store.PaymentParams{OrderID: id, PaymentID: paymentID}); err != nil {
		w.t.Fatalf("fail payment %s of %s: %v", paymentID, id, err)
	}
}

// byAttempt reconciles the range against gw, asserting that gw was asked
// about attempts only (never about an order as a whole, never to close).
func (w *world) byAttempt(gw *attemptGateway) reconcile.Report {
	w.t.Helper()
	rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Gateway: gw, From: from, To: to, Concurrency: 3, PageSize: 2})
	if err != nil {
		w.t.Fatal(err)
	}
	if rep.Source != "gateway" {
		w.t.Errorf("source %q, want gateway", rep.Source)
	}
	if _, other := gw.calls(); len(other) != 0 {
		w.t.Errorf("reconcile called %q; want QueryAttempt only", other)
	}
	return rep
}

func TestReconcileByAttemptPaidOrderMatchedByItsAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	// Paid by its second attempt; the first, superseded, was closed.
	w.create("paid", 1000)
	w.startAttempt("paid", "pi_first")
	w.startAttempt("paid", "pi_second")
	w.paid("paid", "pi_second", 1000, store.OutcomePaid)
	gw.set("pi_first", payment.StateClosed, 0)
	gw.set("pi_second", payment.StatePaid, 1000)
	// Never paid, nothing started: no trade to ask about.
	w.create("never-started", 500)
	w.create("cancelled-unstarted", 500)
	w.cancel("cancelled-unstarted")

	rep := w.byAttempt(gw)
	if !rep.OK() || len(rep.Mismatches) != 0 || len(rep.KnownRefunds) != 0 || len(rep.Errors) != 0 {
		t.Errorf("want a clean report: %+v", rep)
	}
	if rep.Orders != 3 || rep.GatewayRecords != 1 {
		t.Errorf("%d orders compared, %d gateway records; want 3 (all), 1 (the one with attempts)", rep.Orders, rep.GatewayRecords)
	}
	asked, _ := gw.calls()
	wantExactly(t, "attempts asked about", asked, []string{"paid pi_first", "paid pi_second"})
}

func TestReconcileByAttemptPaidOrderNotPaidAtTheGateway(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.create("paid", 1000)
	w.startAttempt("paid", "pi_1")
	w.paid("paid", "pi_1", 1000, store.OutcomePaid)
	gw.set("pi_1", payment.StateNotPaid, 0)

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"paid_but_not_at_gateway paid"})
	if len(rep.Mismatches) == 1 {
		m := rep.Mismatches[0]
		if m.LapseStatus != order.Paid || m.GatewayStatus != payment.StateNotPaid || m.PaymentID != "pi_1" || m.LapseAmount != 1000 || m.Detail == "" {
			t.Errorf("row %+v", m)
		}
	}
	if rep.OK() || len(rep.Errors) != 0 {
		t.Errorf("OK %v, errors %v; want a mismatch, no error", rep.OK(), rep.Errors)
	}
}

func TestReconcileByAttemptCancelledOrderWithAPaidSupersededAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	// The buyer opened a checkout (pi_a), then another (pi_b), whose card
	// was declined; the order was cancelled. pi_a went through after all,
	// and lapse never heard of it: money taken for a cancelled order.
	w.create("cancelled", 1000)
	w.startAttempt("cancelled", "pi_a")
	w.startAttempt("cancelled", "pi_b")
	w.failAttempt("cancelled", "pi_b")
	w.cancel("cancelled")
	gw.set("pi_a", payment.StatePaid, 1000)
	gw.set("pi_b", payment.StateNotPaid, 0)
	// The same, but lapse heard of it and flagged it: a known refund.
	w.create("flagged", 1000)
	w.startAttempt("flagged", "pi_c")
	w.startAttempt("flagged", "pi_d")
	w.failAttempt("flagged", "pi_d")
	w.cancel("flagged")
	w.paid("flagged", "pi_c", 1000, store.OutcomeRefundRequired)
	gw.set("pi_c", payment.StatePaid, 1000)
	gw.set("pi_d", payment.StateClosed, 0)

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"cancelled_but_paid cancelled"})
	wantExactly(t, "known refunds", found(rep.KnownRefunds), []string{"known_refund flagged"})
	if len(rep.Mismatches) == 1 {
		m := rep.Mismatches[0]
		if m.LapseStatus != order.Cancelled || m.GatewayStatus != payment.StatePaid || m.PaymentID != "pi_a" || m.GatewayAmount != 1000 || !strings.Contains(m.Detail, "pi_a") {
			t.Errorf("row %+v", m)
		}
	}
	if len(rep.KnownRefunds) == 1 {
		if r := rep.KnownRefunds[0]; r.PaymentID != "pi_c" || r.GatewayAmount != 1000 {
			t.Errorf("known refund row %+v", r)
		}
	}
	asked, _ := gw.calls()
	wantExactly(t, "attempts asked about", asked, []string{"cancelled pi_a", "cancelled pi_b", "flagged pi_c", "flagged pi_d"})
}

// An attempt the gateway cannot answer about — an error, a payment it does
// not know, a state lapse does not know — makes its order an error: never
// NOT_PAID, which would report a paid order as unpaid at the gateway (or
// pass a cancelled one as clean).
func TestReconcileByAttemptUnknownAttemptIsAnErrorNotAMismatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.create("paid-unknown", 1000) // the gateway has no such payment
	w.startAttempt("paid-unknown", "pi_unknown")
	w.paid("paid-unknown", "pi_unknown", 1000, store.OutcomePaid)

	w.create("cancelled-failing", 1000) // the second attempt's query fails
	w.startAttempt("cancelled-failing", "pi_ok")
	w.startAttempt("cancelled-failing", "pi_down")
	w.failAttempt("cancelled-failing", "pi_down")
	w.cancel("cancelled-failing")
	gw.set("pi_ok", payment.StateClosed, 0)
	gw.fail("pi_down", errors.New("503 service unavailable"))

	w.create("paid-odd-state", 1000) // an answer lapse cannot read
	w.startAttempt("paid-odd-state", "pi_odd")
	w.paid("paid-odd-state", "pi_odd", 1000, store.OutcomePaid)
	gw.set("pi_odd", payment.State("REFUNDED"), 0)

	w.create("clean", 1000)
	w.startAttempt("clean", "pi_clean")
	w.paid("clean", "pi_clean", 1000, store.OutcomePaid)
	gw.set("pi_clean", payment.StatePaid, 1000)

	rep := w.byAttempt(gw)
	if len(rep.Mismatches) != 0 || len(rep.KnownRefunds) != 0 || rep.OK() {
		t.Errorf("mismatches %q, refunds %q, OK %v; want none, none, false", found(rep.Mismatches), found(rep.KnownRefunds), rep.OK())
	}
	errs := map[string]string{}
	for _, e := range rep.Errors {
		errs[e.OrderID] = e.Error
	}
	for id, want := range map[string]string{"paid-unknown": errNoSuchTrade.Error(), "cancelled-failing": "503", "paid-odd-state": "REFUNDED"} {
		if !strings.Contains(errs[id], want) {
			t.Errorf("error of %s: %q, want one with %q", id, errs[id], want)
		}
	}
	if len(errs) != 3 {
		t.Errorf("errors %v, want 3", errs)
	}
	if rep.Orders != 1 || rep.GatewayRecords != 1 {
		t.Errorf("%d orders compared, %d gateway records; want 1, 1 (clean)", rep.Orders, rep.GatewayRecords)
	}
}

func TestReconcileByAttemptAmountMismatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.create("amount", 1000)
	w.startAttempt("amount", "pi_1")
	w.paid("amount", "pi_1", 1000, store.OutcomePaid)
	gw.set("pi_1", payment.StatePaid, 1200)

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"amount_mismatch amount"})
	if len(rep.Mismatches) == 1 {
		m := rep.Mismatches[0]
		if m.LapseAmount != 1000 || m.GatewayAmount != 1200 || m.PaymentID != "pi_1" || m.GatewayStatus != payment.StatePaid {
			t.Errorf("row %+v", m)
		}
	}
}

// A paid order whose superseded attempt was paid too: the buyer was charged
// twice. Paid by the other attempt than lapse's: a payment id mismatch.
func TestReconcileByAttemptTwoPaidAttempts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.create("double", 1000)
	w.startAttempt("double", "pi_1")
	w.startAttempt("double", "pi_2")
	w.paid("double", "pi_2", 1000, store.OutcomePaid)
	gw.set("pi_1", payment.StatePaid, 1000)
	gw.set("pi_2", payment.StatePaid, 1000)

	w.create("other-id", 1000)
	w.startAttempt("other-id", "pi_3")
	w.startAttempt("other-id", "pi_4")
	w.paid("other-id", "pi_4", 1000, store.OutcomePaid)
	gw.set("pi_3", payment.StatePaid, 1000)
	gw.set("pi_4", payment.StateNotPaid, 0)

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"duplicate_payment double", "payment_id_mismatch other-id"})
	for _, m := range rep.Mismatches {
		switch m.OrderID {
		case "double":
			if m.PaymentID != "pi_1" || !strings.Contains(m.Detail, "pi_2") {
				t.Errorf("duplicate row %+v", m)
			}
		case "other-id":
			if m.PaymentID != "pi_3" || !strings.Contains(m.Detail, "pi_4") {
				t.Errorf("payment id row %+v", m)
			}
		}
	}
}

// Asked per attempt, the paying attempt of a PAID order must be in the
// order's currency (the world's orders are in EUR): one paid in JPY is a
// currency mismatch, however equal the amounts. An attempt flagged for
// refund is a known refund in whatever currency it came in.
func TestReconcileByAttemptComparesCurrencies(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.create("paid-eur", 1000)
	w.startAttempt("paid-eur", "pi_eur")
	w.paid("paid-eur", "pi_eur", 1000, store.OutcomePaid)
	gw.setIn("pi_eur", 1000, "EUR")
	w.create("paid-jpy", 1000)
	w.startAttempt("paid-jpy", "pi_jpy")
	w.paid("paid-jpy", "pi_jpy", 1000, store.OutcomePaid)
	gw.setIn("pi_jpy", 1000, "JPY")
	w.create("flagged-usd", 1000)
	w.startAttempt("flagged-usd", "pi_usd")
	w.startAttempt("flagged-usd", "pi_declined")
	w.failAttempt("flagged-usd", "pi_declined")
	w.cancel("flagged-usd")
	gw.set("pi_declined", payment.StateClosed, 0)
	w.paid("flagged-usd", "pi_usd", 1000, store.OutcomeRefundRequired)
	gw.setIn("pi_usd", 1000, "USD")

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"currency_mismatch paid-jpy"})
	wantExactly(t, "known refunds", found(rep.KnownRefunds), []string{"known_refund flagged-usd"})
	for _, m := range rep.Mismatches {
		if !strings.Contains(m.Detail, "EUR") || m.Detail == "" {
			t.Errorf("row %+v: the detail should name both currencies", m)
		}
	}
}
