package refund

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// What becomes of a refund after the gateway's answer: refunded is done;
// an answer asking again with the same key cannot change is DEAD at once
// for a person; a refund in progress is asked again later; anything else
// backs off until the limits make it DEAD.
func TestOutcome(t *testing.T) {
	d := &Dispatcher{}
	d.setDefaults()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := store.ClaimedRefund{Refund: order.Refund{PaymentID: "p", OrderID: "o", AmountCents: 500, Currency: "EUR", Attempts: 3},
		Failures: 1, Since: now.Add(-time.Hour), ClaimedAt: now}
	for _, tc := range []struct {
		name    string
		res     payment.RefundResult
		err     error
		r       store.ClaimedRefund
		done    bool
		dead    bool
		retryIn time.Duration // 0: do not check
	}{
		{name: "refunded", res: payment.RefundResult{RefundID: "re_1", State: payment.RefundSucceeded, AmountCents: 500, Currency: "EUR"}, done: true},
		{name: "refunded, the gateway naming no amount", res: payment.RefundResult{RefundID: "re_1", State: payment.RefundSucceeded}, done: true},
		{name: "another amount refunded", res: payment.RefundResult{RefundID: "re_1", State: payment.RefundSucceeded, AmountCents: 400, Currency: "EUR"}, dead: true},
		{name: "another currency", res: payment.RefundResult{RefundID: "re_1", State: payment.RefundSucceeded, AmountCents: 500, Currency: "USD"}, dead: true},
		{name: "in progress", res: payment.RefundResult{RefundID: "re_1", State: payment.RefundPending}, retryIn: time.Minute},
		{name: "unknown payment", err: fmt.Errorf("x: %w", payment.ErrUnknownPayment), dead: true},
		{name: "nothing to refund", err: fmt.Errorf("x: %w", payment.ErrNotRefundable), dead: true},
		{name: "partial refused", err: fmt.Errorf("x: %w", payment.ErrPartialRefund), dead: true},
		{name: "failed at the gateway", err: fmt.Errorf("x: %w", payment.ErrRefundFailed), dead: true},
		{name: "a 5xx", err: errors.New("gateway answered 503")},
		{name: "a 5xx, the last allowed failure", err: errors.New("gateway answered 503"),
			r: store.ClaimedRefund{Refund: r.Refund, Failures: 19, Since: r.Since, ClaimedAt: now}, dead: true},
		{name: "a 5xx, too old", err: errors.New("gateway answered 503"),
			r: store.ClaimedRefund{Refund: r.Refund, Failures: 1, Since: now.Add(-73 * time.Hour), ClaimedAt: now}, dead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := r
			if tc.r.PaymentID != "" {
				in = tc.r
			}
			o := d.outcome(in, tc.res, tc.err)
			if o.PaymentID != "p" || o.OrderID != "o" || o.Attempts != 3 {
				t.Fatalf("outcome names %+v, want the claim's refund", o)
			}
			if o.Done != tc.done || o.Dead != tc.dead {
				t.Fatalf("done=%v dead=%v (%q), want done=%v dead=%v", o.Done, o.Dead, o.Error, tc.done, tc.dead)
			}
			if o.Done && o.RefundID != "re_1" {
				t.Fatalf("refund id %q", o.RefundID)
			}
			if !o.Done && o.Error == "" {
				t.Fatal("not done, and no error kept")
			}
			if !o.Done && !o.Dead && o.RetryIn <= 0 {
				t.Fatalf("retried in %s", o.RetryIn)
			}
			if tc.retryIn > 0 && o.RetryIn != tc.retryIn {
				t.Fatalf("retry in %s, want %s", o.RetryIn, tc.retryIn)
			}
		})
	}
}
