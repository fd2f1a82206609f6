package lapse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// createReserving creates an order whose stock lapse reserves itself at the
// inventory (Config.InventoryReserve), as a saga whose first step is
// recorded before it is taken: the order's reserve task is written and
// leased to this request, the reserve is sent (reservation id = order id,
// task id = the reserve task's), and then
//   - the inventory holds the stock: the order is created beside the DONE
//     reserve (a create that cannot be made writes the release instead);
//   - it refuses: the reserve task ends, nothing else is written — 409;
//   - it does not answer: the reserve goes to the dispatchers, due at once,
//     and the request answers 503 reservation_unknown. A dispatcher that
//     resolves it without an order gives the stock back; a retry of the
//     create takes the reserve over and finishes it.
//
// Stock the inventory may hold is therefore always known to lapse: by an
// order, or by a release task that gives it back.
//
// keyed says p.ID was derived from the idempotency key (the client sent
// none): retries of the request land on the same reserve.
func (s *Service) createReserving(ctx context.Context, p store.CreateOrderParams, keyed bool) (store.CreateOrderResult, error) {
	lease := s.cfg.Tasks.Lease
	if lease <= 0 {
		lease = 30 * time.Second
	}
	st, err := s.store.BeginReserve(ctx, p, lease)
	if keyed && (errors.Is(err, store.ErrReservationReleased) || errors.Is(err, store.ErrInsufficientStock)) {
		// The id derived from the key names a reservation an earlier try
		// lost (given back, or refused): this try reserves afresh under
		// an id of its own. Should another try have made the key's order
		// meanwhile, CreateReserved gives this reservation back.
		p.ID = uuid.Must(uuid.NewV7()).String()
		p.ReservationID = p.ID
		st, err = s.store.BeginReserve(ctx, p, lease)
	}
	if err != nil {
		return store.CreateOrderResult{}, err
	}
	if st.Exists {
		return s.store.CreateOrder(ctx, p) // a replay of its key, or the id taken
	}
	t := st.Task
	a, err := s.cfg.Inventory.Send(ctx, inventory.CommandOf(t.StockTask))
	if err != nil {
		hand, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		serr := s.store.SettleTasks(hand, []store.TaskOutcome{{ID: t.ID, Attempts: t.Attempts, Error: truncate(err.Error(), 1000),
			Action: order.TaskReserve, OrderID: t.OrderID, ReservationID: t.ReservationID}})
		if s.dispatch != nil {
			s.dispatch.Notify()
		}
		s.log.Warn("inventory: reserve unanswered; the dispatcher resolves it", "order_id", p.ID, "err", err, "handover_err", serr)
		return store.CreateOrderResult{}, fmt.Errorf("reserve order %s: %w: %w", p.ID, ErrReservationUnknown, err)
	}
	switch a.Result {
	case inventory.Success, inventory.AlreadyDone:
		return s.store.CreateReserved(ctx, p, t, string(a.Result))
	case inventory.Rejected:
		if err := s.store.DropReserve(ctx, t, string(a.Result)); err != nil {
			return store.CreateOrderResult{}, err
		}
		if a.Reason == "released" {
			return store.CreateOrderResult{}, fmt.Errorf("reserve order %s: %w", p.ID, ErrReservationReleased)
		}
		return store.CreateOrderResult{}, fmt.Errorf("reserve order %s: the inventory refused (%s): %w", p.ID, a.Reason, ErrInsufficientStock)
	}
	return store.CreateOrderResult{}, fmt.Errorf("reserve order %s: the inventory answered %q", p.ID, a.Result)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
