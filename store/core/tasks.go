package core

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The stock tasks' operations. Tasks are written by the transitions
// themselves (NewEffects); what is decided here is the order of steps of a
// claim, a settle and an operator's retry, and their transactions.

// The steps the backlogs of claimed work share — the stock tasks, the
// order-service commands, the refunds: a claim, a settle's transaction and
// an operator's action, each on the store's clock. What is claimed, and
// how each item settles, are the backlog's.

// onClock runs fn in a transaction of its own, with the store's time.
func (s *Store) onClock(ctx context.Context, fn func(tx *Tx, now time.Time) error) error {
	return s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return fn(tx, now)
	})
}

// claimOn runs one claim of a backlog (what: "tasks", "commands",
// "refunds") in a transaction of its own: claim leases up to p.Limit items
// until the store's now + p.Lease, and each it returns is stamped with the
// claim's time (claimedAt: the dispatcher measures an item's age on the
// store's clock with it).
func claimOn[T any](ctx context.Context, s *Store, what string, p store.ClaimTasksParams, claimedAt func(*T) *time.Time,
	claim func(tx *Tx, now, leaseUntil time.Time) ([]T, error)) ([]T, error) {
	if p.Limit < 1 || p.Lease <= 0 {
		return nil, fmt.Errorf("claim %s: limit %d, lease %s: %w", what, p.Limit, p.Lease, store.ErrInvalid)
	}
	var out []T
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		var err error
		out, err = claim(tx, now, now.Add(p.Lease))
		for i := range out {
			*claimedAt(&out[i]) = now
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", what, err)
	}
	return out, nil
}

// inLockOrder is a copy of a settle's batch sorted by compare, which
// orders it by its orders' ids first: the lock order of every batch, so
// that two settles never wait on each other the other way round.
func inLockOrder[T any](batch []T, compare func(a, b T) int) []T {
	batch = slices.Clone(batch)
	slices.SortStableFunc(batch, compare)
	return batch
}

// ClaimTasks implements store.Tasks.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimTasksParams) ([]store.ClaimedTask, error) {
	return claimOn(ctx, s, "stock tasks", p, func(t *store.ClaimedTask) *time.Time { return &t.ClaimedAt },
		func(tx *Tx, now, leaseUntil time.Time) ([]store.ClaimedTask, error) {
			return tx.ClaimTasks(ctx, p.Limit, now, leaseUntil)
		})
}

// SettleTasks implements store.Tasks: one transaction for the batch.
func (s *Store) SettleTasks(ctx context.Context, outcomes []store.TaskOutcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		for _, o := range outcomes {
			if o.Action == order.TaskReserve && (o.Done || o.Dead) {
				// A reserve the dispatcher resolved or gave up: the order
				// may never have been created, and then its stock (if an
				// earlier copy of the reserve was applied) goes back.
				if err := s.compensateIn(ctx, tx, o); err != nil {
					return fmt.Errorf("settle reserve task %s: %w", o.ID, err)
				}
				continue
			}
			if err := tx.SettleTask(ctx, o, now, now.Add(max(o.RetryIn, 0))); err != nil {
				return fmt.Errorf("settle task %s: %w", o.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle %d stock tasks: %w", len(outcomes), err)
	}
	return nil
}

// ListTasks implements store.Tasks.
func (s *Store) ListTasks(ctx context.Context, p store.ListTasksParams) ([]order.StockTask, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	out, err := s.d.ListTasks(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list stock tasks: %w", err)
	}
	return out, nil
}

// TaskRefs implements store.Tasks.
func (s *Store) TaskRefs(ctx context.Context, after string, limit int) ([]store.TaskRef, error) {
	if limit <= 0 {
		limit = 1000
	}
	out, err := s.d.TaskRefs(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list stock task refs after %q: %w", after, err)
	}
	return out, nil
}

// RetryTasks implements store.Tasks.
func (s *Store) RetryTasks(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	if len(p.IDs) == 0 && !p.AllDead {
		return 0, nil
	}
	var n int64
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		var err error
		n, err = tx.RetryTasks(ctx, p, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retry stock tasks: %w", err)
	}
	return n, nil
}

// TaskStats implements store.Tasks.
func (s *Store) TaskStats(ctx context.Context) (store.TaskStats, error) {
	return s.stats(ctx, "task", s.d.TaskStats)
}

// stats reads a backlog's counts with read (stock tasks, commands,
// refunds), stamped with the store's clock so that the oldest pending
// item's age is measured on it.
func (s *Store) stats(ctx context.Context, what string, read func(context.Context) (store.TaskStats, error)) (store.TaskStats, error) {
	now, err := s.nowOn(ctx, s.d)
	if err != nil {
		return store.TaskStats{}, fmt.Errorf("%s stats: %w", what, err)
	}
	st, err := read(ctx)
	if err != nil {
		return store.TaskStats{}, fmt.Errorf("%s stats: %w", what, err)
	}
	st.Now = now
	return st, nil
}

// orderTasks loads the stock tasks of o when another service holds its stock.
func (s *Store) orderTasks(ctx context.Context, o *order.Order) error {
	if !o.RemoteStock() {
		return nil
	}
	ts, err := s.d.ListTasks(ctx, store.ListTasksParams{OrderID: o.ID, Limit: 10})
	if err != nil {
		return err
	}
	o.Tasks = append([]order.StockTask{}, ts...)
	return nil
}

// TaskStatusOf is the status a settle of o leaves its task in.
func TaskStatusOf(o store.TaskOutcome) order.TaskStatus {
	switch {
	case o.Done:
		return order.TaskDone
	case o.Dead:
		return order.TaskDead
	}
	return order.TaskPending
}
