package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/store"
)

// NoteHookFailure implements core.Executor: the upsert, then the record read
// back in the same transaction (MySQL has no RETURNING).
func (e executor) NoteHookFailure(ctx context.Context, orderID, event, lastError string, now time.Time) (int, time.Time, error) {
	if _, err := e.db.ExecContext(ctx, q.Get("hook_failure_note"), orderID, event, lastError, now, now, now); err != nil {
		return 0, time.Time{}, interpretError(err, nil)
	}
	var n int
	var first time.Time
	err := e.db.QueryRowContext(ctx, q.Get("hook_failure_read"), orderID, event).Scan(&n, &first)
	return n, first.UTC(), interpretError(err, nil)
}

// SetHookRetry implements core.Executor.
func (e executor) SetHookRetry(ctx context.Context, orderID, event string, nextAt time.Time) error {
	_, err := e.db.ExecContext(ctx, q.Get("hook_failure_retry"), nextAt, orderID, event)
	return interpretError(err, nil)
}

// HookFailures implements core.Executor.
func (e executor) HookFailures(ctx context.Context, limit int) ([]store.HookFailure, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("hook_failures"), []any{limit}, func(r *sql.Rows) (store.HookFailure, error) {
		var f store.HookFailure
		err := r.Scan(&f.OrderID, &f.Event, &f.Attempts, &f.LastError, &f.FirstFailedAt, &f.LastFailedAt, &f.NextAt)
		f.FirstFailedAt, f.LastFailedAt, f.NextAt = f.FirstFailedAt.UTC(), f.LastFailedAt.UTC(), f.NextAt.UTC()
		return f, err
	})
}

// CountHookFailing implements core.DashboardExecutor.
func (e executor) CountHookFailing(ctx context.Context, limit int64) (int64, error) {
	return e.count(ctx, "count_hook_failing", limit)
}

// clearHookFailures deletes the records of ids (Effects.HooksHeld).
func (e executor) clearHookFailures(ctx context.Context, ids []string) error {
	for _, chunk := range chunks(ids) {
		if _, err := e.db.ExecContext(ctx, each(q.Get("hook_failures_clear"), len(chunk)), args(nil, chunk)...); err != nil {
			return interpretError(err, nil)
		}
	}
	return nil
}
