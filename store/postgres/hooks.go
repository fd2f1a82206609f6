package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// Hooks are an embedding service's code, run inside the transaction that
// makes a transition, before its commit: lapse's batched timeout cancel, a
// buyer cancel, a payment — or the caller's own transaction, through the
// …Tx methods (InTx). That is how the shop's own order row (and its own
// stock) moves in the same commit as lapse's. o is the order as the
// transition left it (its status, its payment id).
//
// A hook runs after lapse's order row is updated (so locked) and before its
// stock rows: lock the shop's own rows in that order too (docs/embedding.md).
// It may run more than once — its transaction may be retried after a
// deadlock, or rolled back for another order's failed hook — so it must be
// idempotent: a guarded UPDATE, `UPDATE orders SET status = 'cancelled'
// WHERE id = $1 AND status = 'pending'`. It must not call the network: send
// that through lapse's events. A hook that returns an error rolls back that
// one order's transition: a batch of timeout cancels commits without it and
// the order is tried again with backoff (lapse_hook_failures_total); a
// payment or a buyer cancel answers the error.
type Hooks struct {
	OnCancelled      func(ctx context.Context, tx pgx.Tx, o order.Order) error
	OnPaid           func(ctx context.Context, tx pgx.Tx, o order.Order) error
	OnRefundRequired func(ctx context.Context, tx pgx.Tx, o order.Order) error
	// OnCancelledMany, when set, runs instead of OnCancelled: once for all
	// the orders a transaction cancels — a whole batch of timeout cancels in
	// one statement of the shop's (`… WHERE id = ANY($1)`), one round trip
	// instead of one per order. When it fails for a batch, the batch runs
	// again with it called one order at a time, to find the order that
	// makes it fail; the rules of OnCancelled hold.
	OnCancelledMany func(ctx context.Context, tx pgx.Tx, os []order.Order) error
}

// runner is Hooks as the core runs them, or nil when none is set.
func (h Hooks) runner() core.Hooks {
	if h.OnCancelled == nil && h.OnPaid == nil && h.OnRefundRequired == nil && h.OnCancelledMany == nil {
		return nil
	}
	return hookRunner{h}
}

type hookRunner struct{ h Hooks }

func (r hookRunner) fn(event string) func(context.Context, pgx.Tx, order.Order) error {
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

// Run implements core.Hooks: the hook gets the transaction as a pgx.Tx —
// the caller's own (InTx), or lapse's.
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

// nativeTx is the transaction a hook gets: the caller's own (InTx), or
// lapse's as a pgx.Tx.
func nativeTx(etx core.ExecutorTx) (pgx.Tx, error) {
	switch t := etx.(type) {
	case callerExecutor:
		return t.tx, nil
	case txExecutor:
		return hookTx{t.tx}, nil
	}
	return nil, fmt.Errorf("postgres: a hook in a transaction of type %T", etx)
}

// hookTx is lapse's own transaction as a hook sees it: a pgx.Tx whose
// statements run in it, and that the hook cannot end.
type hookTx struct{ t *pgTx }

var errHookEnds = errors.New("postgres: a hook runs in lapse's transaction: it cannot begin, commit or roll back")

func (h hookTx) Begin(context.Context) (pgx.Tx, error) { return nil, errHookEnds }
func (h hookTx) Commit(context.Context) error          { return errHookEnds }
func (h hookTx) Rollback(context.Context) error        { return errHookEnds }
func (h hookTx) LargeObjects() pgx.LargeObjects        { return pgx.LargeObjects{} }
func (h hookTx) Conn() *pgx.Conn                       { return h.t.conn.Conn() }

func (h hookTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := h.t.started(ctx); err != nil {
		return 0, err
	}
	return h.t.conn.CopyFrom(ctx, table, cols, src)
}

func (h hookTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return h.t.SendBatch(ctx, b)
}

func (h hookTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := h.t.started(ctx); err != nil {
		return nil, err
	}
	return h.t.conn.Conn().Prepare(ctx, name, sql)
}

func (h hookTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return h.t.Exec(ctx, sql, args...)
}

func (h hookTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return h.t.Query(ctx, sql, args...)
}

func (h hookTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return h.t.QueryRow(ctx, sql, args...)
}

var _ pgx.Tx = hookTx{}
