package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// GetSKU implements core.Executor.
func (e executor) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	var out store.SKU
	err := e.scan(ctx, "get_sku", []any{sku}, &out.SKU, &out.Available, &out.Locked, &out.Sold)
	return out, err
}

// SetStock implements core.Executor.
func (e executor) SetStock(ctx context.Context, sku string, available int64, now time.Time) (store.SKU, error) {
	var out store.SKU
	err := e.scan(ctx, "set_stock", []any{sku, available, now}, &out.SKU, &out.Available, &out.Locked, &out.Sold)
	return out, err
}

// ReserveSKU implements core.Executor.
func (e executor) ReserveSKU(ctx context.Context, sku string, qty int64, now time.Time) (bool, error) {
	tag, err := e.exec(ctx, "reserve_sku", qty, sku, now)
	return tag.RowsAffected() == 1, err
}

// WriteEffects implements core.Executor: everything in one round trip.
func (e executor) WriteEffects(ctx context.Context, ef core.Effects) error {
	var b pgx.Batch
	queueEffects(&b, ef)
	return e.send(ctx, &b)
}

// queueEffects queues the statements of ef on b: the ledger rows of the
// move (first: its primary key refuses a second release or commit, and the
// error rolls the whole transaction back), the events, the notice of the
// deadlines set (notify_due: heard by every instance at COMMIT), the hook
// failure records the transition clears and the stock tasks of remote
// stock, then for a release or a commit the lock of the SKU rows in byte
// order and the counter update summed per SKU. WriteGroup sends them with
// statements of its own.
func queueEffects(b *pgx.Batch, ef core.Effects) {
	if ef.Move != core.MoveNone {
		b.Queue(q.Get("ledger_insert"), ef.IDs, string(ef.Move), ef.Now)
	}
	if len(ef.Events) > 0 {
		ids, orderIDs, payloads := make([]string, len(ef.Events)), make([]string, len(ef.Events)), make([]string, len(ef.Events))
		for i, ev := range ef.Events {
			ids[i], orderIDs[i], payloads[i] = ev.ID, ev.OrderID, string(ev.Payload)
		}
		b.Queue(q.Get("insert_events"), ef.Type, ef.Now, ids, orderIDs, payloads)
	}
	if len(ef.Due) > 0 {
		b.Queue(q.Get("notify_due"), notices(ef.Due))
	}
	if len(ef.HooksHeld) > 0 {
		b.Queue(q.Get("hook_failures_clear"), ef.HooksHeld)
	}
	queueTasks(b, ef)
	// The SKU rows last, just before the COMMIT: they are what concurrent
	// cancels and creates queue on, and the rows written before them (ledger,
	// events, tasks) take no lock another transaction waits for, so each
	// transaction holds the SKUs only for the lock, the counters and the
	// COMMIT.
	counter := ""
	switch ef.Move {
	case core.MoveRelease:
		counter = "release_stock"
	case core.MoveCommit:
		counter = "commit_stock"
	}
	if counter != "" {
		b.Queue(q.Get("lock_skus"), ef.SKUs)
		b.Queue(q.Get(counter), ef.SKUs, ef.Qtys, ef.Now)
	}
}

// UnpublishedEvents implements core.Executor.
func (e executor) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	rows, err := e.db.Query(ctx, q.Get("unpublished_events"), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Event, error) {
		var ev order.Event
		var payload string
		err := r.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.OrderID, &payload, &ev.CreatedAt)
		ev.Payload, ev.CreatedAt = []byte(payload), ev.CreatedAt.UTC()
		return ev, err
	})
}

// MarkPublished implements core.Executor.
func (e executor) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	_, err := e.exec(ctx, "mark_published", now, seqs)
	return err
}

// AuditRows implements core.Executor: the checks of audit.sql take named
// parameters, @now and @allowed_lag_ms.
func (e executor) AuditRows(ctx context.Context, check sqlfile.Query, now time.Time, lag time.Duration, row func(detail string)) error {
	rows, err := e.db.Query(ctx, check.SQL, pgx.NamedArgs{"now": now, "allowed_lag_ms": lag.Milliseconds()})
	if err != nil {
		return err
	}
	var detail string
	_, err = pgx.ForEachRow(rows, []any{&detail}, func() error {
		row(detail)
		return nil
	})
	return err
}
