package reconcile_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/store"
)

// setRefunded sets a trade paid, then refunded (WeChat Pay's REFUND).
func (g *attemptGateway) setRefunded(paymentID string, amount int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trades[paymentID] = payment.Status{State: payment.StatePaid, PaymentID: paymentID, AmountCents: amount, Refunded: true}
}

// refunded has a cancelled order's late payment paymentID flagged, then
// recorded given back.
func (w *world) refunded(id, paymentID string) {
	w.t.Helper()
	w.create(id, 1000)
	w.cancel(id)
	w.paid(id, paymentID, 1000, store.OutcomeRefundRequired)
	if _, err := w.store.MarkRefunded(w.ctx, store.MarkRefundedParams{PaymentID: paymentID, RefundID: "re_" + paymentID, Actor: "test"}); err != nil {
		w.t.Fatalf("mark %s refunded: %v", paymentID, err)
	}
}

// A REFUNDED attempt's trade is what a refund leaves at the gateway —
// paid then refunded (WeChat Pay), closed (Alipay, refunded whole), or
// still paid at a gateway whose trade does not show refunds (Stripe): none
// is a mismatch, nor money to give back. A trade the gateway says was
// never paid is: lapse recorded money it gave back that never came. Money
// still owed whose trade shows refunded is a known refund that says so.
func TestReconcileByAttemptKnowsRefundedAttempts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gw := newAttemptGateway()
	w.refunded("refunded-shown", "pi_r1")
	gw.setRefunded("pi_r1", 1000)
	w.refunded("refunded-closed", "pi_r2")
	gw.set("pi_r2", payment.StateClosed, 0)
	w.refunded("refunded-still-paid", "pi_r3")
	gw.set("pi_r3", payment.StatePaid, 1000)
	w.refunded("refunded-never-paid", "pi_r4")
	gw.set("pi_r4", payment.StateNotPaid, 0)
	w.create("owed-refunded-at-gateway", 1000)
	w.cancel("owed-refunded-at-gateway")
	w.paid("owed-refunded-at-gateway", "pi_r5", 1000, store.OutcomeRefundRequired)
	gw.setRefunded("pi_r5", 1000)

	rep := w.byAttempt(gw)
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"paid_but_not_at_gateway refunded-never-paid"})
	wantExactly(t, "known refunds", found(rep.KnownRefunds), []string{"known_refund owed-refunded-at-gateway"})
	if len(rep.Mismatches) == 1 && !strings.Contains(rep.Mismatches[0].Detail, "refunded") {
		t.Errorf("row %+v: the detail should say lapse recorded the payment refunded", rep.Mismatches[0])
	}
	if len(rep.KnownRefunds) == 1 && !strings.Contains(rep.KnownRefunds[0].Detail, "shows it refunded") {
		t.Errorf("known refund %+v: the detail should say the gateway shows it refunded", rep.KnownRefunds[0])
	}
	if len(rep.Errors) != 0 || rep.Orders != 5 {
		t.Errorf("errors %v, %d orders; want none, 5", rep.Errors, rep.Orders)
	}
}

// A statement's PAID line for a cancelled order's payment lapse recorded
// given back (REFUNDED) is not a cancelled order paid: the money went back.
func TestReconcileStatementKnowsRefundedAttempts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.refunded("refunded", "pi_r1")
	w.create("cancelled-paid", 1000)
	w.cancel("cancelled-paid")
	stmt := "order_id,payment_id,status,amount_cents\nrefunded,pi_r1,PAID,1000\ncancelled-paid,pi_x,PAID,1000\n"
	rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Statement: strings.NewReader(stmt), From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	wantExactly(t, "mismatches", found(rep.Mismatches), []string{"cancelled_but_paid cancelled-paid"})
	wantExactly(t, "known refunds", found(rep.KnownRefunds), nil)
}
