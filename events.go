package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store"
)

// notifying is the store as the Service uses it: every transition that
// writes outbox events wakes this instance's relay right after its commit,
// so events leave in milliseconds instead of at the relay's next poll.
// (Events committed by other instances are found by the poll.)
type notifying struct {
	store.Store
	relay *outbox.Relay
}

func (n notifying) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	r, err := n.Store.CreateOrder(ctx, p)
	if err == nil && !r.Replayed {
		n.relay.Notify()
	}
	return r, err
}

func (n notifying) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	r, err := n.Store.CompletePayment(ctx, p)
	if err == nil {
		n.relay.Notify()
	}
	return r, err
}

func (n notifying) CancelOrder(ctx context.Context, id string) (order.Order, error) {
	r, err := n.Store.CancelOrder(ctx, id)
	if err == nil {
		n.relay.Notify()
	}
	return r, err
}

func (n notifying) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	r, err := n.Store.CancelDue(ctx, p)
	if err == nil && len(r.Cancelled) > 0 {
		n.relay.Notify()
	}
	return r, err
}
