package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// DBNow implements core.Executor.
func (e executor) DBNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := e.db.QueryRowContext(ctx, q.Get("db_now")).Scan(&t); err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// SetStock implements core.Executor.
func (e executor) SetStock(ctx context.Context, sku string, available int64, now time.Time) (store.SKU, error) {
	if _, err := e.db.ExecContext(ctx, q.Get("set_stock"), sku, available, available, now, available, available, now); err != nil {
		return store.SKU{}, err
	}
	return e.GetSKU(ctx, sku)
}

// GetSKU implements core.Executor.
func (e executor) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	var out store.SKU
	err := e.db.QueryRowContext(ctx, q.Get("get_sku"), sku).Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	return out, interpretError(err, nil)
}

// counters names the statement that moves the counters of each movement
// whose units leave locked.
var counters = map[core.Move]string{core.MoveRelease: "release_stock", core.MoveCommit: "commit_stock"}

// WriteEffects implements core.Executor: the ledger rows, then the counters
// (SKU rows locked first, in primary-key order), then the events, each in
// one statement per list of at most maxList.
func (e executor) WriteEffects(ctx context.Context, ef core.Effects) error {
	if ef.Move != core.MoveNone {
		for _, chunk := range chunks(ef.IDs) {
			_, err := e.db.ExecContext(ctx, each(q.Get("ledger_insert"), len(chunk)), args([]any{string(ef.Move), ef.Now}, chunk)...)
			if err != nil {
				return fmt.Errorf("stock ledger: %w", interpretError(err, core.ErrMovedTwice))
			}
		}
	}
	if counter, ok := counters[ef.Move]; ok {
		if err := e.lockSKUs(ctx, ef.SKUs); err != nil {
			return fmt.Errorf("lock skus: %w", err)
		}
		for _, chunk := range chunks(ef.IDs) {
			if _, err := e.db.ExecContext(ctx, each(q.Get(counter), len(chunk)), args(nil, chunk, ef.Now)...); err != nil {
				return fmt.Errorf("stock counters: %w", err)
			}
		}
	}
	if err := e.insertTasks(ctx, ef); err != nil {
		return err
	}
	if err := e.clearHookFailures(ctx, ef.HooksHeld); err != nil {
		return fmt.Errorf("hook failures: %w", err)
	}
	for _, chunk := range chunks(ef.Events) {
		a := make([]any, 0, 5*len(chunk))
		for _, ev := range chunk {
			a = append(a, ev.ID, ef.Type, ev.OrderID, string(ev.Payload), ef.Now)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("insert_events"), len(chunk)), a...); err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	return nil
}

// lockSKUs locks the rows of skus (in byte order), chunk after chunk.
func (e executor) lockSKUs(ctx context.Context, skus []string) error {
	for _, chunk := range chunks(skus) {
		rows, err := e.db.QueryContext(ctx, each(q.Get("lock_skus"), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	return nil
}

// UnpublishedEvents implements core.Executor.
func (e executor) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("unpublished_events"), []any{limit}, func(r *sql.Rows) (order.Event, error) {
		var ev order.Event
		return ev, r.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.OrderID, &ev.Payload, &ev.CreatedAt)
	})
}

// MarkPublished implements core.Executor.
func (e executor) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	for _, chunk := range chunks(seqs) {
		if _, err := e.db.ExecContext(ctx, each(q.Get("mark_published"), len(chunk)), args([]any{now}, chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// AuditRows implements core.Executor: the session variables audit.sql reads
// (@now, @lag_ms), then the check. Both must run on one connection: call it
// in a transaction.
func (e executor) AuditRows(ctx context.Context, check sqlfile.Query, now time.Time, lag time.Duration, row func(detail string)) error {
	if _, err := e.db.ExecContext(ctx, q.Get("audit_params"), now, lag.Milliseconds()); err != nil {
		return err
	}
	return sqlrows.Each(ctx, e.db, check.SQL, nil, func(r *sql.Rows) error {
		var detail string
		err := r.Scan(&detail)
		if err == nil {
			row(detail)
		}
		return err
	})
}
