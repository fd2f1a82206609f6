package store

import (
	"context"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Dashboard holds the reads of lapse's web dashboard (package web). Every one
// is bounded by an index range, never by the size of the orders table: the
// cost of each at 10 M orders is in the comment of its SQL (each driver's
// queries.sql) and in docs/dashboard.md.
type Dashboard interface {
	// Overview counts what the overview page shows, at the store's clock.
	Overview(ctx context.Context, p OverviewParams) (Overview, error)
	// FindOrders pages orders by status, id prefix and creation time (see
	// FindOrdersParams).
	FindOrders(ctx context.Context, p FindOrdersParams) (ListOrdersResult, error)
	// OrderEvents returns the outbox events of one order still stored
	// (published ones are pruned after the outbox retention), in seq order.
	OrderEvents(ctx context.Context, orderID string) ([]order.Event, error)
	// ListSKUs pages SKUs in byte order of their name, after After.
	ListSKUs(ctx context.Context, after string, limit int) ([]SKU, error)
}

// OverviewParams tunes Overview.
type OverviewParams struct {
	// CountCap bounds every count: a count that reaches it stops there
	// (shown as "CountCap or more"), so the cost of a count never grows with
	// the table. Defaults to 10,000.
	CountCap int64
}

// DefaultCountCap is OverviewParams.CountCap's default.
const DefaultCountCap = 10_000

// Overview is what the dashboard's overview counts, at Now.
type Overview struct {
	Now time.Time
	// ByStatus counts orders per status, each capped at CountCap.
	ByStatus map[order.Status]int64
	// Stuck counts PAYING orders past their cancel_after (CountStuck).
	Stuck int64
	// RefundRequired counts orders flagged refund_required, capped.
	RefundRequired int64
	// HookFailing counts PENDING orders whose hook keeps failing
	// (HookFailures), capped.
	HookFailing int64
	CountCap    int64
	// Due counts PENDING orders by the minute their cancel_after falls in,
	// from Now to Now + 1 h; Cancelled, Paid and Refunds count cancels,
	// payments and refunds by minute over the last hour (Refunds: payment
	// attempts flagged REFUND_REQUIRED by the minute of the flag, and
	// REFUNDED ones by the minute of their refund).
	// Minutes without any are left out.
	Due, Cancelled, Paid, Refunds []MinuteCount
}

// MinuteCount is a count in the minute starting at Minute (UTC).
type MinuteCount struct {
	Minute time.Time
	Count  int64
}

// FindOrdersParams selects orders for FindOrders. With IDPrefix the orders
// whose id starts with it come in id order (the primary key's range);
// without, newest first by (created_at, id). Status and the time range
// filter either.
type FindOrdersParams struct {
	Status   order.Status // optional
	IDPrefix string       // optional
	// From and To bound created_at: From <= created_at < To; zero: open.
	From, To time.Time
	// RefundRequired lists only orders flagged refund_required, in id order
	// (the partial index of flagged orders); the other filters are ignored.
	RefundRequired bool
	// PastDeadline lists only the open orders (PENDING and PAYING, or the
	// one of them Status names) whose cancel_after has passed at the
	// store's clock, the most overdue first by (cancel_after, id): ranges
	// of the (status, cancel_after) index, as many entries as there are such
	// orders. IDPrefix and the time range are ignored; RefundRequired wins
	// over it. A Status other than PENDING or PAYING finds nothing.
	PastDeadline bool
	Limit        int    // defaults to 50
	Cursor       string // from the previous page's NextCursor
}
