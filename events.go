package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// notifying is the store as the Service uses it: every transition that
// writes outbox events (and stock tasks) wakes this instance's relay (and
// dispatcher) right after its commit, so they leave in milliseconds instead
// of at the next poll. (What other instances commit is found by the poll.)
//
// The order-service dispatcher (commands) is woken only by what writes
// commands: a CancelDue in order-service mode. Woken by every create, it
// claimed nothing a thousand times a second at 1,000 checkouts/s — a
// transaction each, on the database the cancels and their answers wait on.
type notifying struct {
	store.Store
	wake     []interface{ Notify() }
	commands interface{ Notify() } // nil outside order-service mode
	// refunds is woken by a payment that ended REFUND_REQUIRED (a refund
	// task written with it); nil without AutoRefund.
	refunds interface{ Notify() }
}

func (n notifying) notify() {
	for _, w := range n.wake {
		w.Notify()
	}
}

func (n notifying) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	r, err := n.Store.CreateOrder(ctx, p)
	if err == nil && !r.Replayed {
		n.notify()
	}
	return r, err
}

func (n notifying) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	r, err := n.Store.CompletePayment(ctx, p)
	if err == nil {
		n.notify()
		if r.Outcome == store.OutcomeRefundRequired && n.refunds != nil {
			n.refunds.Notify()
		}
	}
	return r, err
}

func (n notifying) CancelOrder(ctx context.Context, id string) (order.Order, error) {
	r, err := n.Store.CancelOrder(ctx, id)
	if err == nil {
		n.notify()
	}
	return r, err
}

func (n notifying) Extend(ctx context.Context, p store.ExtendParams) (order.Order, error) {
	r, err := n.Store.Extend(ctx, p)
	if err == nil {
		n.notify()
	}
	return r, err
}

func (n notifying) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	r, err := n.Store.CancelDue(ctx, p)
	if err == nil && len(r.Cancelled) > 0 {
		n.notify()
		if p.Command && n.commands != nil && len(r.Commands) < len(r.Cancelled) {
			n.commands.Notify() // some were not handed over (CommandLease)
		}
	}
	return r, err
}
