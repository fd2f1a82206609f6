package lapse_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

// NotifyRefund's decisions other than the ones each gateway's test covers
// (httpapi): a refund of part of the money owed, or in another currency,
// or naming another order than the payment's, or a payment id no attempt
// could have, records nothing and is answered without an error; the whole
// refund then records the attempt refunded once, and a failed one after
// it changes nothing.
func TestNotifyRefundRecordsOnlyTheWholeMoneyOwed(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st})
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	ctx := context.Background()
	create(t, svc, "o1", time.Hour)
	for _, pid := range []string{"p1", "p2"} {
		if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "o1", PaymentID: pid, Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := svc.Get(ctx, "o1")
	if err != nil {
		t.Fatal(err)
	}
	if !hasPayment(before, "p2", order.PaymentRefundRequired) {
		t.Fatalf("o1 %+v: want p2 REFUND_REQUIRED", before)
	}
	for _, c := range []struct {
		name string
		n    lapse.RefundNotification
		want lapse.RefundNotified
	}{
		{"part of the money", lapse.RefundNotification{PaymentID: "p2", RefundID: "r1", Succeeded: true, AmountCents: 99}, lapse.RefundNotifiedPartial},
		{"another currency", lapse.RefundNotification{PaymentID: "p2", RefundID: "r1", Succeeded: true, AmountCents: 100, Currency: "EUR"}, lapse.RefundNotifiedPartial},
		{"another order's payment", lapse.RefundNotification{OrderID: "o2", PaymentID: "p2", RefundID: "r1", Succeeded: true}, lapse.RefundNotifiedUnknownPayment},
		{"a payment id no attempt could have", lapse.RefundNotification{PaymentID: "p 2", RefundID: "r1", Succeeded: true}, lapse.RefundNotifiedUnknownPayment},
		{"a failed refund", lapse.RefundNotification{PaymentID: "p2", RefundID: "r1"}, lapse.RefundNotifiedFailed},
		{"the paying payment", lapse.RefundNotification{PaymentID: "p1", RefundID: "r0", Succeeded: true, AmountCents: 100}, lapse.RefundNotifiedNotOwed},
	} {
		c.n.Gateway = "testpay"
		got, err := svc.NotifyRefund(ctx, c.n)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if o, _ := svc.Get(ctx, "o1"); o.Version != before.Version || !o.RefundRequired || !hasPayment(o, "p2", order.PaymentRefundRequired) {
		t.Fatalf("after notifications that record nothing: %+v, want it unchanged", o)
	}

	whole := lapse.RefundNotification{Gateway: "testpay", OrderID: "o1", PaymentID: "p2", RefundID: "r2", Succeeded: true, AmountCents: 100, Currency: "usd"}
	for i, want := range []lapse.RefundNotified{lapse.RefundNotifiedRefunded, lapse.RefundNotifiedDuplicate} {
		if got, err := svc.NotifyRefund(ctx, whole); err != nil || got != want {
			t.Fatalf("the whole refund, #%d: %q, %v; want %q", i+1, got, err, want)
		}
	}
	if got, err := svc.NotifyRefund(ctx, lapse.RefundNotification{Gateway: "testpay", PaymentID: "p2", RefundID: "r3"}); err != nil || got != lapse.RefundNotifiedFailed {
		t.Fatalf("a failed refund after it: %q, %v", got, err)
	}
	o, _ := svc.Get(ctx, "o1")
	if o.RefundRequired || !hasPayment(o, "p2", order.PaymentRefunded) {
		t.Fatalf("after the whole refund: %+v, want p2 REFUNDED, nothing owed", o)
	}
	if got := metric(t, svc, "lapse_refund_notifications_total"); got != 9 {
		t.Errorf("lapse_refund_notifications_total = %v, want 9", got)
	}
	storetest.AuditOK(t, st)
}
