package reference

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lapsehq/lapse/inventory"
)

// Reasons of the answers the store rejects with, besides
// inventory.ReasonInsufficientStock. They are also the HTTP error codes.
const (
	// ReasonReleased: a reserve or confirm of a reservation already released
	// (or released before it was ever reserved: a tombstone).
	ReasonReleased = "released"
	// ReasonConfirmed: a release of a reservation already confirmed (sold).
	ReasonConfirmed = "confirmed"
	// ReasonUnknownReservation: a confirm of a reservation never reserved.
	ReasonUnknownReservation = "unknown_reservation"
	// ReasonInvalidCommand: a command that fails inventory.Command.Validate.
	ReasonInvalidCommand = "invalid_command"
)

var _ inventory.Applier = (*Store)(nil)

// errRollback ends a transaction that decided to write nothing (a
// rejection, or a command already applied); Apply answers all the same.
var errRollback = errors.New("reference: nothing to write")

// Apply implements inventory.Applier. Each command runs in one transaction
// that first takes the reservation's row (inserting it when absent), so the
// commands about one reservation run one at a time whatever the transport
// delivers at once, and decides on the status it finds:
//
//	            unknown           RESERVED          RELEASED          CONFIRMED
//	reserve     move stock        ALREADY_DONE      REJECTED released ALREADY_DONE
//	release     tombstone,        move back         ALREADY_DONE      REJECTED confirmed
//	            ALREADY_DONE
//	confirm     REJECTED          move to sold      REJECTED released ALREADY_DONE
//	            unknown_reservation
//
// A reserve short of stock on any SKU is REJECTED insufficient_stock and
// moves nothing. A reserve of a released reservation is refused rather than
// answered ALREADY_DONE even when it was applied before the release: the
// sender must not believe stock is held that is not. Every applied command
// writes its ledger row, unique by (reservation, action), in the same
// transaction as the counters it moves; a rejection writes nothing.
// The items of a release or confirm are not read: the reservation's own are
// moved.
func (s *Store) Apply(ctx context.Context, c inventory.Command) (inventory.Answer, error) {
	ans := inventory.Answer{TaskID: c.TaskID}
	if err := c.Validate(); err != nil {
		ans.Result, ans.Reason = inventory.Rejected, ReasonInvalidCommand
		return ans, nil
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.now().UnixMilli()
		var status string
		if err := tx.QueryRowContext(ctx, s.d.q.Get("reservation_take"), c.ReservationID, c.OrderID, now).Scan(&status); err != nil {
			return fmt.Errorf("take the reservation: %w", err)
		}
		var write func() error
		ans.Result, ans.Reason, write = s.decide(ctx, tx, c, status, now)
		if write == nil {
			return errRollback
		}
		return write()
	})
	switch {
	case errors.Is(err, errRollback):
		return ans, nil
	case errors.Is(err, errShort):
		ans.Result, ans.Reason = inventory.Rejected, inventory.ReasonInsufficientStock
		return ans, nil
	case err != nil:
		return inventory.Answer{}, fmt.Errorf("reference: %s %q: %w", c.Action, c.ReservationID, err)
	}
	return ans, nil
}

// decide returns the answer to c given the reservation's status, and the
// writes that apply it (nil when nothing is written). A write may still
// turn the answer into a rejection (short stock) through errShort.
func (s *Store) decide(ctx context.Context, tx *sql.Tx, c inventory.Command, status string, now int64) (inventory.Result, string, func() error) {
	q := s.d.q
	finish := func(newStatus string, tombstone bool) error {
		if _, err := tx.ExecContext(ctx, q.Get("reservation_set"), c.ReservationID, newStatus, now, c.OrderID); err != nil {
			return fmt.Errorf("set status: %w", err)
		}
		r, err := tx.ExecContext(ctx, q.Get("ledger_insert"), c.ReservationID, string(c.Action), c.TaskID, now, tombstone)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return fmt.Errorf("ledger: %w", err)
		} else if n == 0 {
			// The reservation's row lock makes this unreachable; the
			// unique key is the guard should it ever be reached.
			return errors.New("ledger: (reservation, action) already recorded under another status")
		}
		return nil
	}
	// move runs one counter update per item, in SKU order (the lock
	// order of every transaction, so two never deadlock), and reports
	// whether every SKU had the units.
	move := func(stmt string, items []inventory.Item) (bool, error) {
		for _, it := range items {
			r, err := tx.ExecContext(ctx, q.Get(stmt), it.SKU, it.Qty)
			if err != nil {
				return false, fmt.Errorf("sku %q: %w", it.SKU, err)
			}
			if n, err := r.RowsAffected(); err != nil {
				return false, fmt.Errorf("sku %q: %w", it.SKU, err)
			} else if n == 0 {
				return false, nil
			}
		}
		return true, nil
	}
	// moveHeld moves a reservation's own items on from reserved; a SKU
	// without them means the counters were edited behind the ledger's back.
	moveHeld := func(stmt, newStatus string) error {
		items, err := queryItems(ctx, tx, q.Get("items_of"), c.ReservationID)
		if err != nil {
			return fmt.Errorf("items: %w", err)
		}
		if ok, err := move(stmt, items); err != nil {
			return err
		} else if !ok {
			return errors.New("a SKU holds fewer reserved units than the reservation: the counters disagree with the ledger")
		}
		return finish(newStatus, false)
	}

	switch c.Action {
	case inventory.Reserve:
		switch status {
		case statusNew:
			return inventory.Success, "", func() error {
				items := mergeItems(c.Items)
				if ok, err := move("sku_reserve", items); err != nil {
					return err
				} else if !ok {
					return errShort
				}
				for _, it := range items {
					if _, err := tx.ExecContext(ctx, q.Get("items_insert"), c.ReservationID, it.SKU, it.Qty); err != nil {
						return fmt.Errorf("items: %w", err)
					}
				}
				return finish(StatusReserved, false)
			}
		case StatusReleased:
			return inventory.Rejected, ReasonReleased, nil
		default: // RESERVED, CONFIRMED
			return inventory.AlreadyDone, "", nil
		}
	case inventory.Release:
		switch status {
		case statusNew:
			// A release overtook its reserve (or the reserve never
			// came): the tombstone makes a late reserve fail.
			return inventory.AlreadyDone, "", func() error { return finish(StatusReleased, true) }
		case StatusReserved:
			return inventory.Success, "", func() error { return moveHeld("sku_release", StatusReleased) }
		case StatusReleased:
			return inventory.AlreadyDone, "", nil
		default: // CONFIRMED
			return inventory.Rejected, ReasonConfirmed, nil
		}
	default: // Confirm
		switch status {
		case statusNew:
			return inventory.Rejected, ReasonUnknownReservation, nil
		case StatusReserved:
			return inventory.Success, "", func() error { return moveHeld("sku_confirm", StatusConfirmed) }
		case StatusReleased:
			return inventory.Rejected, ReasonReleased, nil
		default: // CONFIRMED
			return inventory.AlreadyDone, "", nil
		}
	}
}

// errShort rolls back a reserve short of stock on one of its SKUs.
var errShort = errors.New("reference: insufficient stock")

// mergeItems sums the lines of one SKU and sorts them by SKU.
func mergeItems(items []inventory.Item) []inventory.Item {
	sum := map[string]int64{}
	for _, it := range items {
		sum[it.SKU] += it.Qty
	}
	out := make([]inventory.Item, 0, len(sum))
	for sku, qty := range sum {
		out = append(out, inventory.Item{SKU: sku, Qty: qty})
	}
	sortItems(out)
	return out
}

func sortItems(items []inventory.Item) {
	slices.SortFunc(items, func(a, b inventory.Item) int { return strings.Compare(a.SKU, b.SKU) })
}
