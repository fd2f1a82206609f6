package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The reserving step of a create whose stock lapse reserves itself at the
// remote inventory (--inventory-reserve, docs/sagas.md). The order's reserve
// task is written before the reserve is sent, so a reservation the
// inventory may hold is always known to lapse: either the order is created
// with it, or the reserve task ends DONE beside a release task that gives
// the stock back. The reserve task's row is the lock that orders the
// request's create against a dispatcher's compensation.

// BeginReserve implements store.Tasks.
//
// A create whose idempotency key an order took already is that order's
// replay (Exists): it reserves nothing. Two tries of one create that reach
// here at once, with the same id, share the one reserve task: the second's
// insert meets the first's row, and the transaction is run again to take
// it over.
func (s *Store) BeginReserve(ctx context.Context, p store.CreateOrderParams, lease time.Duration) (store.ReserveStart, error) {
	if p.ID == "" || p.ReservationID == "" || lease <= 0 {
		return store.ReserveStart{}, fmt.Errorf("begin reserve: id %q, reservation %q, lease %s: %w", p.ID, p.ReservationID, lease, store.ErrInvalid)
	}
	p.Items = store.ItemsBySKU(p.Items)
	var out store.ReserveStart
	var err error
	for try := 0; ; try++ {
		err = s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
			out = store.ReserveStart{}
			return s.beginReserveIn(ctx, tx, p, lease, &out)
		})
		if try > 0 || !errors.Is(err, ErrMovedTwice) {
			break
		}
	}
	if err != nil {
		return store.ReserveStart{}, fmt.Errorf("begin reserve of order %s: %w", p.ID, err)
	}
	out.Task.ClaimedAt = out.Task.CreatedAt
	return out, nil
}

func (s *Store) beginReserveIn(ctx context.Context, tx *Tx, p store.CreateOrderParams, lease time.Duration, out *store.ReserveStart) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	if os, err := tx.Orders(ctx, []string{p.ID}); err != nil {
		return err
	} else if len(os) > 0 {
		out.Exists = true
		return nil
	}
	if p.IdempotencyKey != "" {
		// The key's order, made by an earlier try under another id, holds
		// the stock already; CreateOrder answers its replay (or the
		// mismatch).
		if _, _, err := tx.KeyOwner(ctx, p.IdempotencyKey); err == nil {
			out.Exists = true
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("idempotency key: %w", err)
		}
	}
	t, err := tx.LockTask(ctx, p.ReservationID, order.TaskReserve)
	switch {
	case errors.Is(err, store.ErrNotFound):
		items, err := json.Marshal(p.Items)
		if err != nil {
			return fmt.Errorf("encode items: %w", err)
		}
		nt := NewTask{ID: uuid.Must(uuid.NewV7()).String(), OrderID: p.ID, Action: order.TaskReserve, ReservationID: p.ReservationID, Items: items}
		if err := tx.WriteEffects(ctx, Effects{Now: now, Tasks: []NewTask{nt}, TasksDue: now.Add(lease)}); err != nil {
			return err
		}
		out.Task, err = tx.LockTask(ctx, p.ReservationID, order.TaskReserve)
		if err == nil {
			out.Task, err = tx.LeaseTask(ctx, out.Task.ID, now.Add(lease))
		}
		return err
	case err != nil:
		return err
	}
	// A retry of the create: the reserve was written by an earlier try.
	if t.Status == order.TaskDone && t.Result == "REJECTED" {
		return fmt.Errorf("%w: the inventory refused the reservation of order %s", store.ErrInsufficientStock, p.ID)
	}
	// Its stock was given back (the reserve resolved without the order, or
	// given up DEAD): it is never reserved again.
	if _, err := tx.LockTask(ctx, p.ReservationID, order.TaskRelease); err == nil {
		return store.ErrReservationReleased
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	out.Task, err = tx.LeaseTask(ctx, t.ID, now.Add(lease))
	return err
}

// CreateReserved implements store.Tasks.
func (s *Store) CreateReserved(ctx context.Context, p store.CreateOrderParams, t store.ClaimedTask, result string) (store.CreateOrderResult, error) {
	p.Items = store.ItemsBySKU(p.Items)
	var res store.CreateOrderResult
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		if err := s.heldReserve(ctx, tx, p.ReservationID); err != nil {
			return err
		}
		var err error
		if res, err = s.createIn(ctx, tx, p); err != nil {
			return err
		}
		o := store.TaskOutcome{ID: t.ID, Attempts: t.Attempts, Done: true, Result: result,
			Action: order.TaskReserve, OrderID: t.OrderID, ReservationID: t.ReservationID}
		if res.Replayed && res.Order.ReservationID != p.ReservationID {
			// The key's order was made by another try, with a reservation
			// of its own: this one is nobody's, and goes back.
			return s.compensateIn(ctx, tx, o)
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.SettleTask(ctx, o, now, now)
	})
	if err == nil {
		return res, nil
	}
	if errors.Is(err, store.ErrOrderExists) || errors.Is(err, store.ErrIdempotencyMismatch) {
		// The order cannot be created: give the stock back.
		if cerr := s.compensate(ctx, t, result); cerr != nil {
			return store.CreateOrderResult{}, fmt.Errorf("create reserved order %s: %w; giving its reservation back: %w", p.ID, err, cerr)
		}
	}
	return store.CreateOrderResult{}, fmt.Errorf("create reserved order %s: %w", p.ID, err)
}

// heldReserve locks the reserve task of reservation and checks that its
// stock was not given back meanwhile.
func (s *Store) heldReserve(ctx context.Context, tx *Tx, reservation string) error {
	if _, err := tx.LockTask(ctx, reservation, order.TaskReserve); err != nil {
		return fmt.Errorf("lock the reserve task: %w", err)
	}
	if _, err := tx.LockTask(ctx, reservation, order.TaskRelease); err == nil {
		return store.ErrReservationReleased
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// compensate ends reserve task t DONE with result and writes the release
// task that gives its stock back, unless the order holds the reservation
// (created by another try) or the release was written already.
func (s *Store) compensate(ctx context.Context, t store.ClaimedTask, result string) error {
	return s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		return s.compensateIn(ctx, tx, store.TaskOutcome{ID: t.ID, Attempts: t.Attempts, Done: true, Result: result,
			Action: order.TaskReserve, OrderID: t.OrderID, ReservationID: t.ReservationID})
	})
}

// compensateIn settles the reserve outcome o and, when the reserve may
// hold stock (it is DONE and was not refused, or it was given up DEAD: an
// earlier copy may have been applied) and its order does not hold the
// reservation, writes the release task that gives the stock back beside it.
// (A release of a reservation the inventory never made is harmless: it is
// remembered, and refuses a late reserve.)
func (s *Store) compensateIn(ctx context.Context, tx *Tx, o store.TaskOutcome) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	t, err := tx.LockTask(ctx, o.ReservationID, order.TaskReserve)
	if err != nil {
		return fmt.Errorf("lock the reserve task: %w", err)
	}
	if t.Status != order.TaskPending || t.Attempts != o.Attempts {
		return nil // another claim holds it now (a create's retry, a dispatcher): it decides
	}
	if err := tx.SettleTask(ctx, o, now, now.Add(max(o.RetryIn, 0))); err != nil {
		return err
	}
	if held := (o.Done && o.Result != "REJECTED") || (!o.Done && o.Dead); !held {
		return nil // nothing is held
	}
	// The order holds this reservation only if it was created with it (by
	// another try of the create); an order that took the id otherwise does not.
	if os, err := tx.Orders(ctx, []string{o.OrderID}); err != nil {
		return err
	} else if len(os) > 0 && os[0].ReservationID == t.ReservationID {
		return nil
	}
	if _, err := tx.LockTask(ctx, o.ReservationID, order.TaskRelease); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	items, err := json.Marshal(t.Items)
	if err != nil {
		return fmt.Errorf("encode items: %w", err)
	}
	rel := NewTask{ID: uuid.Must(uuid.NewV7()).String(), OrderID: o.OrderID, Action: order.TaskRelease, ReservationID: t.ReservationID, Items: items}
	return tx.WriteEffects(ctx, Effects{Now: now, Tasks: []NewTask{rel}})
}

// DropReserve implements store.Tasks.
func (s *Store) DropReserve(ctx context.Context, t store.ClaimedTask, result string) error {
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.SettleTask(ctx, store.TaskOutcome{ID: t.ID, Attempts: t.Attempts, Done: true, Result: result}, now, now)
	})
	if err != nil {
		return fmt.Errorf("drop reserve of order %s: %w", t.OrderID, err)
	}
	return nil
}
