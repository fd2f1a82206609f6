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

// The dashboard's reads (core.DashboardExecutor); their costs are in queries.sql.

// count runs a query of one count.
func (e executor) count(ctx context.Context, name string, args ...any) (int64, error) {
	var n int64
	err := e.db.QueryRowContext(ctx, q.Get(name), args...).Scan(&n)
	return n, interpretError(err, nil)
}

// CountStatus implements core.Executor.
func (e executor) CountStatus(ctx context.Context, status order.Status, limit int64) (int64, error) {
	return e.count(ctx, "count_status", string(status), limit)
}

// CountRefundRequired implements core.Executor.
func (e executor) CountRefundRequired(ctx context.Context, limit int64) (int64, error) {
	return e.count(ctx, "count_refund_required", limit)
}

// perMinute runs a query of (minute in Unix seconds, count) rows.
func (e executor) perMinute(ctx context.Context, name string, from, to time.Time) ([]store.MinuteCount, error) {
	out, err := sqlrows.Collect(ctx, e.db, q.Get(name), []any{from, to}, func(r *sql.Rows) (store.MinuteCount, error) {
		var m store.MinuteCount
		var sec int64
		err := r.Scan(&sec, &m.Count)
		m.Minute = time.Unix(sec, 0).UTC()
		return m, err
	})
	return out, interpretError(err, nil)
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
	status := string(a.Status)
	return e.queryOrders(ctx, q.Get("find_orders"), status, status, a.From, a.BeforeCreated, a.BeforeCreated, a.BeforeID, a.Limit)
}

// FindOrdersByPrefix implements core.Executor.
func (e executor) FindOrdersByPrefix(ctx context.Context, a core.FindArgs) ([]order.Order, error) {
	status := string(a.Status)
	return e.queryOrders(ctx, q.Get("find_orders_by_prefix"), a.Prefix, a.PrefixEnd, a.AfterID, a.Prefix, a.Prefix,
		status, status, a.From, a.BeforeCreated, a.Limit)
}

// FindPastDeadline implements core.Executor.
func (e executor) FindPastDeadline(ctx context.Context, a core.PastDeadlineArgs) ([]order.Order, error) {
	return e.queryOrders(ctx, q.Get("find_past_deadline"), string(a.Status), a.Now, a.AfterCancel,
		a.AfterCancel, a.AfterCancel, a.AfterID, a.Limit)
}

// RefundOrders implements core.Executor.
func (e executor) RefundOrders(ctx context.Context, afterID string, limit int) ([]order.Order, error) {
	return e.queryOrders(ctx, q.Get("refund_orders"), afterID, limit)
}

// OrderEvents implements core.Executor.
func (e executor) OrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	out, err := sqlrows.Collect(ctx, e.db, q.Get("order_events"), []any{orderID}, func(r *sql.Rows) (order.Event, error) {
		var ev order.Event
		return ev, r.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.OrderID, &ev.Payload, &ev.CreatedAt)
	})
	return out, interpretError(err, nil)
}

// ListSKUs implements core.Executor.
func (e executor) ListSKUs(ctx context.Context, after string, limit int) ([]store.SKU, error) {
	out, err := sqlrows.Collect(ctx, e.db, q.Get("list_skus"), []any{after, limit}, func(r *sql.Rows) (store.SKU, error) {
		var s store.SKU
		return s, r.Scan(&s.SKU, &s.Available, &s.Locked, &s.Sold)
	})
	return out, interpretError(err, nil)
}
