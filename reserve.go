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

// checkReservation reads what the inventory holds under the caller's
// reservation p.ReservationID, where its transport can read
// (inventory.Inspector: HTTP, not AMQP), and returns why the order must not
// take it, or nil:
//   - a *ReservationError with ErrReservationNotHeld when the inventory does
//     not know it or has it released or confirmed (already sold: taken on
//     trust, the order would be paid for stock another sale holds);
//   - a *ReservationError with ErrReservationMismatch when it holds other
//     units of some SKU than the order, or was reserved for another order
//     (only when both the inventory recorded an order id and the caller
//     named the order's: idGiven);
//   - ErrReservationUnknown when the inventory did not answer.
//
// The caller lets the store replay the order of the request's idempotency
// key even so (store.CreateOrderParams.ReplayOnly): a create that succeeded
// before is answered the same, whatever became of its reservation since.
func (s *Service) checkReservation(ctx context.Context, p store.CreateOrderParams, idGiven bool) error {
	insp, ok := s.cfg.Inventory.(inventory.Inspector)
	if !ok || p.ReservationID == "" {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, reservationCheckTimeout)
	res, err := insp.Reservation(cctx, p.ReservationID)
	cancel()
	refuse := func(kind error, format string, args ...any) error {
		return &ReservationError{Err: kind, ReservationID: p.ReservationID, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case errors.Is(err, inventory.ErrUnknownReservation):
		return refuse(ErrReservationNotHeld, "the inventory does not know it: reserve the stock there first")
	case err != nil:
		// The check guards against a caller's mistake; it must not make
		// every create depend on the inventory answering reads. Without an
		// answer the reservation is taken as sent, as over AMQP, and
		// `lapse reconcile --inventory --check-items` finds a difference.
		s.metrics.reservationChecks.WithLabelValues("unanswered").Inc()
		s.log.Warn("inventory: could not read the caller's reservation; taken as sent", "order_id", p.ID, "reservation_id", p.ReservationID, "err", err)
		return nil
	case res.Status != inventory.StatusReserved:
		return refuse(ErrReservationNotHeld, "the inventory reports it %q, not %s: no stock is held under it", res.Status, inventory.StatusReserved)
	case idGiven && res.OrderID != "" && res.OrderID != p.ID:
		return refuse(ErrReservationMismatch, "the inventory holds it for order %q, not %q", res.OrderID, p.ID)
	}
	items := make([]inventory.Item, len(p.Items))
	for i, it := range p.Items {
		items[i] = inventory.Item{SKU: it.SKU, Qty: it.Qty}
	}
	if diff := inventory.ItemsDiff(items, res.Items); diff != nil {
		return refuse(ErrReservationMismatch, "it holds other items than the order: %s", inventory.DescribeDiff(diff))
	}
	return nil
}

// reservationCheckTimeout bounds the read of a caller's reservation at
// create: a slow inventory delays a create by at most this much.
const reservationCheckTimeout = 2 * time.Second

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
