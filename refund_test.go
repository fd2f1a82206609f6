package lapse_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store/storetest"
)

// --auto-refund: a payment that lands after its order was cancelled is
// given back at the gateway once, while the gateway answers 500 to the
// first two refunds; the attempt ends REFUNDED with order.refunded
// written, refund_required clears, the same notification arriving twice
// more changes nothing, and the audit passes.
func TestAutoRefundGivesALatePaymentBackOnce(t *testing.T) {
	t.Parallel()
	mock := payment.NewMock(payment.MockConfig{FailRefunds: 2})
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = mock.Close() })
	// No retries in the client: the dispatcher's backoff retries the refund.
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Gateway: gw, AutoRefund: true, ConfirmAfter: time.Hour,
		Refunds: refund.Config{RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Interval: 50 * time.Millisecond}})
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	ctx := context.Background()

	create(t, svc, "late", 100*time.Millisecond)
	waitFor(t, 10*time.Second, "the cancel", func() bool { return status(t, svc, "late") == order.Cancelled })
	if _, err := mock.Pay("late", 100, payment.OutcomeSucceeded, "p-late"); err != nil {
		t.Fatal(err)
	}
	notify := func() {
		t.Helper()
		if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "late", PaymentID: "p-late", Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
			t.Fatalf("notify: %v", err)
		}
	}
	notify()
	var o order.Order
	waitFor(t, 20*time.Second, "the refund", func() bool {
		o, _ = svc.Get(ctx, "late")
		return hasPayment(o, "p-late", order.PaymentRefunded) && !o.RefundRequired
	})
	notify()
	notify()
	if o, _ = svc.Get(ctx, "late"); o.Status != order.Cancelled || o.RefundRequired || !hasPayment(o, "p-late", order.PaymentRefunded) {
		t.Fatalf("after the notification twice more: %+v, want CANCELLED, p-late REFUNDED, no refund owed", o)
	}
	rs := mock.Refunds("late")
	if len(rs) != 1 || rs[0].PaymentID != "p-late" || rs[0].AmountCents != 100 || rs[0].RefundKey != payment.RefundKey("p-late") {
		t.Fatalf("refunds at the gateway: %+v, want one of p-late's 100 under its key", rs)
	}
	if st := mock.Stats(); st.Refunds != 3 {
		t.Fatalf("the gateway was asked %d times: want the two failures, then the refund", st.Refunds)
	}
	if got := metric(t, svc, "lapse_refunds_total"); got != 3 {
		t.Fatalf("lapse_refunds_total = %v, want 2 failed and 1 refunded", got)
	}
	refunded := 0
	evs, err := st.OrderEvents(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.OrderID == "late" && e.Type == order.EventRefunded {
			refunded++
			if !strings.Contains(string(e.Payload), `"payment_id":"p-late"`) {
				t.Errorf("order.refunded %s names no p-late", e.Payload)
			}
		}
	}
	if refunded != 1 {
		t.Fatalf("%d order.refunded events, want one", refunded)
	}
	storetest.AuditOK(t, st)
}

// AutoRefund needs a gateway that can refund.
func TestAutoRefundNeedsARefunder(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	for _, gw := range []payment.Gateway{nil, newScripted()} {
		if _, err := lapse.New(lapse.Config{Store: st, Gateway: gw, AutoRefund: true}); err == nil || !strings.Contains(err.Error(), "AutoRefund") {
			t.Errorf("AutoRefund with gateway %T: %v, want refused", gw, err)
		}
	}
}
