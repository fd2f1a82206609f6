package core

// Hooks of an embedding service (docs/embedding.md): code of the shop's,
// run inside the transaction that makes a transition, before its commit, so
// that the shop's own order row moves in the same commit as lapse's.

import (
	"context"
	"errors"
	"slices"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Hooks runs an embedding service's hooks; a driver's typed Hooks
// (postgres.Hooks, mysql.Hooks) stand behind it and unwrap tx to the native
// transaction — lapse's own, or the caller's (InTx).
type Hooks interface {
	// Has reports whether a hook is set for event (store.HookCancelled, …).
	Has(event string) bool
	// Run runs the hook of event for o on tx.
	Run(ctx context.Context, tx ExecutorTx, event string, o order.Order) error
}

// BatchHooks is optionally implemented by Hooks that take the orders of a
// batch at once (postgres.Hooks.OnCancelledMany): one statement for the
// batch instead of one per order.
type BatchHooks interface {
	// RunMany runs the batch hook of event for os on tx; handled is false
	// when event has none (the core then runs Run per order).
	RunMany(ctx context.Context, tx ExecutorTx, event string, os []order.Order) (handled bool, err error)
}

// errBatchHook is a batch hook that failed: which order made it fail is not
// known, so the batch runs again with the hook one order at a time.
type errBatchHook struct{ err error }

func (e errBatchHook) Error() string { return "a batch hook failed: " + e.err.Error() }
func (e errBatchHook) Unwrap() error { return e.err }

// hook runs the hook of event for os in tx: a batch hook once for them all
// (unless oneByOne), else each order's in order. The first that fails is a
// *store.HookError naming its order, or errBatchHook when a batch hook
// failed for several (the transaction is then rolled back: on PostgreSQL the
// hook's failed statement has aborted it).
func (s *Store) hook(ctx context.Context, tx *Tx, event string, oneByOne bool, os ...order.Order) error {
	if s.hooks == nil || !s.hooks.Has(event) {
		return nil
	}
	bh, batch := s.hooks.(BatchHooks)
	if batch && !oneByOne && len(os) > 1 {
		if handled, err := bh.RunMany(ctx, tx.ExecutorTx, event, os); handled {
			if err != nil {
				return errBatchHook{err}
			}
			return nil
		}
	}
	for _, o := range os {
		var handled bool
		var err error
		if batch {
			handled, err = bh.RunMany(ctx, tx.ExecutorTx, event, []order.Order{o})
		}
		if !handled {
			err = s.hooks.Run(ctx, tx.ExecutorTx, event, o)
		}
		if err != nil {
			return &store.HookError{OrderID: o.ID, Event: event, Err: err}
		}
	}
	return nil
}

// hookFailed reports the order whose OnCancelled hook failed in a batch, so
// the batch can run again without it.
func hookFailed(err error) (*store.HookError, bool) {
	var he *store.HookError
	if !errors.As(err, &he) || he.Event != store.HookCancelled {
		return nil, false
	}
	return he, true
}

// without returns ids without id.
func without(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(x string) bool { return x == id })
}
