package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
	"github.com/lapsehq/lapse/store/storetest"
)

// A success of another amount on the current attempt (Stripe's webhook said
// 999 for a 1299 order): the attempt ends REFUND_REQUIRED and the order is
// PENDING again, so at the deadline it is cancelled with its stock released
// — the check has no attempt left to ask and never falls back to asking
// Stripe about "the order", which it cannot answer (it looped on that).
func TestWrongAmountCancelledAtTheDeadlineWithStripe(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	svc, st := service(t, newGateway(t, fs.URL, stripe.Config{}))
	fs.Set(stripetest.PaymentIntent{ID: "pi_short", Status: "succeeded", Amount: 999})
	createPaying(t, svc, "o-short", "pi_short", 300*time.Millisecond)
	res, err := svc.Notify(context.Background(), lapse.Notification{OrderID: "o-short", PaymentID: "pi_short",
		Status: lapse.PaymentSucceeded, AmountCents: 999, CallbackID: "stripe:evt_short"})
	if err != nil || res.Order.Status != order.Pending || !res.Order.RefundRequired {
		t.Fatalf("999 of 1299: %+v %v, want PENDING with refund_required", res, err)
	}
	o := waitStatus(t, svc, "o-short", order.Cancelled)
	if !o.RefundRequired {
		t.Fatalf("cancelled without the refund flag: %+v", o)
	}
	if sku, err := st.GetSKU(context.Background(), "sku"); err != nil || sku.Locked != 0 || sku.Sold != 0 {
		t.Fatalf("stock %+v %v, want released", sku, err)
	}
	if n := fs.Count("POST /v1/payment_intents/pi_short/cancel"); n != 0 {
		t.Fatalf("a succeeded PaymentIntent was cancelled %d times", n)
	}
	storetest.AuditOK(t, st)
}
