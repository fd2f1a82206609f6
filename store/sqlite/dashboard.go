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

// The dashboard's reads (core.DashboardExecutor), on the reader pool.

// count runs a query of one count.
func (e executor) count(ctx context.Context, name string, args ...any) (int64, error) {
	var n int64
	err := e.db.QueryRowContext(ctx, q.Get(name), args...).Scan(&n)
	return n, err
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
	return sqlrows.Collect(ctx, e.db, q.Get(name), []any{ms(from), ms(to)}, func(r *sql.Rows) (store.MinuteCount, error) {
		var m store.MinuteCount
		var sec int64
		err := r.Scan(&sec, &m.Count)
		m.Minute = time.Unix(sec, 0).UTC()
		return m, err
	})
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
	return e.orders(ctx, "find_orders", string(a.Status), ms(a.From), ms(a.BeforeCreated), a.BeforeID, a.Limit)
}

// FindOrdersByPrefix implements core.Executor.
func (e executor) FindOrdersByPrefix(ctx context.Context, a core.FindArgs) ([]order.Order, error) {
	return e.orders(ctx, "find_orders_by_prefix", a.Prefix, a.PrefixEnd, a.AfterID, string(a.Status), ms(a.From), ms(a.BeforeCreated), a.Limit)
}

// FindPastDeadline implements core.Executor.
func (e executor) FindPastDeadline(ctx context.Context, a core.PastDeadlineArgs) ([]order.Order, error) {
	return e.orders(ctx, "find_past_deadline", string(a.Status), ms(a.Now), ms(a.AfterCancel), a.AfterID, a.Limit)
}

// RefundOrders implements core.Executor.
func (e executor) RefundOrders(ctx context.Context, afterID string, limit int) ([]order.Order, error) {
	return e.orders(ctx, "refund_orders", afterID, limit)
}

// OrderEvents implements core.Executor.
func (e executor) OrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	return e.events(ctx, "order_events", orderID)
}

// ListSKUs implements core.Executor.
func (e executor) ListSKUs(ctx context.Context, after string, limit int) ([]store.SKU, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_skus"), []any{after, limit}, func(r *sql.Rows) (store.SKU, error) {
		var s store.SKU
		return s, r.Scan(&s.SKU, &s.Available, &s.Locked, &s.Sold)
	})
}
