package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// testOperatorCancel is an operator's cancel (CancelDueParams.Reason
// order.ReasonOperator): the confirmed cancel of named orders, PENDING or
// PAYING, before their deadline too, with cancel_reason operator, stock
// released, open attempts ended FAILED and order.cancelled written; any
// other use of the reason is ErrInvalid and writes nothing.
func testOperatorCancel(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "op-paying", "a")
	into(t, s, "op-paying", order.Paying)
	Create(t, s, "op-pending", "a")
	Create(t, s, "op-paid", "a")
	into(t, s, "op-paid", order.Paid)
	Create(t, s, "op-bystander", "a")
	clk.Advance(time.Second) // before every deadline

	for _, bad := range []store.CancelDueParams{
		{IDs: []string{"op-pending"}, Reason: order.ReasonOperator},                                 // not confirmed
		{IDs: []string{"op-pending"}, Reason: order.ReasonOperator, Confirmed: true, Command: true}, // commanded
		{Claim: 10, Reason: order.ReasonOperator, Confirmed: true},                                  // a claim
		{IDs: []string{"op-pending"}, Reason: order.ReasonBuyer, Confirmed: true},                   // the buyer's has its own path
		{IDs: []string{"op-pending"}, Reason: "whim", Confirmed: true},
	} {
		if res, err := s.CancelDue(ctx, bad); !errors.Is(err, store.ErrInvalid) || len(res.Cancelled) != 0 {
			t.Errorf("CancelDue(%+v) = %+v, %v; want ErrInvalid", bad, res, err)
		}
	}
	if got := get(t, s, "op-pending"); got.Status != order.Pending {
		t.Fatalf("a refused operator's cancel changed the order: %s", got.Status)
	}

	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"op-paying", "op-pending", "op-paid", "op-missing"},
		Confirmed: true, Reason: order.ReasonOperator})
	if err != nil || len(res.Cancelled) != 2 || len(res.Skipped) != 2 {
		t.Fatalf("operator's cancel: %+v, %v; want op-paying and op-pending cancelled, op-paid and op-missing skipped", res, err)
	}
	for _, id := range []string{"op-paying", "op-pending"} {
		got := get(t, s, id)
		if got.Status != order.Cancelled || got.CancelReason != order.ReasonOperator || !got.CancelledAt.Equal(clk.Now()) {
			t.Errorf("%s: %s %q at %v, want CANCELLED operator at %v", id, got.Status, got.CancelReason, got.CancelledAt, clk.Now())
		}
		for _, p := range got.Payments {
			if p.Status != order.PaymentFailed {
				t.Errorf("%s: attempt %s %s, want FAILED", id, p.PaymentID, p.Status)
			}
		}
		evs, err := s.OrderEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs {
			if e.Type != order.EventCancelled {
				continue
			}
			var p struct {
				CancelReason string `json:"cancel_reason"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			found = p.CancelReason == string(order.ReasonOperator)
		}
		if !found {
			t.Errorf("%s: no order.cancelled event with cancel_reason operator", id)
		}
	}
	if got := get(t, s, "op-paid"); got.Status != order.Paid {
		t.Errorf("op-paid: %s, want PAID untouched", got.Status)
	}
	if got := get(t, s, "op-bystander"); got.Status != order.Pending {
		t.Errorf("op-bystander: %s, want PENDING untouched", got.Status)
	}
	wantSKU(t, s, "a", 8, 1, 1)
	// Without the reason the deadline binds again: op-bystander is not due.
	if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"op-bystander"}, Confirmed: true}); err != nil || len(res.Cancelled) != 0 {
		t.Errorf("a timeout's confirmed cancel before the deadline: %+v, %v", res, err)
	}
	AuditOK(t, s)
}
