package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The reads of the dashboard (store.Dashboard). None runs in a transaction:
// each statement reads its own snapshot, and an overview whose counts come
// from a few milliseconds apart is what a page shows anyway.

// timeFloor and timeCeiling stand for an open end of a time range: every
// store's time type holds both.
var (
	timeFloor   = time.Unix(0, 0).UTC()
	timeCeiling = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// overviewStatuses are the statuses the overview counts, in display order.
// CANCELLING holds orders only in order-service mode; elsewhere its count is
// one empty probe of the index.
var overviewStatuses = []order.Status{order.Pending, order.Paying, order.Cancelling, order.Paid, order.Cancelled}

// Overview implements store.Dashboard.
func (s *Store) Overview(ctx context.Context, p store.OverviewParams) (store.Overview, error) {
	if p.CountCap <= 0 {
		p.CountCap = store.DefaultCountCap
	}
	now, err := s.nowOn(ctx, s.d)
	if err != nil {
		return store.Overview{}, fmt.Errorf("overview: %w", err)
	}
	ov := store.Overview{Now: now, CountCap: p.CountCap, ByStatus: make(map[order.Status]int64, len(overviewStatuses))}
	for _, st := range overviewStatuses {
		n, err := s.d.CountStatus(ctx, st, p.CountCap)
		if err != nil {
			return store.Overview{}, fmt.Errorf("overview: count %s: %w", st, err)
		}
		ov.ByStatus[st] = n
	}
	if ov.Stuck, err = s.d.CountStuck(ctx, now); err != nil {
		return store.Overview{}, fmt.Errorf("overview: count stuck payments: %w", err)
	}
	if ov.RefundRequired, err = s.d.CountRefundRequired(ctx, p.CountCap); err != nil {
		return store.Overview{}, fmt.Errorf("overview: count refunds required: %w", err)
	}
	if ov.HookFailing, err = s.d.CountHookFailing(ctx, p.CountCap); err != nil {
		return store.Overview{}, fmt.Errorf("overview: count failing hooks: %w", err)
	}
	// Minutes are whole: the hour ahead starts at this minute, the hour
	// behind ends with it, so a chart's bars do not move within a minute.
	minute := now.Truncate(time.Minute)
	series := []struct {
		name     string
		into     *[]store.MinuteCount
		read     func(context.Context, time.Time, time.Time) ([]store.MinuteCount, error)
		from, to time.Time
	}{
		{"due", &ov.Due, s.d.DuePerMinute, minute, minute.Add(61 * time.Minute)},
		{"cancelled", &ov.Cancelled, s.d.CancelledPerMinute, minute.Add(-59 * time.Minute), minute.Add(time.Minute)},
		{"paid", &ov.Paid, s.d.PaidPerMinute, minute.Add(-59 * time.Minute), minute.Add(time.Minute)},
		{"refunds", &ov.Refunds, s.d.RefundsPerMinute, minute.Add(-59 * time.Minute), minute.Add(time.Minute)},
	}
	for _, x := range series {
		if *x.into, err = x.read(ctx, x.from, x.to); err != nil {
			return store.Overview{}, fmt.Errorf("overview: %s per minute: %w", x.name, err)
		}
	}
	return ov, nil
}

// FindOrders implements store.Dashboard.
func (s *Store) FindOrders(ctx context.Context, p store.FindOrdersParams) (store.ListOrdersResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	a := FindArgs{Status: p.Status, From: p.From, BeforeCreated: p.To, Limit: limit + 1}
	if a.From.IsZero() {
		a.From = timeFloor
	}
	if a.BeforeCreated.IsZero() {
		a.BeforeCreated = timeCeiling
	}
	var cursorAt time.Time
	var cursorID string
	if p.Cursor != "" {
		var err error
		if cursorAt, cursorID, err = store.DecodeCursor(p.Cursor); err != nil {
			return store.ListOrdersResult{}, err
		}
	}
	var os []order.Order
	var err error
	if p.RefundRequired {
		if os, err = s.d.RefundOrders(ctx, cursorID, limit+1); err != nil {
			return store.ListOrdersResult{}, fmt.Errorf("find orders flagged refund_required: %w", err)
		}
		return idPage(os, limit), nil
	}
	if p.PastDeadline {
		if p.Cursor == "" {
			cursorAt = timeFloor
		}
		return s.findPastDeadline(ctx, p.Status, cursorAt, cursorID, limit)
	}
	if p.IDPrefix != "" {
		a.Prefix, a.PrefixEnd, a.AfterID = p.IDPrefix, prefixEnd(p.IDPrefix), cursorID
		if os, err = s.d.FindOrdersByPrefix(ctx, a); err != nil {
			return store.ListOrdersResult{}, fmt.Errorf("find orders by prefix: %w", err)
		}
		return idPage(os, limit), nil
	}
	if p.Cursor != "" {
		a.BeforeCreated, a.BeforeID = cursorAt, cursorID
	}
	if os, err = s.d.FindOrders(ctx, a); err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("find orders: %w", err)
	}
	return store.Page(os, limit), nil
}

// findPastDeadline pages the open orders whose deadline has passed: one
// range of the (status, cancel_after) index per open status, merged in
// (cancel_after, id) order; the cursor holds the last one's pair.
func (s *Store) findPastDeadline(ctx context.Context, status order.Status, afterAt time.Time, afterID string, limit int) (store.ListOrdersResult, error) {
	statuses := []order.Status{order.Pending, order.Paying}
	if status != "" {
		if !slices.Contains(statuses, status) {
			return store.ListOrdersResult{}, nil // only an open order can be past its deadline
		}
		statuses = []order.Status{status}
	}
	now, err := s.nowOn(ctx, s.d)
	if err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("find orders past their deadline: %w", err)
	}
	var os []order.Order
	for _, st := range statuses {
		got, err := s.d.FindPastDeadline(ctx, PastDeadlineArgs{Status: st, Now: now, AfterCancel: afterAt, AfterID: afterID, Limit: limit + 1})
		if err != nil {
			return store.ListOrdersResult{}, fmt.Errorf("find %s orders past their deadline: %w", st, err)
		}
		os = append(os, got...)
	}
	slices.SortFunc(os, func(a, b order.Order) int {
		if c := a.CancelAfter.Compare(b.CancelAfter); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	res := store.ListOrdersResult{Orders: os}
	if len(os) > limit {
		res.Orders = os[:limit]
		last := os[limit-1]
		res.NextCursor = store.EncodeCursor(last.CancelAfter, last.ID)
	}
	return res, nil
}

// idPage cuts limit+1 orders in id order into a page; its cursor holds the
// last id.
func idPage(os []order.Order, limit int) store.ListOrdersResult {
	res := store.ListOrdersResult{Orders: os}
	if len(os) > limit {
		res.Orders = os[:limit]
		res.NextCursor = store.EncodeCursor(timeFloor, os[limit-1].ID)
	}
	return res
}

// prefixEnd is an upper bound of the ids that start with prefix, in byte
// order: prefix followed by the greatest code point. (An id that continues
// with U+10FFFF itself is past it: not a practical id.) The drivers also
// check the prefix itself, so the bound only has to be an upper one.
func prefixEnd(prefix string) string {
	return prefix + strings.Repeat("\U0010FFFF", 2)
}

// OrderEvents implements store.Dashboard.
func (s *Store) OrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	evs, err := s.d.OrderEvents(ctx, orderID)
	if err != nil {
		return nil, fmt.Errorf("events of order %s: %w", orderID, err)
	}
	return evs, nil
}

// ListSKUs implements store.Dashboard.
func (s *Store) ListSKUs(ctx context.Context, after string, limit int) ([]store.SKU, error) {
	if limit <= 0 {
		limit = 100
	}
	skus, err := s.d.ListSKUs(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list skus: %w", err)
	}
	return skus, nil
}
