package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

type rowScanner interface{ Scan(dest ...any) error }

// scanOrder reads the column list every order query returns (items excluded).
func scanOrder(sc rowScanner) (order.Order, error) {
	var (
		o                             order.Order
		created, expires, cancelAfter int64
		paidAt, cancelledAt           sql.NullInt64
		status                        string
		reason, paymentID             sql.NullString
		refund                        int64
	)
	err := sc.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &created, &expires, &cancelAfter, &paidAt,
		&cancelledAt, &reason, &paymentID, &refund, &o.PaymentAttempts, &o.Version)
	if err != nil {
		return order.Order{}, err
	}
	o.Status = order.Status(status)
	o.CreatedAt, o.ExpiresAt, o.CancelAfter = fromMS(created), fromMS(expires), fromMS(cancelAfter)
	if paidAt.Valid {
		o.PaidAt = fromMS(paidAt.Int64)
	}
	if cancelledAt.Valid {
		o.CancelledAt = fromMS(cancelledAt.Int64)
	}
	o.CancelReason = order.CancelReason(reason.String)
	o.PaymentID = paymentID.String
	o.RefundRequired = refund != 0
	return o, nil
}

// queryOrders runs a query returning order rows and fills their items.
func queryOrders(ctx context.Context, db querier, query string, args ...any) ([]order.Order, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []order.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, o)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, fillItems(ctx, db, out)
}

// queryOrder is queryOrders for at most one row; ErrNotFound when none.
func queryOrder(ctx context.Context, db querier, query string, args ...any) (order.Order, error) {
	os, err := queryOrders(ctx, db, query, args...)
	if err != nil {
		return order.Order{}, err
	}
	if len(os) == 0 {
		return order.Order{}, store.ErrNotFound
	}
	return os[0], nil
}

func fillItems(ctx context.Context, db querier, os []order.Order) error {
	if len(os) == 0 {
		return nil
	}
	ids := make([]string, len(os))
	at := make(map[string]int, len(os))
	for i, o := range os {
		ids[i] = o.ID
		at[o.ID] = i
	}
	rows, err := db.QueryContext(ctx, q.Get("get_items"), jsonArray(ids))
	if err != nil {
		return fmt.Errorf("load items: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var it order.Item
		if err := rows.Scan(&id, &it.SKU, &it.Qty); err != nil {
			return fmt.Errorf("load items: %w", err)
		}
		if i, ok := at[id]; ok {
			os[i].Items = append(os[i].Items, it)
		}
	}
	return rows.Err()
}

func jsonArray(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with []string and plain structs
	}
	return string(b)
}

type eventRow struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	OrderID string `json:"order_id"`
	Payload string `json:"payload"`
}

// insertEvents writes one outbox row per order, its payload the order as the API shows it.
func insertEvents(ctx context.Context, tx *sql.Tx, now time.Time, typ string, os ...order.Order) error {
	if len(os) == 0 {
		return nil
	}
	evs := make([]eventRow, len(os))
	for i, o := range os {
		payload, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode %s event: %w", typ, err)
		}
		evs[i] = eventRow{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, OrderID: o.ID, Payload: string(payload)}
	}
	if _, err := tx.ExecContext(ctx, q.Get("insert_events"), ms(now), jsonArray(evs)); err != nil {
		return fmt.Errorf("write %s events: %w", typ, err)
	}
	return nil
}

// moveStock writes the ledger rows of action for every item of the orders and
// applies the matching counter update (release_stock or commit_stock). The
// ledger goes first: its primary key refuses a second release or commit, and
// the error rolls the whole transaction back.
func moveStock(ctx context.Context, tx *sql.Tx, now time.Time, action string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	arr := jsonArray(ids)
	if _, err := tx.ExecContext(ctx, q.Get("ledger_insert"), arr, action, ms(now)); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("stock %s already recorded: %w", action, err)
		}
		return fmt.Errorf("stock ledger %s: %w", action, err)
	}
	counter := map[string]string{"release": "release_stock", "commit": "commit_stock"}[action]
	if _, err := tx.ExecContext(ctx, q.Get(counter), arr, ms(now)); err != nil {
		return fmt.Errorf("stock %s: %w", action, err)
	}
	return nil
}

// CreateOrder implements store.Orders.
func (s *Store) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	if s.groups != nil {
		return s.createGrouped(ctx, p)
	}
	var res store.CreateOrderResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = s.createIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("create order %s: %w", p.ID, err)
	}
	return res, nil
}

// createIn creates one order in tx; an error leaves tx to be rolled back (or
// rolled back to a savepoint taken before).
func (s *Store) createIn(ctx context.Context, tx *sql.Tx, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	now := s.clock.Now()
	o := p.NewOrder(now)
	var res store.CreateOrderResult
	err := func() error {
		if p.IdempotencyKey != "" {
			var hash, id string
			err := tx.QueryRowContext(ctx, q.Get("idempotency_get"), p.IdempotencyKey).Scan(&hash, &id)
			switch {
			case err == nil:
				if hash != p.RequestHash {
					return store.ErrIdempotencyMismatch
				}
				existing, err := queryOrder(ctx, tx, q.Get("get_order"), id)
				if err != nil {
					return fmt.Errorf("load order %s of idempotency key: %w", id, err)
				}
				res = store.CreateOrderResult{Order: existing, Replayed: true}
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("idempotency key: %w", err)
			}
		}
		_, err := tx.ExecContext(ctx, q.Get("insert_order"), o.ID, o.AmountCents, o.Currency,
			ms(o.CreatedAt), ms(o.ExpiresAt), ms(o.CancelAfter))
		if err != nil {
			if isUniqueViolation(err) {
				return store.ErrOrderExists
			}
			return fmt.Errorf("insert order: %w", err)
		}
		for _, it := range o.Items {
			r, err := tx.ExecContext(ctx, q.Get("reserve_sku"), it.Qty, it.SKU, ms(now))
			if err != nil {
				return fmt.Errorf("reserve %s: %w", it.SKU, err)
			}
			if n, err := r.RowsAffected(); err != nil {
				return fmt.Errorf("reserve %s: %w", it.SKU, err)
			} else if n == 0 {
				return fmt.Errorf("%w: sku %q", store.ErrInsufficientStock, it.SKU)
			}
		}
		if _, err := tx.ExecContext(ctx, q.Get("insert_items"), o.ID, jsonArray(o.Items)); err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
		if _, err := tx.ExecContext(ctx, q.Get("ledger_insert"), jsonArray([]string{o.ID}), "reserve", ms(now)); err != nil {
			return fmt.Errorf("stock ledger reserve: %w", err)
		}
		if p.IdempotencyKey != "" {
			if _, err := tx.ExecContext(ctx, q.Get("idempotency_put"), p.IdempotencyKey, p.RequestHash, o.ID, ms(now)); err != nil {
				return fmt.Errorf("idempotency key: %w", err)
			}
		}
		res = store.CreateOrderResult{Order: o}
		return insertEvents(ctx, tx, now, order.EventCreated, o)
	}()
	if err != nil {
		return store.CreateOrderResult{}, err
	}
	return res, nil
}

// GetOrder implements store.Orders.
func (s *Store) GetOrder(ctx context.Context, id string) (order.Order, error) {
	o, err := queryOrder(ctx, s.r, q.Get("get_order"), id)
	if err != nil {
		return order.Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// ListOrders implements store.Orders.
func (s *Store) ListOrders(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	afterCreated, afterID := int64(math.MaxInt64), ""
	if p.Cursor != "" {
		c, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			return store.ListOrdersResult{}, err
		}
		afterCreated, afterID = ms(c), id
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	os, err := queryOrders(ctx, s.r, q.Get("list_orders"), string(p.Status), afterCreated, afterID, limit+1)
	if err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("list orders: %w", err)
	}
	return store.Page(os, limit), nil
}

// StartPayment implements store.Orders.
func (s *Store) StartPayment(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.clock.Now()
		var err error
		o, err = queryOrder(ctx, tx, q.Get("start_payment"), id, ms(now))
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		// The update matched nothing: say why.
		o, err = queryOrder(ctx, tx, q.Get("get_order"), id)
		if err != nil {
			return err
		}
		switch o.Status {
		case order.Paying:
			return nil
		case order.Pending:
			return store.ErrOrderExpired
		default:
			return store.ErrNotPending
		}
	})
	if err != nil {
		return o, fmt.Errorf("start payment %s: %w", id, err)
	}
	return o, nil
}

// replayed records a callback id and reports whether it was seen before (the
// transaction then changes nothing). It also purges ids past store.CallbackMemory.
func (s *Store) replayed(ctx context.Context, tx *sql.Tx, now time.Time, p store.PaymentParams) (bool, error) {
	if p.CallbackID == "" {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, q.Get("callback_purge"), ms(now.Add(-store.CallbackMemory))); err != nil {
		return false, fmt.Errorf("purge callback ids: %w", err)
	}
	r, err := tx.ExecContext(ctx, q.Get("callback_seen"), p.CallbackID, p.OrderID, ms(now))
	if err != nil {
		return false, fmt.Errorf("record callback id: %w", err)
	}
	n, err := r.RowsAffected()
	return n == 0, err
}

// replay answers a replayed callback with the order as it is.
func replay(ctx context.Context, tx *sql.Tx, p store.PaymentParams) (store.PaymentResult, error) {
	o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
	return store.PaymentResult{Order: o, Outcome: store.OutcomeReplayed}, err
}

// CompletePayment implements store.Orders.
func (s *Store) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	var res store.PaymentResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.clock.Now()
		if seen, err := s.replayed(ctx, tx, now, p); err != nil || seen {
			if err == nil {
				res, err = replay(ctx, tx, p)
			}
			return err
		}
		o, err := queryOrder(ctx, tx, q.Get("mark_paid"), p.OrderID, ms(now), p.PaymentID, p.AmountCents)
		if err == nil {
			res = store.PaymentResult{Order: o, Outcome: store.OutcomePaid}
			if err := moveStock(ctx, tx, now, "commit", []string{o.ID}); err != nil {
				return err
			}
			return insertEvents(ctx, tx, now, order.EventPaid, o)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("flag_refund"), p.OrderID, p.PaymentID, p.AmountCents)
		if err == nil {
			res = store.PaymentResult{Order: o, Outcome: store.OutcomeRefundRequired}
			return insertEvents(ctx, tx, now, order.EventRefundRequired, o)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
		if err != nil {
			return err
		}
		res = store.PaymentResult{Order: o, Outcome: store.OutcomeNoChange}
		if o.AmountCents != p.AmountCents {
			return store.ErrAmountMismatch
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("complete payment of %s: %w", p.OrderID, err)
	}
	return res, nil
}

// FailPayment implements store.Orders.
func (s *Store) FailPayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	var res store.PaymentResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if seen, err := s.replayed(ctx, tx, s.clock.Now(), p); err != nil || seen {
			if err == nil {
				res, err = replay(ctx, tx, p)
			}
			return err
		}
		o, err := queryOrder(ctx, tx, q.Get("fail_payment"), p.OrderID)
		if err == nil {
			res = store.PaymentResult{Order: o, Outcome: store.OutcomeFailed}
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
		res = store.PaymentResult{Order: o, Outcome: store.OutcomeNoChange}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("fail payment of %s: %w", p.OrderID, err)
	}
	return res, nil
}

// CancelOrder implements store.Orders.
func (s *Store) CancelOrder(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.clock.Now()
		var err error
		o, err = queryOrder(ctx, tx, q.Get("buyer_cancel"), id, ms(now))
		if err == nil {
			if err := moveStock(ctx, tx, now, "release", []string{id}); err != nil {
				return err
			}
			return insertEvents(ctx, tx, now, order.EventCancelled, o)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if o, err = queryOrder(ctx, tx, q.Get("get_order"), id); err != nil {
			return err
		}
		return store.ErrNotPending
	})
	if err != nil {
		return o, fmt.Errorf("cancel order %s: %w", id, err)
	}
	return o, nil
}

// CancelDue implements store.Orders.
func (s *Store) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	var res store.CancelDueResult
	if len(p.IDs) == 0 && p.Claim <= 0 {
		return res, nil
	}
	skip, confirmed := 0, 0
	if p.SkipAttempted {
		skip = 1
	}
	if p.Confirmed {
		confirmed = 1
	}
	err := s.txp(ctx, true, func(tx *sql.Tx) error {
		res = store.CancelDueResult{Now: s.clock.Now()}
		var cancelled []order.Order
		var err error
		if len(p.IDs) > 0 {
			cancelled, err = queryOrders(ctx, tx, q.Get("cancel_due"), ms(res.Now), jsonArray(p.IDs), skip, confirmed)
		} else {
			cancelled, err = queryOrders(ctx, tx, q.Get("claim_due"), ms(res.Now), ms(res.Now.Add(-p.Lag)), p.Claim, skip)
		}
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		done := make(map[string]bool, len(cancelled))
		ids := make([]string, len(cancelled))
		for i, o := range cancelled {
			ids[i] = o.ID
			done[o.ID] = true
			res.Cancelled = append(res.Cancelled, store.Cancelled{
				ID: o.ID, CancelAfter: o.CancelAfter, CancelledAt: o.CancelledAt, PaymentAttempts: o.PaymentAttempts,
			})
		}
		if err := moveStock(ctx, tx, res.Now, "release", ids); err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, res.Now, order.EventCancelled, cancelled...); err != nil {
			return err
		}
		var rest []string
		for _, id := range p.IDs {
			if !done[id] {
				rest = append(rest, id)
				done[id] = true // a duplicate id in the batch is reported once
			}
		}
		if len(rest) == 0 {
			return nil
		}
		others, err := queryOrders(ctx, tx, q.Get("get_orders"), jsonArray(rest))
		if err != nil {
			return fmt.Errorf("read skipped: %w", err)
		}
		found := make(map[string]order.Order, len(others))
		for _, o := range others {
			found[o.ID] = o
		}
		for _, id := range rest {
			o, ok := found[id]
			res.Skipped = append(res.Skipped, store.Skipped{
				ID: id, Status: o.Status, CancelAfter: o.CancelAfter, PaymentAttempts: o.PaymentAttempts, Missing: !ok,
			})
		}
		return nil
	})
	if err != nil {
		return store.CancelDueResult{}, fmt.Errorf("cancel due batch of %d: %w", len(p.IDs), err)
	}
	return res, nil
}

// PaymentChecks implements store.Orders.
func (s *Store) PaymentChecks(ctx context.Context, lag time.Duration, limit int) ([]store.Deadline, error) {
	out, err := queryDeadlines(ctx, s.r, q.Get("payment_checks"), ms(s.clock.Now().Add(-lag)), limit)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	return out, nil
}

// queryDeadlines runs a query returning (id, cancel_after) rows.
func queryDeadlines(ctx context.Context, db querier, query string, args ...any) ([]store.Deadline, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Deadline
	for rows.Next() {
		var d store.Deadline
		var at int64
		if err := rows.Scan(&d.OrderID, &at); err != nil {
			return nil, err
		}
		d.CancelAfter = fromMS(at)
		out = append(out, d)
	}
	return out, rows.Err()
}

// NextDeadline implements store.Orders.
func (s *Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := s.r.QueryRowContext(ctx, q.Get("next_deadline")).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next deadline: %w", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(at.Int64), true, nil
}

// PendingDeadlines implements store.Orders.
func (s *Store) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	afterMS := int64(math.MinInt64)
	if !after.CancelAfter.IsZero() {
		afterMS = ms(after.CancelAfter)
	}
	out, err := queryDeadlines(ctx, s.r, q.Get("pending_deadlines"), afterMS, after.OrderID, limit)
	if err != nil {
		return nil, fmt.Errorf("pending deadlines: %w", err)
	}
	return out, nil
}

// CountStuck implements store.Orders.
func (s *Store) CountStuck(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, q.Get("count_stuck"), ms(s.clock.Now())).Scan(&n); err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	return n, nil
}
