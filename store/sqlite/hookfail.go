package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/store"
)

// NoteHookFailure implements core.Executor.
func (e executor) NoteHookFailure(ctx context.Context, orderID, event, lastError string, now time.Time) (int, time.Time, error) {
	var n int
	var first int64
	err := e.db.QueryRowContext(ctx, q.Get("hook_failure_note"), orderID, event, lastError, ms(now)).Scan(&n, &first)
	return n, fromMS(first), err
}

// SetHookRetry implements core.Executor.
func (e executor) SetHookRetry(ctx context.Context, orderID, event string, nextAt time.Time) error {
	_, err := e.exec(ctx, "hook_failure_retry", orderID, event, ms(nextAt))
	return err
}

// HookFailures implements core.Executor.
func (e executor) HookFailures(ctx context.Context, limit int) ([]store.HookFailure, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("hook_failures"), []any{limit}, func(r *sql.Rows) (store.HookFailure, error) {
		var f store.HookFailure
		var first, last, next int64
		err := r.Scan(&f.OrderID, &f.Event, &f.Attempts, &f.LastError, &first, &last, &next)
		f.FirstFailedAt, f.LastFailedAt, f.NextAt = fromMS(first), fromMS(last), fromMS(next)
		return f, err
	})
}

// CountHookFailing implements core.DashboardExecutor.
func (e executor) CountHookFailing(ctx context.Context, limit int64) (int64, error) {
	return e.count(ctx, "count_hook_failing", limit)
}
