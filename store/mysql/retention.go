package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of retention (core.RetentionExecutor). Lists of order ids
// go in chunks of at most maxList placeholders.

var _ core.RetentionExecutor = executor{}

// LockRetention implements core.RetentionExecutor.
func (e executor) LockRetention(ctx context.Context) (bool, error) {
	var id int
	err := e.db.QueryRowContext(ctx, q.Get("lock_retention")).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// LockFinished implements core.RetentionExecutor.
func (e executor) LockFinished(ctx context.Context, status order.Status, before, attemptedBefore time.Time, limit int) ([]string, error) {
	name := "lock_finished_" + strings.ToLower(string(status))
	if status == order.Cancelled {
		return e.queryIDs(ctx, q.Get(name), before, attemptedBefore, limit)
	}
	return e.queryIDs(ctx, q.Get(name), before, limit)
}

// CarryLedger implements core.RetentionExecutor: chunk by chunk, each
// adding to the totals (the chunks come in id order, the SKUs of each in
// byte order).
func (e executor) CarryLedger(ctx context.Context, ids []string, now time.Time) error {
	for _, chunk := range chunks(ids) {
		if _, err := e.db.ExecContext(ctx, each(q.Get("carry_ledger"), len(chunk)), args([]any{now}, chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// DeleteOwned implements core.RetentionExecutor.
func (e executor) DeleteOwned(ctx context.Context, table string, ids []string) (int64, error) {
	var n int64
	for _, chunk := range chunks(ids) {
		k, err := e.affected(ctx, each(q.Get("retention_delete_"+table), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// DeleteDone implements core.RetentionExecutor.
func (e executor) DeleteDone(ctx context.Context, table string, before time.Time, limit int) (int64, error) {
	return e.affected(ctx, q.Get("retention_done_"+table), before, limit)
}

// OldestFinished implements core.RetentionExecutor.
func (e executor) OldestFinished(ctx context.Context) (time.Time, bool, error) {
	var paid, cancelled sql.NullTime
	if err := e.db.QueryRowContext(ctx, q.Get("oldest_finished")).Scan(&paid, &cancelled); err != nil {
		return time.Time{}, false, err
	}
	switch {
	case paid.Valid && cancelled.Valid:
		if cancelled.Time.Before(paid.Time) {
			return cancelled.Time.UTC(), true, nil
		}
		return paid.Time.UTC(), true, nil
	case paid.Valid:
		return paid.Time.UTC(), true, nil
	case cancelled.Valid:
		return cancelled.Time.UTC(), true, nil
	}
	return time.Time{}, false, nil
}
