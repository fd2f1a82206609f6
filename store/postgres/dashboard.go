package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The dashboard's reads (core.DashboardExecutor); their costs are in queries.sql.

// CountStatus implements core.Executor.
func (e executor) CountStatus(ctx context.Context, status order.Status, limit int64) (int64, error) {
	var n int64
	err := e.scan(ctx, "count_status", []any{string(status), limit}, &n)
	return n, err
}

// CountRefundRequired implements core.Executor.
func (e executor) CountRefundRequired(ctx context.Context, limit int64) (int64, error) {
	var n int64
	err := e.scan(ctx, "count_refund_required", []any{limit}, &n)
	return n, err
}

// perMinute runs a query of (minute in Unix seconds, count) rows.
func (e executor) perMinute(ctx context.Context, name string, from, to time.Time) ([]store.MinuteCount, error) {
	rows, err := e.db.Query(ctx, q.Get(name), from, to)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.MinuteCount, error) {
		var m store.MinuteCount
		var sec int64
		err := r.Scan(&sec, &m.Count)
		m.Minute = time.Unix(sec, 0).UTC()
		return m, err
	})
	return out, interpretError(err)
}

// DuePerMinute implements core.Executor.
func (e executor) DuePerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error) {
	return e.perMinute(ctx, "due_per_minute", from, to)
}

// CancelledPerMinute implements core.Executor.
func (e executor) CancelledPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error) {
	return e.perMinute(ctx, "cancelled_per_minute", from, to)
}

// PaidPerMinute implements core.Executor.
func (e executor) PaidPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error) {
	return e.perMinute(ctx, "paid_per_minute", from, to)
}

// RefundsPerMinute implements core.Executor.
func (e executor) RefundsPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error) {
	return e.perMinute(ctx, "refunds_per_minute", from, to)
}

// FindOrders implements core.Executor.
func (e executor) FindOrders(ctx context.Context, a core.FindArgs) ([]order.Order, error) {
	return e.orders(ctx, "find_orders", string(a.Status), a.From, a.BeforeCreated, a.BeforeID, a.Limit)
}

// FindOrdersByPrefix implements core.Executor.
func (e executor) FindOrdersByPrefix(ctx context.Context, a core.FindArgs) ([]order.Order, error) {
	return e.orders(ctx, "find_orders_by_prefix", a.Prefix, a.PrefixEnd, a.AfterID, string(a.Status), a.From, a.BeforeCreated, a.Limit)
}

// FindPastDeadline implements core.Executor.
func (e executor) FindPastDeadline(ctx context.Context, a core.PastDeadlineArgs) ([]order.Order, error) {
	return e.orders(ctx, "find_past_deadline", string(a.Status), a.Now, a.AfterCancel, a.AfterID, a.Limit)
}

// RefundOrders implements core.Executor.
func (e executor) RefundOrders(ctx context.Context, afterID string, limit int) ([]order.Order, error) {
	return e.orders(ctx, "refund_orders", afterID, limit)
}

// OrderEvents implements core.Executor.
func (e executor) OrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	rows, err := e.db.Query(ctx, q.Get("order_events"), orderID)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Event, error) {
		var ev order.Event
		var payload string
		err := r.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.OrderID, &payload, &ev.CreatedAt)
		ev.Payload, ev.CreatedAt = []byte(payload), ev.CreatedAt.UTC()
		return ev, err
	})
	return out, interpretError(err)
}

// ListSKUs implements core.Executor.
func (e executor) ListSKUs(ctx context.Context, after string, limit int) ([]store.SKU, error) {
	rows, err := e.db.Query(ctx, q.Get("list_skus"), after, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SKU, error) {
		var s store.SKU
		return s, r.Scan(&s.SKU, &s.Available, &s.Locked, &s.Sold)
	})
	return out, interpretError(err)
}
