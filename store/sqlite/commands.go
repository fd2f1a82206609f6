package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of order-service mode (core.CommandExecutor). One writer:
// a claim needs no SKIP LOCKED.

var _ core.CommandExecutor = executor{}

// CommandDue implements core.CommandExecutor.
func (e executor) CommandDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	return e.orders(ctx, "command_due", ms(a.Now), jsonArray(a.IDs), flag(a.SkipAttempted), flag(a.Confirmed))
}

// ClaimCommandDue implements core.CommandExecutor.
func (e executor) ClaimCommandDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	return e.orders(ctx, "claim_command_due", ms(a.Now), ms(a.DueBy), a.Limit, flag(a.SkipAttempted))
}

type commandRow struct {
	ID          string `json:"id"`
	OrderID     string `json:"order_id"`
	CancelAfter int64  `json:"cancel_after"`
}

// InsertCommands implements core.CommandExecutor.
func (e executor) InsertCommands(ctx context.Context, now time.Time, cs []order.Command) error {
	rows := make([]commandRow, len(cs))
	for i, c := range cs {
		rows[i] = commandRow{ID: c.ID, OrderID: c.OrderID, CancelAfter: ms(c.CancelAfter)}
	}
	_, err := e.exec(ctx, "insert_commands", ms(now), jsonArray(rows))
	return err
}

var _ core.CommandClaimer = executor{}

// InsertClaimedCommands implements core.CommandClaimer.
func (e executor) InsertClaimedCommands(ctx context.Context, now, leaseUntil time.Time, cs []order.Command) ([]string, error) {
	rows := make([]commandRow, len(cs))
	for i, c := range cs {
		rows[i] = commandRow{ID: c.ID, OrderID: c.OrderID, CancelAfter: ms(c.CancelAfter)}
	}
	return sqlrows.Collect(ctx, e.db, q.Get("insert_claimed_commands"), []any{ms(now), jsonArray(rows), ms(leaseUntil)},
		func(r *sql.Rows) (id string, err error) { return id, r.Scan(&id) })
}

// scanCommand reads the column list every command query returns.
func scanCommand(r *sql.Rows) (store.ClaimedCommand, error) {
	var (
		c                                     store.ClaimedCommand
		status                                string
		cancelAfter, nextAt, since, createdAt int64
		done, dead                            sql.NullInt64
	)
	err := r.Scan(&c.ID, &c.OrderID, &cancelAfter, &status, &c.Attempts, &c.Failures,
		&nextAt, &since, &createdAt, &done, &dead, &c.Result, &c.LastError)
	if err != nil {
		return c, err
	}
	c.Status = order.TaskStatus(status)
	c.CancelAfter, c.NextAt, c.Since, c.CreatedAt = fromMS(cancelAfter), fromMS(nextAt), fromMS(since), fromMS(createdAt)
	if done.Valid {
		c.DoneAt = fromMS(done.Int64)
	}
	if dead.Valid {
		c.DeadAt = fromMS(dead.Int64)
	}
	return c, nil
}

// ClaimCommands implements core.CommandExecutor.
func (e executor) ClaimCommands(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedCommand, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("claim_commands"), []any{ms(now), ms(leaseUntil), limit}, scanCommand)
}

// SettleCommand implements core.CommandExecutor.
func (e executor) SettleCommand(ctx context.Context, o store.CommandOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	n, err := e.exec(ctx, "settle_command", o.ID, o.Attempts, string(status), ms(now), ms(nextAt), o.Result, o.Error, flag(core.CommandFailed(o)))
	return n == 1, err
}

// ResolveCommanded implements core.CommandExecutor.
func (e executor) ResolveCommanded(ctx context.Context, id string, to order.Status, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "resolve_commanded", id, string(to), ms(now))
}

// OweBack implements core.CommandExecutor.
func (e executor) OweBack(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	n, err := e.exec(ctx, "owe_back", orderID, paymentID, ms(now))
	return n == 1, err
}

// ListCommands implements core.CommandExecutor.
func (e executor) ListCommands(ctx context.Context, p store.ListTasksParams) ([]order.Command, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_commands"), []any{p.Dead, p.OrderID, p.After, p.Limit}, func(r *sql.Rows) (order.Command, error) {
		c, err := scanCommand(r)
		return c.Command, err
	})
}

// RetryCommands implements core.CommandExecutor.
func (e executor) RetryCommands(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	return e.exec(ctx, "retry_commands", ms(now), jsonArray(idList(p.IDs)), p.AllDead)
}

// PurgeCommands implements core.CommandExecutor.
func (e executor) PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return e.exec(ctx, "purge_commands", jsonArray(idList(p.IDs)), p.AllDead)
}

// idList is ids as a JSON array's elements: nil marshals to null, which
// json_each reads as no rows too, but an empty array says it plainly.
func idList(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

// CommandStats implements core.CommandExecutor.
func (e executor) CommandStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullInt64
	err := e.db.QueryRowContext(ctx, q.Get("command_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = fromMS(oldest.Int64)
	}
	return st, err
}
