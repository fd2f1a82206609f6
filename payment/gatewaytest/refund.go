package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// refunds checks a payment.Refunder (Run's doc comment says what).
func (h Harness) refunds(t *testing.T) {
	bound := 10*h.Timeout + 5*time.Second
	newRefunder := func(t *testing.T) (payment.Refunder, RefundFake) {
		gw, fake := h.New(t)
		return gw.(payment.Refunder), fake.(RefundFake)
	}
	refund := func(t *testing.T, rf payment.Refunder, amount int64) (res payment.RefundResult, err error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		start := time.Now()
		res, err = rf.Refund(ctx, payment.Refund{OrderID: theOrder, PaymentID: h.PaymentID, AmountCents: amount,
			Currency: h.Currency, Key: payment.RefundKey(h.PaymentID), Reason: "gatewaytest"})
		if ctx.Err() != nil {
			t.Fatalf("the refund did not return within %s (took %s): the adapter has no timeout of its own (err %v)", bound, time.Since(start), err)
		}
		return res, err
	}
	wantRefunds := func(t *testing.T, fake RefundFake, want int) {
		t.Helper()
		if n := fake.Refunds(theOrder, h.PaymentID); n != want {
			t.Fatalf("the gateway holds %d refunds of the payment, want %d", n, want)
		}
	}
	wantRefunded := func(t *testing.T, res payment.RefundResult, err error, amount int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("refund: %v", err)
		}
		if res.RefundID == "" || (res.State != payment.RefundSucceeded && res.State != payment.RefundPending) ||
			res.AmountCents != amount || res.Currency != h.Currency {
			t.Fatalf("refund: %+v; want a refund id, SUCCEEDED or PENDING, %d %s", res, amount, h.Currency)
		}
	}

	t.Run("a paid payment is refunded once per key", func(t *testing.T) {
		t.Parallel()
		rf, fake := newRefunder(t)
		fake.Set(theOrder, h.PaymentID, TradePaid, 1234)
		first, err := refund(t, rf, 1234)
		wantRefunded(t, first, err, 1234)
		again, err := refund(t, rf, 1234)
		wantRefunded(t, again, err, 1234)
		if again.RefundID != first.RefundID {
			t.Fatalf("the refund sent again with its key is refund %q, the first was %q", again.RefundID, first.RefundID)
		}
		wantRefunds(t, fake, 1)
	})
	t.Run("a refund of an unknown payment is ErrUnknownPayment", func(t *testing.T) {
		t.Parallel()
		rf, fake := newRefunder(t)
		fake.Set(theOrder, h.PaymentID, TradeUnknown, 0)
		if res, err := refund(t, rf, 1234); !errors.Is(err, payment.ErrUnknownPayment) {
			t.Fatalf("refund of a payment the gateway never saw: %+v, %v; want an error wrapping ErrUnknownPayment", res, err)
		}
		wantRefunds(t, fake, 0)
	})
	for _, tr := range []Trade{TradeNotPaid, TradeClosed} {
		t.Run(fmt.Sprintf("a refund of a %s payment is ErrNotRefundable", tr), func(t *testing.T) {
			t.Parallel()
			rf, fake := newRefunder(t)
			fake.Set(theOrder, h.PaymentID, tr, 0)
			if res, err := refund(t, rf, 1234); !errors.Is(err, payment.ErrNotRefundable) {
				t.Fatalf("refund: %+v, %v; want an error wrapping ErrNotRefundable", res, err)
			}
			wantRefunds(t, fake, 0)
		})
	}
	if h.PartialRefunds {
		t.Run("a partial amount is refunded", func(t *testing.T) {
			t.Parallel()
			rf, fake := newRefunder(t)
			fake.Set(theOrder, h.PaymentID, TradePaid, 1234)
			res, err := refund(t, rf, 500)
			wantRefunded(t, res, err, 500)
			wantRefunds(t, fake, 1)
		})
	} else {
		t.Run("a partial amount is ErrPartialRefund", func(t *testing.T) {
			t.Parallel()
			rf, fake := newRefunder(t)
			fake.Set(theOrder, h.PaymentID, TradePaid, 1234)
			if res, err := refund(t, rf, 500); !errors.Is(err, payment.ErrPartialRefund) {
				t.Fatalf("refund of 500 of 1234: %+v, %v; want an error wrapping ErrPartialRefund", res, err)
			}
			wantRefunds(t, fake, 0)
		})
	}

	faults := []Fault{FaultServerError, FaultHang, FaultGarbage}
	if h.SignedResponses {
		faults = append(faults, FaultBadSignature)
	}
	for _, f := range faults {
		t.Run(fmt.Sprintf("a refund answered %s is an error, and one refund once sent again", f), func(t *testing.T) {
			t.Parallel()
			rf, fake := newRefunder(t)
			fake.Set(theOrder, h.PaymentID, TradePaid, 1234)
			fake.Fail(f)
			if res, err := refund(t, rf, 1234); err == nil {
				t.Fatalf("refund: %+v, want an error", res)
			}
			fake.Fail(FaultNone)
			res, err := refund(t, rf, 1234)
			wantRefunded(t, res, err, 1234)
			wantRefunds(t, fake, 1)
		})
	}
}
