package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of order-service mode (core.CommandExecutor). MySQL has no
// UPDATE … RETURNING: as for the cancels and the stock tasks, rows are
// locked, changed, then read back in the same transaction.

var _ core.CommandExecutor = executor{}

// CommandDue implements core.CommandExecutor: CancelDue's locks, then
// command_due.
func (e executor) CommandDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	locked, err := e.lockDue(ctx, a)
	if err != nil {
		return nil, err
	}
	return e.moveLocked(ctx, "command_due", nil, locked, a.Now, a.Confirmed)
}

// ClaimCommandDue implements core.CommandExecutor: ClaimDue's claim, then
// command_due.
func (e executor) ClaimCommandDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	locked, err := e.claimDue(ctx, a)
	if err != nil {
		return nil, err
	}
	return e.moveLocked(ctx, "command_due", nil, locked, a.Now, false)
}

// InsertCommands implements core.CommandExecutor, maxList to a statement.
func (e executor) InsertCommands(ctx context.Context, now time.Time, cs []order.Command) error {
	for _, chunk := range chunks(cs) {
		a := make([]any, 0, 6*len(chunk))
		for _, c := range chunk {
			a = append(a, c.ID, c.OrderID, c.CancelAfter, now, now, now)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("insert_commands"), len(chunk)), a...); err != nil {
			return err
		}
	}
	return nil
}

// scanCommand reads the column list every command query returns.
func scanCommand(r *sql.Rows) (store.ClaimedCommand, error) {
	var (
		c          store.ClaimedCommand
		status     string
		done, dead sql.NullTime
	)
	err := r.Scan(&c.ID, &c.OrderID, &c.CancelAfter, &status, &c.Attempts, &c.Failures,
		&c.NextAt, &c.Since, &c.CreatedAt, &done, &dead, &c.Result, &c.LastError)
	if err != nil {
		return c, err
	}
	c.Status = order.TaskStatus(status)
	c.CancelAfter, c.NextAt, c.Since, c.CreatedAt = c.CancelAfter.UTC(), c.NextAt.UTC(), c.Since.UTC(), c.CreatedAt.UTC()
	if done.Valid {
		c.DoneAt = done.Time.UTC()
	}
	if dead.Valid {
		c.DeadAt = dead.Time.UTC()
	}
	return c, nil
}

// ClaimCommands implements core.CommandExecutor: select and lock, lease,
// read back.
func (e executor) ClaimCommands(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedCommand, error) {
	ids, err := e.queryIDs(ctx, q.Get("claim_commands_select"), now, limit)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if _, err := e.db.ExecContext(ctx, each(q.Get("claim_commands_lease"), len(ids)), args([]any{leaseUntil}, ids)...); err != nil {
		return nil, err
	}
	return sqlrows.Collect(ctx, e.db, each(q.Get("commands_by_id"), len(ids)), args(nil, ids), scanCommand)
}

// SettleCommand implements core.CommandExecutor.
func (e executor) SettleCommand(ctx context.Context, o store.CommandOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	st := string(status)
	n, err := e.affected(ctx, q.Get("settle_command"), st, nextAt, o.Result, o.Error, core.CommandFailed(o),
		st, now, st, now, o.ID, o.Attempts)
	return n == 1, err
}

// ResolveCommanded implements core.CommandExecutor: the update, then the
// order read back.
func (e executor) ResolveCommanded(ctx context.Context, id string, to order.Status, now time.Time) (order.Order, bool, error) {
	st := string(to)
	return e.transition(ctx, id, q.Get("resolve_commanded"), st, now, st, st, now, st, id, st)
}

// OweBack implements core.CommandExecutor.
func (e executor) OweBack(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	n, err := e.affected(ctx, q.Get("owe_back"), now, orderID, paymentID)
	return n == 1, err
}

// ListCommands implements core.CommandExecutor.
func (e executor) ListCommands(ctx context.Context, p store.ListTasksParams) ([]order.Command, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_commands"), []any{p.OrderID, p.OrderID, p.Dead, p.After, p.Limit}, func(r *sql.Rows) (order.Command, error) {
		c, err := scanCommand(r)
		return c.Command, err
	})
}

// RetryCommands implements core.CommandExecutor.
func (e executor) RetryCommands(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	if p.AllDead {
		return e.affected(ctx, q.Get("retry_dead_commands"), now, now)
	}
	var n int64
	for _, chunk := range chunks(p.IDs) {
		k, err := e.affected(ctx, each(q.Get("retry_commands"), len(chunk)), args([]any{now, now}, chunk)...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// PurgeCommands implements core.CommandExecutor.
func (e executor) PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	if p.AllDead {
		return e.affected(ctx, q.Get("purge_dead_commands"))
	}
	var n int64
	for _, chunk := range chunks(p.IDs) {
		k, err := e.affected(ctx, each(q.Get("purge_commands"), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// CommandStats implements core.CommandExecutor.
func (e executor) CommandStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullTime
	err := e.db.QueryRowContext(ctx, q.Get("command_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = oldest.Time.UTC()
	}
	return st, err
}
