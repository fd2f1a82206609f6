package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of order-service mode (core.CommandExecutor).

var _ core.CommandExecutor = executor{}

// CommandDue implements core.CommandExecutor.
func (e executor) CommandDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	return e.orders(ctx, "command_due", a.Now, a.IDs, a.SkipAttempted, a.Confirmed)
}

// ClaimCommandDue implements core.CommandExecutor.
func (e executor) ClaimCommandDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	return e.orders(ctx, "claim_command_due", a.Now, a.DueBy, a.Limit, a.SkipAttempted)
}

// InsertCommands implements core.CommandExecutor.
func (e executor) InsertCommands(ctx context.Context, now time.Time, cs []order.Command) error {
	ids, orders, due := make([]string, len(cs)), make([]string, len(cs)), make([]time.Time, len(cs))
	for i, c := range cs {
		ids[i], orders[i], due[i] = c.ID, c.OrderID, c.CancelAfter
	}
	_, err := e.exec(ctx, "insert_commands", now, ids, orders, due)
	return err
}

var _ core.CommandClaimer = executor{}

// InsertClaimedCommands implements core.CommandClaimer.
func (e executor) InsertClaimedCommands(ctx context.Context, now, leaseUntil time.Time, cs []order.Command) ([]string, error) {
	ids, orders, due := make([]string, len(cs)), make([]string, len(cs)), make([]time.Time, len(cs))
	for i, c := range cs {
		ids[i], orders[i], due[i] = c.ID, c.OrderID, c.CancelAfter
	}
	rows, err := e.db.Query(ctx, q.Get("insert_claimed_commands"), now, ids, orders, due, leaseUntil)
	if err != nil {
		return nil, interpretError(err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return written, interpretError(err)
}

// scanCommand reads the column list every command query returns.
func scanCommand(r pgx.CollectableRow) (store.ClaimedCommand, error) {
	var (
		c          store.ClaimedCommand
		status     string
		done, dead *time.Time
	)
	err := r.Scan(&c.ID, &c.OrderID, &c.CancelAfter, &status, &c.Attempts, &c.Failures,
		&c.NextAt, &c.Since, &c.CreatedAt, &done, &dead, &c.Result, &c.LastError)
	if err != nil {
		return c, err
	}
	c.Status = order.TaskStatus(status)
	c.CancelAfter, c.NextAt, c.Since, c.CreatedAt = c.CancelAfter.UTC(), c.NextAt.UTC(), c.Since.UTC(), c.CreatedAt.UTC()
	if done != nil {
		c.DoneAt = done.UTC()
	}
	if dead != nil {
		c.DeadAt = dead.UTC()
	}
	return c, nil
}

// ClaimCommands implements core.CommandExecutor.
func (e executor) ClaimCommands(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedCommand, error) {
	rows, err := e.db.Query(ctx, q.Get("claim_commands"), now, leaseUntil, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, scanCommand)
	return out, interpretError(err)
}

// SettleCommand implements core.CommandExecutor.
func (e executor) SettleCommand(ctx context.Context, o store.CommandOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	tag, err := e.exec(ctx, "settle_command", o.ID, o.Attempts, string(status), now, nextAt, o.Result, o.Error, core.CommandFailed(o))
	return tag.RowsAffected() == 1, err
}

// ResolveCommanded implements core.CommandExecutor.
func (e executor) ResolveCommanded(ctx context.Context, id string, to order.Status, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "resolve_commanded", id, string(to), now)
}

// OweBack implements core.CommandExecutor.
func (e executor) OweBack(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	tag, err := e.exec(ctx, "owe_back", orderID, paymentID, now)
	return tag.RowsAffected() == 1, err
}

// ListCommands implements core.CommandExecutor.
func (e executor) ListCommands(ctx context.Context, p store.ListTasksParams) ([]order.Command, error) {
	rows, err := e.db.Query(ctx, q.Get("list_commands"), p.Dead, p.OrderID, p.After, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Command, error) {
		c, err := scanCommand(r)
		return c.Command, err
	})
	return out, interpretError(err)
}

// RetryCommands implements core.CommandExecutor.
func (e executor) RetryCommands(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	tag, err := e.exec(ctx, "retry_commands", now, p.IDs, p.AllDead)
	return tag.RowsAffected(), err
}

// PurgeCommands implements core.CommandExecutor.
func (e executor) PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	tag, err := e.exec(ctx, "purge_commands", p.IDs, p.AllDead)
	return tag.RowsAffected(), err
}

// CommandStats implements core.CommandExecutor.
func (e executor) CommandStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest *time.Time
	if err := e.scan(ctx, "command_stats", nil, &st.Pending, &st.Dead, &oldest); err != nil {
		return st, err
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	return st, nil
}

var _ core.CommandBatchExecutor = executor{}

// SettleCommands implements core.CommandBatchExecutor: settle_command for
// each step, pipelined in one round trip, in the steps' order.
func (e executor) SettleCommands(ctx context.Context, steps []core.SettleStep, now time.Time) ([]bool, error) {
	settled := make([]bool, len(steps))
	var b pgx.Batch
	for i, st := range steps {
		o := st.Outcome
		b.Queue(q.Get("settle_command"), o.ID, o.Attempts, string(st.Status), now, st.NextAt, o.Result, o.Error, core.CommandFailed(o)).
			Exec(func(tag pgconn.CommandTag) error {
				settled[i] = tag.RowsAffected() == 1
				return nil
			})
	}
	if err := e.send(ctx, &b); err != nil {
		return nil, err
	}
	return settled, nil
}

// ResolveCommandedMany implements core.CommandBatchExecutor:
// resolve_commanded for each transition, then the items of the orders it
// moved, pipelined in one round trip.
func (e executor) ResolveCommandedMany(ctx context.Context, rs []core.Resolve, now time.Time) ([]order.Order, []bool, error) {
	moved, ok := make([]order.Order, len(rs)), make([]bool, len(rs))
	ids := make([]string, len(rs))
	var b pgx.Batch
	for i, r := range rs {
		ids[i] = r.ID
		b.Queue(q.Get("resolve_commanded"), r.ID, string(r.To), now).Query(func(rows pgx.Rows) error {
			os, err := pgx.CollectRows(rows, scanOrder)
			if len(os) == 1 {
				moved[i], ok[i] = os[0], true
			}
			return err
		})
	}
	var items orderSet
	b.Queue(q.Get("get_items"), ids).Query(func(rows pgx.Rows) error {
		items.os, items.at = moved, make(map[string]int, len(moved))
		for i := range moved {
			if ok[i] {
				items.at[moved[i].ID] = i
			}
		}
		return items.readItems(rows)
	})
	if err := e.send(ctx, &b); err != nil {
		return nil, nil, err
	}
	return moved, ok, nil
}
