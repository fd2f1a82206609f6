package core

// Group commit of payments.
//
// A payment start (StartPayment) and a gateway's report (CompletePayment,
// FailPayment) each change one order, a payment attempt row or two, the
// stock of a success and an outbox row: a few statements, then a COMMIT
// that waits for its flush. On a store with one writer (SQLite) that COMMIT
// is most of the cost and every other write waits behind it. So, as creates
// are (group.go), payment operations that arrive while a group commits form
// the next group, up to Config.PaymentGroup, and one transaction commits
// them all.
//
// Each operation of a group runs the very function a lone one runs, in
// arrival order: it sees what the ones before it wrote (a start then the
// callback of the same order, a callback and its replay). A group runs
// first in one plain transaction; if an operation fails — a replay, an
// amount that does not match, an order no longer PENDING, an expired
// window — that transaction is rolled back and the group runs again with
// each operation behind a savepoint of its own, so the failed one is rolled
// back alone, its caller answered with its own error. The group
// shares one transaction, so one "now" (read on first use, as a lone
// transaction reads it), and every caller is answered only after the COMMIT
// that holds its change. A group the database refuses as a whole runs again
// one operation per transaction; one whose COMMIT is unknown answers every
// caller with that error, as a lone transaction would.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/lapsehq/lapse/internal/group"
)

// payFunc is one payment operation in tx. It sets its caller's results
// afresh on every run (a group may run again after a deadlock).
type payFunc func(ctx context.Context, tx *Tx) error

// payCall is one payment operation waiting for its group.
type payCall struct {
	ctx  context.Context
	fn   payFunc
	err  error
	done chan struct{}
}

// payGrouper queues payment operations and commits them in groups.
type payGrouper struct {
	s     *Store
	queue *group.Queue[*payCall]

	groups, grouped, fallbacks atomic.Int64
	isolated                   atomic.Int64 // groups run again behind savepoints
	waiting                    atomic.Int64 // calls not yet answered
}

func newPayGrouper(s *Store, size int) *payGrouper {
	g := &payGrouper{s: s}
	g.queue = group.New(size, g.run)
	return g
}

// payTx runs fn in a transaction: its group's, when payments are grouped.
func (s *Store) payTx(ctx context.Context, fn payFunc) error {
	if s.pays == nil {
		return s.withTx(ctx, TxOptions{}, func(tx *Tx) error { return fn(ctx, tx) })
	}
	c := &payCall{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.pays.waiting.Add(1)
	defer s.pays.waiting.Add(-1)
	s.pays.queue.Add(c)
	// Not also on ctx.Done(): the group may be committing this operation,
	// and its caller must not be told "failed" of a change that happened.
	// A group ends within group.Timeout.
	<-c.done
	return c.err
}

func (c *payCall) finish(err error) {
	c.err = err
	close(c.done)
}

// run commits one group and answers its callers.
func (g *payGrouper) run(calls []*payCall) {
	var live []*payCall
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.finish(err)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone: no savepoint, the caller's own transaction.
		c := live[0]
		c.finish(g.s.withTx(c.ctx, TxOptions{}, func(tx *Tx) error { return c.fn(c.ctx, tx) }))
		return
	}
	ctx, cancel := group.Context(live[0].ctx)
	errs, err := g.commit(ctx, live)
	cancel()
	switch {
	case err == nil:
		g.groups.Add(1)
		g.grouped.Add(int64(len(live)))
		for i, c := range live {
			c.finish(errs[i])
		}
	case g.s.d.Class(err) == ClassRefused:
		// Rolled back, nothing written: each operation alone gets the
		// answer that concerns it.
		g.fallbacks.Add(1)
		for _, c := range live {
			go func() {
				c.finish(g.s.withTx(c.ctx, TxOptions{}, func(tx *Tx) error { return c.fn(c.ctx, tx) }))
			}()
		}
	default:
		// The connection or the context failed: whether the COMMIT
		// happened is unknown, as it would be for a lone operation.
		for _, c := range live {
			c.finish(err)
		}
	}
}

// errGroupFailed rolls back a group run without savepoints in which an
// operation failed: the group runs again with them.
var errGroupFailed = errors.New("an operation of the group failed")

// commit runs the operations of calls in one transaction and gives back each
// one's error. An error of its own means the transaction was not committed
// (or not known to be).
//
// The group runs first without savepoints — they cost the single writer
// about a tenth of its time, and most groups have no failure to roll back.
// When an operation fails, that transaction is rolled back whole and the
// group runs again with each operation behind a savepoint of its own
// (commitIsolated). Every operation sets its caller's results afresh on
// each run, so the first run leaves nothing behind.
func (g *payGrouper) commit(ctx context.Context, calls []*payCall) ([]error, error) {
	err := g.s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		for _, c := range calls {
			if err := c.fn(ctx, tx); err != nil {
				return errGroupFailed
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return make([]error, len(calls)), nil
	case !errors.Is(err, errGroupFailed):
		return nil, err
	}
	g.isolated.Add(1)
	return g.commitIsolated(ctx, calls)
}

// commitIsolated runs the operations of calls in one transaction, each
// behind a savepoint: one that fails is rolled back alone.
func (g *payGrouper) commitIsolated(ctx context.Context, calls []*payCall) ([]error, error) {
	errs := make([]error, len(calls))
	err := g.s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		for i, c := range calls {
			if err := tx.Savepoint(ctx); err != nil {
				return fmt.Errorf("savepoint: %w", err)
			}
			errs[i] = c.fn(ctx, tx)
			if errs[i] != nil && g.s.d.Class(errs[i]) == ClassRetry {
				// A deadlock or a serialization failure: the database may
				// have rolled back more than this operation. The whole
				// group runs again.
				return errs[i]
			}
			if errs[i] != nil {
				if err := tx.RollbackToSavepoint(ctx); err != nil {
					return fmt.Errorf("roll back to savepoint: %w", err)
				}
			}
			if err := tx.ReleaseSavepoint(ctx); err != nil {
				return fmt.Errorf("release savepoint: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}
