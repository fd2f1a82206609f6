package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// Hooks are an embedding service's code, run inside the transaction that
// makes a transition, before its commit: lapse's batched timeout cancel, a
// buyer cancel, a payment — or the caller's own transaction, through the
// …Tx methods (InTx). That is how the shop's own order row (and its own
// stock) moves in the same commit as lapse's. o is the order as the
// transition left it.
//
// The rules are postgres.Hooks': the hook runs after lapse's order row is
// updated and before its stock rows; it may run more than once and must be
// idempotent (`UPDATE orders SET status = 'cancelled' WHERE id = ? AND
// status = 'pending'`); it must not call the network; an error rolls back
// that one order's transition (a batch of timeout cancels commits without
// it, and the order is tried again with backoff). tx is the caller's own
// transaction, or lapse's own, which the hook must not commit or roll back.
type Hooks struct {
	OnCancelled      func(ctx context.Context, tx *sql.Tx, o order.Order) error
	OnPaid           func(ctx context.Context, tx *sql.Tx, o order.Order) error
	OnRefundRequired func(ctx context.Context, tx *sql.Tx, o order.Order) error
	// OnCancelledMany, when set, runs instead of OnCancelled: once for all
	// the orders a transaction cancels — a whole batch of timeout cancels in
	// one statement of the shop's (`… WHERE id = ANY($1)`), one round trip
	// instead of one per order. When it fails for a batch, the batch runs
	// again with it called one order at a time, to find the order that
	// makes it fail; the rules of OnCancelled hold.
	OnCancelledMany func(ctx context.Context, tx *sql.Tx, os []order.Order) error
}

// runner is Hooks as the core runs them, or nil when none is set.
func (h Hooks) runner() core.Hooks {
	if h.OnCancelled == nil && h.OnPaid == nil && h.OnRefundRequired == nil && h.OnCancelledMany == nil {
		return nil
	}
	return hookRunner{h}
}

type hookRunner struct{ h Hooks }

func (r hookRunner) fn(event string) func(context.Context, *sql.Tx, order.Order) error {
	switch event {
	case store.HookCancelled:
		return r.h.OnCancelled
	case store.HookPaid:
		return r.h.OnPaid
	case store.HookRefundRequired:
		return r.h.OnRefundRequired
	}
	return nil
}

// Has implements core.Hooks.
func (r hookRunner) Has(event string) bool {
	return r.fn(event) != nil || (event == store.HookCancelled && r.h.OnCancelledMany != nil)
}

// Run implements core.Hooks.
func (r hookRunner) Run(ctx context.Context, etx core.ExecutorTx, event string, o order.Order) error {
	tx, err := nativeTx(etx)
	if err != nil {
		return err
	}
	return r.fn(event)(ctx, tx, o)
}

// RunMany implements core.BatchHooks: OnCancelledMany.
func (r hookRunner) RunMany(ctx context.Context, etx core.ExecutorTx, event string, os []order.Order) (bool, error) {
	if event != store.HookCancelled || r.h.OnCancelledMany == nil {
		return false, nil
	}
	tx, err := nativeTx(etx)
	if err != nil {
		return true, err
	}
	return true, r.h.OnCancelledMany(ctx, tx, os)
}

// nativeTx is the transaction a hook gets: the caller's own, or lapse's.
func nativeTx(etx core.ExecutorTx) (*sql.Tx, error) {
	switch t := etx.(type) {
	case callerTxn:
		return t.tx, nil
	case txn:
		return t.tx, nil
	}
	return nil, fmt.Errorf("mysql: a hook in a transaction of type %T", etx)
}
