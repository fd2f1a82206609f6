package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// insertTasks writes ef's stock tasks, maxList to a statement.
func (e executor) insertTasks(ctx context.Context, ef core.Effects) error {
	due := ef.TasksDue
	if due.IsZero() {
		due = ef.Now
	}
	for _, chunk := range chunks(ef.Tasks) {
		a := make([]any, 0, 8*len(chunk))
		for _, t := range chunk {
			a = append(a, t.ID, t.OrderID, string(t.Action), t.ReservationID, string(t.Items), due, ef.Now, ef.Now)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("insert_tasks"), len(chunk)), a...); err != nil {
			return fmt.Errorf("stock tasks: %w", interpretError(err, core.ErrMovedTwice))
		}
	}
	return nil
}

func scanTask(r *sql.Rows) (store.ClaimedTask, error) {
	var (
		t                     store.ClaimedTask
		action, status, items string
		done, dead            sql.NullTime
	)
	err := r.Scan(&t.ID, &t.OrderID, &action, &t.ReservationID, &items, &status, &t.Attempts, &t.Failures,
		&t.NextAt, &t.Since, &t.CreatedAt, &done, &dead, &t.Result, &t.LastError)
	if err != nil {
		return t, err
	}
	t.Action, t.Status = order.TaskAction(action), order.TaskStatus(status)
	t.NextAt, t.Since, t.CreatedAt = t.NextAt.UTC(), t.Since.UTC(), t.CreatedAt.UTC()
	if done.Valid {
		t.DoneAt = done.Time.UTC()
	}
	if dead.Valid {
		t.DeadAt = dead.Time.UTC()
	}
	if err := json.Unmarshal([]byte(items), &t.Items); err != nil {
		return t, fmt.Errorf("items of task %s: %w", t.ID, err)
	}
	return t, nil
}

// ClaimTasks implements core.Executor: select and lock, lease, read back
// (MySQL has no UPDATE … RETURNING).
func (e executor) ClaimTasks(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedTask, error) {
	ids, err := sqlrows.Collect(ctx, e.db, q.Get("claim_tasks_select"), []any{now, limit}, func(r *sql.Rows) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if _, err := e.db.ExecContext(ctx, each(q.Get("claim_tasks_lease"), len(ids)), args([]any{leaseUntil}, ids)...); err != nil {
		return nil, err
	}
	return sqlrows.Collect(ctx, e.db, each(q.Get("tasks_by_id"), len(ids)), args(nil, ids), scanTask)
}

// SettleTask implements core.Executor.
func (e executor) SettleTask(ctx context.Context, o store.TaskOutcome, now, nextAt time.Time) error {
	st := string(core.TaskStatusOf(o))
	_, err := e.db.ExecContext(ctx, q.Get("settle_task"), st, nextAt, o.Result, o.Error, st, st, now, st, now, o.ID, o.Attempts)
	return err
}

// ListTasks implements core.Executor.
func (e executor) ListTasks(ctx context.Context, p store.ListTasksParams) ([]order.StockTask, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_tasks"), []any{p.OrderID, p.OrderID, p.Dead, p.After, p.Limit}, func(r *sql.Rows) (order.StockTask, error) {
		t, err := scanTask(r)
		return t.StockTask, err
	})
}

// TaskRefs implements core.Executor.
func (e executor) TaskRefs(ctx context.Context, after string, limit int) ([]store.TaskRef, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("task_refs"), []any{after, limit}, func(r *sql.Rows) (store.TaskRef, error) {
		var t store.TaskRef
		var action string
		err := r.Scan(&t.ID, &t.OrderID, &action, &t.ReservationID)
		t.Action = order.TaskAction(action)
		return t, err
	})
}

// RetryTasks implements core.Executor.
func (e executor) RetryTasks(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	if p.AllDead {
		return e.affected(ctx, q.Get("retry_dead_tasks"), now, now)
	}
	var n int64
	for _, chunk := range chunks(p.IDs) {
		k, err := e.affected(ctx, each(q.Get("retry_tasks"), len(chunk)), args([]any{now, now}, chunk)...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// TaskStats implements core.Executor.
func (e executor) TaskStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullTime
	err := e.db.QueryRowContext(ctx, q.Get("task_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = oldest.Time.UTC()
	}
	return st, err
}

// LockTask implements core.Executor.
func (e executor) LockTask(ctx context.Context, reservation string, action order.TaskAction) (store.ClaimedTask, error) {
	return e.oneTask(ctx, q.Get("lock_task"), reservation, string(action))
}

// LeaseTask implements core.Executor: the update, then the row read back.
func (e executor) LeaseTask(ctx context.Context, id string, leaseUntil time.Time) (store.ClaimedTask, error) {
	if _, err := e.db.ExecContext(ctx, q.Get("lease_task"), leaseUntil, id); err != nil {
		return store.ClaimedTask{}, err
	}
	return e.oneTask(ctx, each(q.Get("tasks_by_id"), 1), id)
}

func (e executor) oneTask(ctx context.Context, query string, args ...any) (store.ClaimedTask, error) {
	ts, err := sqlrows.Collect(ctx, e.db, query, args, scanTask)
	if err != nil {
		return store.ClaimedTask{}, err
	}
	if len(ts) == 0 {
		return store.ClaimedTask{}, store.ErrNotFound
	}
	return ts[0], nil
}
