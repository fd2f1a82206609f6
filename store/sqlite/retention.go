package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of retention (core.RetentionExecutor).

var _ core.RetentionExecutor = executor{}

// LockRetention implements core.RetentionExecutor: one writer, so the
// transaction is the turn.
func (e executor) LockRetention(context.Context) (bool, error) { return true, nil }

// LockFinished implements core.RetentionExecutor: the rows are the
// writer's until it commits.
func (e executor) LockFinished(ctx context.Context, status order.Status, before, attemptedBefore time.Time, limit int) ([]string, error) {
	name := "lock_finished_" + strings.ToLower(string(status))
	args := []any{ms(before), limit}
	if status == order.Cancelled {
		args = append(args, ms(attemptedBefore))
	}
	return sqlrows.Collect(ctx, e.db, q.Get(name), args, func(r *sql.Rows) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
}

// CarryLedger implements core.RetentionExecutor.
func (e executor) CarryLedger(ctx context.Context, ids []string, now time.Time) error {
	_, err := e.exec(ctx, "carry_ledger", jsonArray(idList(ids)), ms(now))
	return err
}

// DeleteOwned implements core.RetentionExecutor.
func (e executor) DeleteOwned(ctx context.Context, table string, ids []string) (int64, error) {
	return e.exec(ctx, "retention_delete_"+table, jsonArray(idList(ids)))
}

// DeleteDone implements core.RetentionExecutor.
func (e executor) DeleteDone(ctx context.Context, table string, before time.Time, limit int) (int64, error) {
	return e.exec(ctx, "retention_done_"+table, ms(before), limit)
}

// OldestFinished implements core.RetentionExecutor.
func (e executor) OldestFinished(ctx context.Context) (time.Time, bool, error) {
	var paid, cancelled sql.NullInt64
	if err := e.db.QueryRowContext(ctx, q.Get("oldest_finished")).Scan(&paid, &cancelled); err != nil {
		return time.Time{}, false, err
	}
	switch {
	case paid.Valid && cancelled.Valid:
		return fromMS(min(paid.Int64, cancelled.Int64)), true, nil
	case paid.Valid:
		return fromMS(paid.Int64), true, nil
	case cancelled.Valid:
		return fromMS(cancelled.Int64), true, nil
	}
	return time.Time{}, false, nil
}
