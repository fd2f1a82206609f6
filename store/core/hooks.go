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

// hook runs the hook of event for each of os in tx, in order; the first
// that fails is a *store.HookError naming its order (and the transaction is
// then rolled back: on PostgreSQL the hook's failed statement has aborted it).
func (s *Store) hook(ctx context.Context, tx *Tx, event string, os ...order.Order) error {
	if s.hooks == nil || !s.hooks.Has(event) {
		return nil
	}
	for _, o := range os {
		if err := s.hooks.Run(ctx, tx.ExecutorTx, event, o); err != nil {
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
