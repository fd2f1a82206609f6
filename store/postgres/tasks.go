package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// queueTasks queues the insert of ef's stock tasks on b.
func queueTasks(b *pgx.Batch, ef core.Effects) {
	if len(ef.Tasks) == 0 {
		return
	}
	n := len(ef.Tasks)
	ids, orders, actions, reservations, items := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, t := range ef.Tasks {
		ids[i], orders[i], actions[i], reservations[i], items[i] = t.ID, t.OrderID, string(t.Action), t.ReservationID, string(t.Items)
	}
	due := ef.TasksDue
	if due.IsZero() {
		due = ef.Now
	}
	b.Queue(q.Get("insert_tasks"), ef.Now, ids, orders, actions, reservations, items, due)
}

// scanTask reads the column list every task query returns.
func scanTask(r pgx.CollectableRow) (store.ClaimedTask, error) {
	var (
		t              store.ClaimedTask
		action, status string
		items          string
		done, dead     *time.Time
	)
	err := r.Scan(&t.ID, &t.OrderID, &action, &t.ReservationID, &items, &status, &t.Attempts, &t.Failures,
		&t.NextAt, &t.Since, &t.CreatedAt, &done, &dead, &t.Result, &t.LastError)
	if err != nil {
		return t, err
	}
	t.Action, t.Status = order.TaskAction(action), order.TaskStatus(status)
	t.NextAt, t.Since, t.CreatedAt = t.NextAt.UTC(), t.Since.UTC(), t.CreatedAt.UTC()
	if done != nil {
		t.DoneAt = done.UTC()
	}
	if dead != nil {
		t.DeadAt = dead.UTC()
	}
	if err := json.Unmarshal([]byte(items), &t.Items); err != nil {
		return t, fmt.Errorf("items of task %s: %w", t.ID, err)
	}
	return t, nil
}

// ClaimTasks implements core.Executor.
func (e executor) ClaimTasks(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedTask, error) {
	rows, err := e.db.Query(ctx, q.Get("claim_tasks"), now, leaseUntil, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, scanTask)
	return out, interpretError(err)
}

// SettleTask implements core.Executor.
func (e executor) SettleTask(ctx context.Context, o store.TaskOutcome, now, nextAt time.Time) error {
	_, err := e.exec(ctx, "settle_task", o.ID, o.Attempts, string(core.TaskStatusOf(o)), now, nextAt, o.Result, o.Error)
	return err
}

// ListTasks implements core.Executor.
func (e executor) ListTasks(ctx context.Context, p store.ListTasksParams) ([]order.StockTask, error) {
	rows, err := e.db.Query(ctx, q.Get("list_tasks"), p.Dead, p.OrderID, p.After, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.StockTask, error) {
		t, err := scanTask(r)
		return t.StockTask, err
	})
	return out, interpretError(err)
}

// TaskRefs implements core.Executor.
func (e executor) TaskRefs(ctx context.Context, after string, limit int) ([]store.TaskRef, error) {
	rows, err := e.db.Query(ctx, q.Get("task_refs"), after, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.TaskRef, error) {
		var t store.TaskRef
		var action string
		err := r.Scan(&t.ID, &t.OrderID, &action, &t.ReservationID)
		t.Action = order.TaskAction(action)
		return t, err
	})
	return out, interpretError(err)
}

// RetryTasks implements core.Executor.
func (e executor) RetryTasks(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	tag, err := e.exec(ctx, "retry_tasks", now, p.IDs, p.AllDead)
	return tag.RowsAffected(), err
}

// TaskStats implements core.Executor.
func (e executor) TaskStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest *time.Time
	if err := e.scan(ctx, "task_stats", nil, &st.Pending, &st.Dead, &oldest); err != nil {
		return st, err
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	return st, nil
}

// LockTask implements core.Executor.
func (e executor) LockTask(ctx context.Context, reservation string, action order.TaskAction) (store.ClaimedTask, error) {
	return e.oneTask(ctx, "lock_task", reservation, string(action))
}

// LeaseTask implements core.Executor.
func (e executor) LeaseTask(ctx context.Context, id string, leaseUntil time.Time) (store.ClaimedTask, error) {
	return e.oneTask(ctx, "lease_task", id, leaseUntil)
}

// oneTask runs a query returning at most one task; store.ErrNotFound when none.
func (e executor) oneTask(ctx context.Context, name string, args ...any) (store.ClaimedTask, error) {
	rows, err := e.db.Query(ctx, q.Get(name), args...)
	if err != nil {
		return store.ClaimedTask{}, interpretError(err)
	}
	ts, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return store.ClaimedTask{}, interpretError(err)
	}
	if len(ts) == 0 {
		return store.ClaimedTask{}, store.ErrNotFound
	}
	return ts[0], nil
}
