package postgres

// A create in one round trip (core.CreateExecutor): the create_order
// statement, led by create_savepoint in a caller's transaction, in one
// pipeline — and, in lapse's own transaction, in the round trip of its BEGIN
// (pgTx). The core decides from what the statement found (store/core's
// onetrip.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store/core"
)

var (
	_ core.CreateExecutor = txExecutor{}
	_ core.CreateExecutor = callerExecutor{}
)

// SendCreate implements core.CreateExecutor.
func (t txExecutor) SendCreate(ctx context.Context, a core.CreateArgs) (core.CreateState, error) {
	return t.sendCreate(ctx, a)
}

// UndoCreate implements core.CreateExecutor.
func (t txExecutor) UndoCreate(ctx context.Context) error { return t.undoCreate(ctx) }

// SendCreate implements core.CreateExecutor.
func (c callerExecutor) SendCreate(ctx context.Context, a core.CreateArgs) (core.CreateState, error) {
	return c.sendCreate(ctx, a)
}

// UndoCreate implements core.CreateExecutor.
func (c callerExecutor) UndoCreate(ctx context.Context) error { return c.undoCreate(ctx) }

// sendCreate runs a's create in one round trip. Only a transaction's
// executor calls it.
func (e executor) sendCreate(ctx context.Context, a core.CreateArgs) (core.CreateState, error) {
	o := a.Order
	skus, qtys := make([]string, len(o.Items)), make([]int64, len(o.Items))
	for i, it := range o.Items {
		skus[i], qtys[i] = it.SKU, it.Qty
	}
	var now *time.Time
	if !a.Now.IsZero() {
		now = &a.Now
	}
	st := core.CreateState{GroupState: core.GroupState{
		Claimed: map[string]bool{}, Existing: map[string]bool{}, Available: make(map[string]int64, len(skus)),
	}}
	var b pgx.Batch
	if a.Group {
		b.Queue(q.Get("group_lock_wait"), groupLockWait)
	}
	if a.Guard {
		b.Queue(q.Get("create_savepoint"))
	}
	b.Queue(q.Get("create_order"), now, a.Key.Key, a.Key.RequestHash, o.ID, o.AmountCents, o.Currency,
		a.ExpiresIn, a.CancelIn, o.ReservationID, skus, qtys, a.Reserve,
		a.Event.ID, a.EventType, a.PayloadParts[:]).QueryRow(func(row pgx.Row) error {
		var (
			at                time.Time
			claimed, inserted bool
			heldSKUs          []string
			units             []int64
			reserved          int64
		)
		if err := row.Scan(&at, &claimed, &inserted, &heldSKUs, &units, &reserved); err != nil {
			return err
		}
		if len(heldSKUs) != len(units) {
			return fmt.Errorf("create_order returned %d SKUs and %d counts", len(heldSKUs), len(units))
		}
		st.Now, st.Reserved = at.UTC(), int(reserved)
		st.Claimed[a.Key.Key] = claimed
		// The id is taken when the order was not written although nothing
		// held it back: no key, or the key taken.
		st.Existing[o.ID] = !inserted && (a.Key.Key == "" || claimed)
		for i, sku := range heldSKUs {
			st.Available[sku] = units[i]
		}
		return nil
	})
	// Statements that must go with the create, in the same round trip,
	// queue here: they run after it, inside its savepoint, so an undone
	// create takes them back too.
	if a.Tell {
		b.Queue(q.Get("notify_created"), o.ID)
	}
	if err := e.send(ctx, &b); err != nil {
		return core.CreateState{}, err
	}
	return st, nil
}

// undoCreate rolls back to the create's savepoint and releases it, in one
// round trip.
func (e executor) undoCreate(ctx context.Context) error {
	var b pgx.Batch
	b.Queue(q.Get("create_undo"))
	b.Queue(q.Get("create_release"))
	return e.send(ctx, &b)
}
