package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of retention (core.RetentionExecutor).

var _ core.RetentionExecutor = executor{}

// LockRetention implements core.RetentionExecutor.
func (e executor) LockRetention(ctx context.Context) (bool, error) {
	var id int
	err := e.scan(ctx, "lock_retention", nil, &id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// LockFinished implements core.RetentionExecutor.
func (e executor) LockFinished(ctx context.Context, status order.Status, before, attemptedBefore time.Time, limit int) ([]string, error) {
	name := "lock_finished_" + strings.ToLower(string(status))
	args := []any{before, limit}
	if status == order.Cancelled {
		args = append(args, attemptedBefore)
	}
	rows, err := e.db.Query(ctx, q.Get(name), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, interpretError(err)
}

// CarryLedger implements core.RetentionExecutor.
func (e executor) CarryLedger(ctx context.Context, ids []string, now time.Time) error {
	_, err := e.exec(ctx, "carry_ledger", ids, now)
	return err
}

// DeleteOwned implements core.RetentionExecutor.
func (e executor) DeleteOwned(ctx context.Context, table string, ids []string) (int64, error) {
	tag, err := e.exec(ctx, "retention_delete_"+table, ids)
	return tag.RowsAffected(), err
}

// DeleteDone implements core.RetentionExecutor.
func (e executor) DeleteDone(ctx context.Context, table string, before time.Time, limit int) (int64, error) {
	tag, err := e.exec(ctx, "retention_done_"+table, before, limit)
	return tag.RowsAffected(), err
}

// OldestFinished implements core.RetentionExecutor.
func (e executor) OldestFinished(ctx context.Context) (time.Time, bool, error) {
	var t *time.Time
	if err := e.scan(ctx, "oldest_finished", nil, &t); err != nil || t == nil {
		return time.Time{}, false, err
	}
	return t.UTC(), true, nil
}
