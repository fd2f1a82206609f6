package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// paymentOf is the attempt of o (read with GetOrder) by that id.
func paymentOf(t testing.TB, o order.Order, paymentID string) order.Payment {
	t.Helper()
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return p
		}
	}
	t.Fatalf("order %s has no payment %s: %+v", o.ID, paymentID, o.Payments)
	return order.Payment{}
}

func wantStatuses(t testing.TB, o order.Order, want map[string]order.PaymentStatus) {
	t.Helper()
	if len(o.Payments) != len(want) {
		t.Fatalf("order %s: payments %+v, want %v", o.ID, o.Payments, want)
	}
	for id, st := range want {
		if got := paymentOf(t, o, id).Status; got != st {
			t.Fatalf("order %s: payment %s is %s, want %s (all: %+v)", o.ID, id, got, st, o.Payments)
		}
	}
}

// testPaymentAttempts: every pay names (or is given) an attempt; a FAILED
// acts only on the current attempt (a gateway's re-delivery of attempt 1's
// failure cannot undo attempt 2); a SUCCEEDED of any attempt pays a PENDING
// or PAYING order, and one that cannot pay the order is money to give back.
func testPaymentAttempts(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "pa", "a")
	start := func(paymentID string) (order.Order, error) {
		return s.StartPayment(ctx, store.StartPaymentParams{OrderID: "pa", PaymentID: paymentID})
	}

	o, err := start("")
	if err != nil || o.Status != order.Paying || o.PaymentID != "pa-1" {
		t.Fatalf("first pay: %+v %v, want PAYING with payment pa-1", o, err)
	}
	wantStatuses(t, get(t, s, "pa"), map[string]order.PaymentStatus{"pa-1": order.PaymentPending})
	v := o.Version
	for _, again := range []string{"", "pa-1"} {
		if o, err := start(again); err != nil || o.PaymentID != "pa-1" || o.Version != v {
			t.Fatalf("pay again with %q: %+v %v, want the attempt unchanged", again, o, err)
		}
	}

	o, err = start("card-2")
	if err != nil || o.Status != order.Paying || o.PaymentID != "card-2" {
		t.Fatalf("pay with another id: %+v %v, want PAYING with card-2", o, err)
	}
	wantStatuses(t, get(t, s, "pa"), map[string]order.PaymentStatus{"pa-1": order.PaymentSuperseded, "card-2": order.PaymentPending})

	// The gateway re-delivers attempt 1's FAILED: nothing moves.
	res, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "pa", PaymentID: "pa-1"})
	if err != nil || res.Outcome != store.OutcomeNoChange || res.Order.Status != order.Paying || res.Order.PaymentID != "card-2" {
		t.Fatalf("FAILED of a superseded attempt: %+v %v, want no change", res, err)
	}
	res, err = s.FailPayment(ctx, store.PaymentParams{OrderID: "pa", PaymentID: "card-2"})
	if err != nil || res.Outcome != store.OutcomeFailed || res.Order.Status != order.Pending || res.Order.PaymentAttempts != 1 {
		t.Fatalf("FAILED of the current attempt: %+v %v, want PENDING with 1 failed attempt", res, err)
	}
	wantStatuses(t, get(t, s, "pa"), map[string]order.PaymentStatus{"pa-1": order.PaymentFailed, "card-2": order.PaymentFailed})

	if _, err := start("card-2"); !errors.Is(err, store.ErrPaymentIDUsed) {
		t.Fatalf("pay again with a used id: %v, want ErrPaymentIDUsed", err)
	}
	if o, err := start(""); err != nil || o.PaymentID != "pa-3" {
		t.Fatalf("third pay: %+v %v, want payment pa-3", o, err)
	}

	// Attempt 1's money arrives after all: it pays the order, whichever
	// attempt is current.
	res, err = s.CompletePayment(ctx, store.PaymentParams{OrderID: "pa", PaymentID: "pa-1", AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomePaid || res.Order.PaymentID != "pa-1" {
		t.Fatalf("SUCCEEDED of an earlier attempt: %+v %v, want PAID by pa-1", res, err)
	}
	wantSKU(t, s, "a", 9, 0, 1)

	// Then attempt 3's: the order is paid already — money to give back.
	events := func() int {
		evs, err := s.UnpublishedEvents(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type != order.EventRefundRequired || e.OrderID != "pa" {
				continue
			}
			n++
			var payload struct {
				ID     string `json:"id"`
				Refund struct {
					PaymentID   string `json:"payment_id"`
					AmountCents int64  `json:"amount_cents"`
				} `json:"refund"`
			}
			if err := json.Unmarshal(e.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			if payload.ID != "pa" || payload.Refund.PaymentID != "pa-3" || payload.Refund.AmountCents != 1000 {
				t.Fatalf("order.refund_required payload %s, want it to name payment pa-3 and 1000", e.Payload)
			}
		}
		return n
	}
	second := store.PaymentParams{OrderID: "pa", PaymentID: "pa-3", AmountCents: 1000}
	res, err = s.CompletePayment(ctx, second)
	if err != nil || res.Outcome != store.OutcomeRefundRequired || res.Order.Status != order.Paid || !res.Order.RefundRequired || res.Order.PaymentID != "pa-1" {
		t.Fatalf("SUCCEEDED of a second attempt of a PAID order: %+v %v, want refund_required, paid by pa-1", res, err)
	}
	if n := events(); n != 1 {
		t.Fatalf("%d order.refund_required events, want 1", n)
	}
	if res, err := s.CompletePayment(ctx, second); err != nil || res.Outcome != store.OutcomeNoChange {
		t.Fatalf("the same success again: %+v %v, want no change", res, err)
	}
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "pa", PaymentID: "pa-1", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomeNoChange {
		t.Fatalf("the paying success again: %+v %v, want no change", res, err)
	}
	if n := events(); n != 1 {
		t.Fatalf("%d order.refund_required events after duplicates, want 1", n)
	}
	wantStatuses(t, get(t, s, "pa"), map[string]order.PaymentStatus{
		"pa-1": order.PaymentSucceeded, "card-2": order.PaymentFailed, "pa-3": order.PaymentRefundRequired,
	})
	wantSKU(t, s, "a", 9, 0, 1)

	// A success for a cancelled order is money to give back too.
	Create(t, s, "pc", "a")
	into(t, s, "pc", order.Cancelled)
	res, err = s.CompletePayment(ctx, store.PaymentParams{OrderID: "pc", PaymentID: "late", AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomeRefundRequired || res.Order.Status != order.Cancelled || !res.Order.RefundRequired {
		t.Fatalf("SUCCEEDED of a cancelled order: %+v %v", res, err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "nobody"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pay an unknown order: %v", err)
	}
	AuditOK(t, s)
}
