package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store"
)

// NoteHookFailure implements core.Executor.
func (e executor) NoteHookFailure(ctx context.Context, orderID, event, lastError string, now time.Time) (int, time.Time, error) {
	var n int
	var first time.Time
	err := e.scan(ctx, "hook_failure_note", []any{orderID, event, lastError, now}, &n, &first)
	return n, first.UTC(), err
}

// SetHookRetry implements core.Executor.
func (e executor) SetHookRetry(ctx context.Context, orderID, event string, nextAt time.Time) error {
	_, err := e.exec(ctx, "hook_failure_retry", orderID, event, nextAt)
	return err
}

// HookFailures implements core.Executor.
func (e executor) HookFailures(ctx context.Context, limit int) ([]store.HookFailure, error) {
	rows, err := e.db.Query(ctx, q.Get("hook_failures"), limit)
	if err != nil {
		return nil, interpretError(err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.HookFailure, error) {
		var f store.HookFailure
		err := r.Scan(&f.OrderID, &f.Event, &f.Attempts, &f.LastError, &f.FirstFailedAt, &f.LastFailedAt, &f.NextAt)
		f.FirstFailedAt, f.LastFailedAt, f.NextAt = f.FirstFailedAt.UTC(), f.LastFailedAt.UTC(), f.NextAt.UTC()
		return f, err
	})
	return fs, interpretError(err)
}

// CountHookFailing implements core.DashboardExecutor.
func (e executor) CountHookFailing(ctx context.Context, limit int64) (int64, error) {
	var n int64
	err := e.scan(ctx, "count_hook_failing", []any{limit}, &n)
	return n, err
}
