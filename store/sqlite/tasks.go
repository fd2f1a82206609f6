package sqlite

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

type taskRow struct {
	ID            string `json:"id"`
	OrderID       string `json:"order_id"`
	Action        string `json:"action"`
	ReservationID string `json:"reservation_id"`
	Items         string `json:"items"`
}

// insertTasks writes ef's stock tasks in one statement.
func (e executor) insertTasks(ctx context.Context, ef core.Effects) error {
	if len(ef.Tasks) == 0 {
		return nil
	}
	rows := make([]taskRow, len(ef.Tasks))
	for i, t := range ef.Tasks {
		rows[i] = taskRow{ID: t.ID, OrderID: t.OrderID, Action: string(t.Action), ReservationID: t.ReservationID, Items: string(t.Items)}
	}
	due := ef.TasksDue
	if due.IsZero() {
		due = ef.Now
	}
	if _, err := e.exec(ctx, "insert_tasks", ms(ef.Now), jsonArray(rows), ms(due)); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: %w", core.ErrMovedTwice, err)
		}
		return fmt.Errorf("stock tasks: %w", err)
	}
	return nil
}

func scanTask(r *sql.Rows) (store.ClaimedTask, error) {
	var (
		t                        store.ClaimedTask
		action, status, items    string
		nextAt, since, createdAt int64
		done, dead               sql.NullInt64
	)
	err := r.Scan(&t.ID, &t.OrderID, &action, &t.ReservationID, &items, &status, &t.Attempts, &t.Failures,
		&nextAt, &since, &createdAt, &done, &dead, &t.Result, &t.LastError)
	if err != nil {
		return t, err
	}
	t.Action, t.Status = order.TaskAction(action), order.TaskStatus(status)
	t.NextAt, t.Since, t.CreatedAt = fromMS(nextAt), fromMS(since), fromMS(createdAt)
	if done.Valid {
		t.DoneAt = fromMS(done.Int64)
	}
	if dead.Valid {
		t.DeadAt = fromMS(dead.Int64)
	}
	if err := json.Unmarshal([]byte(items), &t.Items); err != nil {
		return t, fmt.Errorf("items of task %s: %w", t.ID, err)
	}
	return t, nil
}

// ClaimTasks implements core.Executor.
func (e executor) ClaimTasks(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedTask, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("claim_tasks"), []any{ms(now), ms(leaseUntil), limit}, scanTask)
}

// SettleTask implements core.Executor.
func (e executor) SettleTask(ctx context.Context, o store.TaskOutcome, now, nextAt time.Time) error {
	_, err := e.exec(ctx, "settle_task", o.ID, o.Attempts, string(core.TaskStatusOf(o)), ms(now), ms(nextAt), o.Result, o.Error)
	return err
}

// ListTasks implements core.Executor.
func (e executor) ListTasks(ctx context.Context, p store.ListTasksParams) ([]order.StockTask, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_tasks"), []any{p.Dead, p.OrderID, p.After, p.Limit}, func(r *sql.Rows) (order.StockTask, error) {
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
	return e.exec(ctx, "retry_tasks", ms(now), jsonArray(idList(p.IDs)), p.AllDead)
}

// TaskStats implements core.Executor.
func (e executor) TaskStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullInt64
	err := e.db.QueryRowContext(ctx, q.Get("task_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = fromMS(oldest.Int64)
	}
	return st, err
}

// LockTask implements core.Executor.
func (e executor) LockTask(ctx context.Context, reservation string, action order.TaskAction) (store.ClaimedTask, error) {
	return e.oneTask(ctx, "lock_task", reservation, string(action))
}

// LeaseTask implements core.Executor.
func (e executor) LeaseTask(ctx context.Context, id string, leaseUntil time.Time) (store.ClaimedTask, error) {
	return e.oneTask(ctx, "lease_task", id, ms(leaseUntil))
}

func (e executor) oneTask(ctx context.Context, name string, args ...any) (store.ClaimedTask, error) {
	ts, err := sqlrows.Collect(ctx, e.db, q.Get(name), args, scanTask)
	if err != nil {
		return store.ClaimedTask{}, err
	}
	if len(ts) == 0 {
		return store.ClaimedTask{}, store.ErrNotFound
	}
	return ts[0], nil
}
