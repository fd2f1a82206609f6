package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// scanOrder reads the column list every order query returns (items excluded).
func scanOrder(row pgx.Row) (order.Order, error) {
	var (
		o                   order.Order
		status              string
		paidAt, cancelledAt *time.Time
		reason, paymentID   *string
	)
	err := row.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &o.CreatedAt, &o.ExpiresAt, &o.CancelAfter, &paidAt,
		&cancelledAt, &reason, &paymentID, &o.RefundRequired, &o.PaymentAttempts, &o.Version)
	if err != nil {
		return order.Order{}, err
	}
	o.Status = order.Status(status)
	o.CreatedAt, o.ExpiresAt, o.CancelAfter = o.CreatedAt.UTC(), o.ExpiresAt.UTC(), o.CancelAfter.UTC()
	if paidAt != nil {
		o.PaidAt = paidAt.UTC()
	}
	if cancelledAt != nil {
		o.CancelledAt = cancelledAt.UTC()
	}
	if reason != nil {
		o.CancelReason = order.CancelReason(*reason)
	}
	if paymentID != nil {
		o.PaymentID = *paymentID
	}
	return o, nil
}

// queryOrders runs a query returning order rows and fills their items.
func queryOrders(ctx context.Context, db querier, query string, args ...any) ([]order.Order, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	os, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Order, error) { return scanOrder(r) })
	if err != nil {
		return nil, err
	}
	return os, fillItems(ctx, db, os)
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
	at := make(map[string]int, len(os))
	for i, o := range os {
		at[o.ID] = i
	}
	rows, err := db.Query(ctx, q.Get("get_items"), orderIDs(os))
	if err != nil {
		return fmt.Errorf("load items: %w", err)
	}
	var id string
	var it order.Item
	_, err = pgx.ForEachRow(rows, []any{&id, &it.SKU, &it.Qty}, func() error {
		if i, ok := at[id]; ok {
			os[i].Items = append(os[i].Items, it)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load items: %w", err)
	}
	return nil
}

func orderIDs(os []order.Order) []string {
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ID
	}
	return ids
}

// Stock movements written with a transition (stock_ledger.action).
const (
	moveNone    = ""
	moveReserve = "reserve" // ledger rows only: CreateOrder updates the counters item by item
	moveRelease = "release"
	moveCommit  = "commit"
)

// writeEffects records what a transition of the orders os (items loaded)
// leaves besides the order rows, in one round trip: the ledger rows of move
// for every item (the ledger goes first: its primary key refuses a second
// release or commit, and the error rolls the whole transaction back), the
// matching counter update, summed per SKU, behind a lock of the SKU rows in
// SKU order, and one outbox event of type typ per order, its payload the
// order as the API shows it.
func writeEffects(ctx context.Context, tx pgx.Tx, now time.Time, move, typ string, os ...order.Order) error {
	if len(os) == 0 {
		return nil
	}
	var b pgx.Batch
	if err := queueEffects(&b, now, move, typ, os...); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("write %s effects (stock %s): %w", typ, cmp.Or(move, "unchanged"), interpretError(err))
	}
	return nil
}

// queueEffects queues the statements of writeEffects on b, for a caller that
// sends them in a round trip with statements of its own.
func queueEffects(b *pgx.Batch, now time.Time, move, typ string, os ...order.Order) error {
	ids := orderIDs(os)
	if move != moveNone {
		b.Queue(q.Get("ledger_insert"), ids, move, now)
	}
	counter := ""
	switch move {
	case moveRelease:
		counter = "release_stock"
	case moveCommit:
		counter = "commit_stock"
	}
	if counter != "" {
		skus, qtys := perSKU(os)
		b.Queue(q.Get("lock_skus"), skus)
		b.Queue(q.Get(counter), skus, qtys, now)
	}
	if typ != "" {
		evIDs, payloads := make([]string, len(os)), make([]string, len(os))
		for i, o := range os {
			p, err := json.Marshal(o)
			if err != nil {
				return fmt.Errorf("encode %s event: %w", typ, err)
			}
			evIDs[i], payloads[i] = uuid.Must(uuid.NewV7()).String(), string(p)
		}
		b.Queue(q.Get("insert_events"), typ, now, evIDs, ids, payloads)
	}
	return nil
}

// perSKU sums the items of os by SKU, in SKU order.
func perSKU(os []order.Order) ([]string, []int64) {
	sum := map[string]int64{}
	for _, o := range os {
		for _, it := range o.Items {
			sum[it.SKU] += it.Qty
		}
	}
	skus := slices.Sorted(maps.Keys(sum))
	qtys := make([]int64, len(skus))
	for i, sku := range skus {
		qtys[i] = sum[sku]
	}
	return skus, qtys
}

// CreateOrder implements store.Orders. Concurrent calls are committed
// together in groups (see group.go) unless Config.CreateGroup is 1.
func (s *Store) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	if s.groups == nil {
		return s.createOne(ctx, p)
	}
	return s.groups.create(ctx, p)
}

// createOne creates one order in a transaction of its own. The idempotency
// key is taken first, so concurrent retries of one request queue on it and
// replay the first's order.
func (s *Store) createOne(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	p.Items = store.ItemsBySKU(p.Items)
	skus, qtys := make([]string, len(p.Items)), make([]int64, len(p.Items))
	for i, it := range p.Items {
		skus[i], qtys[i] = it.SKU, it.Qty
	}
	var res store.CreateOrderResult
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		o := p.NewOrder(now)
		if p.IdempotencyKey != "" {
			var key string
			err := tx.QueryRow(ctx, q.Get("idempotency_claim"), p.IdempotencyKey, p.RequestHash, o.ID, now).Scan(&key)
			if errors.Is(err, pgx.ErrNoRows) { // the key is taken: replay its order
				var hash, id string
				if err := tx.QueryRow(ctx, q.Get("idempotency_get"), p.IdempotencyKey).Scan(&hash, &id); err != nil {
					return fmt.Errorf("idempotency key: %w", err)
				}
				if hash != p.RequestHash {
					return store.ErrIdempotencyMismatch
				}
				existing, err := queryOrder(ctx, tx, q.Get("get_order"), id)
				if err != nil {
					return fmt.Errorf("load order %s of idempotency key: %w", id, err)
				}
				res = store.CreateOrderResult{Order: existing, Replayed: true}
				return nil
			} else if err != nil {
				return fmt.Errorf("idempotency key: %w", err)
			}
		}
		_, err = tx.Exec(ctx, q.Get("insert_order"), o.ID, o.AmountCents, o.Currency, o.CreatedAt, o.ExpiresAt, o.CancelAfter)
		if err != nil {
			if err := interpretError(err); errors.Is(err, store.ErrOrderExists) {
				return err
			}
			return fmt.Errorf("insert order: %w", err)
		}
		for _, it := range p.Items {
			tag, err := tx.Exec(ctx, q.Get("reserve_sku"), it.Qty, it.SKU, now)
			if err != nil {
				return fmt.Errorf("reserve %s: %w", it.SKU, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: sku %q", store.ErrInsufficientStock, it.SKU)
			}
		}
		if _, err := tx.Exec(ctx, q.Get("insert_items"), o.ID, skus, qtys); err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
		res = store.CreateOrderResult{Order: o}
		return writeEffects(ctx, tx, now, moveReserve, order.EventCreated, o)
	})
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("create order %s: %w", p.ID, err)
	}
	return res, nil
}

// GetOrder implements store.Orders.
func (s *Store) GetOrder(ctx context.Context, id string) (order.Order, error) {
	o, err := queryOrder(ctx, s.pool, q.Get("get_order"), id)
	if err != nil {
		return order.Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// ListOrders implements store.Orders.
func (s *Store) ListOrders(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	after, afterID := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}, ""
	if p.Cursor != "" {
		c, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			return store.ListOrdersResult{}, err
		}
		after, afterID = pgtype.Timestamptz{Time: c, Valid: true}, id
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	os, err := queryOrders(ctx, s.pool, q.Get("list_orders"), string(p.Status), after, afterID, limit+1)
	if err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("list orders: %w", err)
	}
	return store.Page(os, limit), nil
}

// StartPayment implements store.Orders.
func (s *Store) StartPayment(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("start_payment"), id, now)
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		// The update matched nothing: say why.
		if o, err = queryOrder(ctx, tx, q.Get("get_order"), id); err != nil {
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
func (s *Store) replayed(ctx context.Context, tx pgx.Tx, now time.Time, p store.PaymentParams) (bool, error) {
	if p.CallbackID == "" {
		return false, nil
	}
	if _, err := tx.Exec(ctx, q.Get("callback_purge"), now.Add(-store.CallbackMemory)); err != nil {
		return false, fmt.Errorf("purge callback ids: %w", err)
	}
	tag, err := tx.Exec(ctx, q.Get("callback_seen"), p.CallbackID, p.OrderID, now)
	if err != nil {
		return false, fmt.Errorf("record callback id: %w", err)
	}
	return tag.RowsAffected() == 0, nil
}

// replay answers a replayed callback with the order as it is.
func replay(ctx context.Context, tx pgx.Tx, p store.PaymentParams) (store.PaymentResult, error) {
	o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
	return store.PaymentResult{Order: o, Outcome: store.OutcomeReplayed}, err
}

// CompletePayment implements store.Orders.
func (s *Store) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	var res store.PaymentResult
	err := s.tx(ctx, func(tx pgx.Tx) error {
		res = store.PaymentResult{}
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		if seen, err := s.replayed(ctx, tx, now, p); err != nil || seen {
			if err == nil {
				res, err = replay(ctx, tx, p)
			}
			return err
		}
		o, err := queryOrder(ctx, tx, q.Get("mark_paid"), p.OrderID, now, p.PaymentID, p.AmountCents)
		if err == nil {
			res = store.PaymentResult{Order: o, Outcome: store.OutcomePaid}
			return writeEffects(ctx, tx, now, moveCommit, order.EventPaid, o)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("flag_refund"), p.OrderID, p.PaymentID, p.AmountCents)
		if err == nil {
			res = store.PaymentResult{Order: o, Outcome: store.OutcomeRefundRequired}
			return writeEffects(ctx, tx, now, moveNone, order.EventRefundRequired, o)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if o, err = queryOrder(ctx, tx, q.Get("get_order"), p.OrderID); err != nil {
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		res = store.PaymentResult{}
		if p.CallbackID != "" {
			now, err := s.now(ctx, tx)
			if err != nil {
				return err
			}
			if seen, err := s.replayed(ctx, tx, now, p); err != nil || seen {
				if err == nil {
					res, err = replay(ctx, tx, p)
				}
				return err
			}
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		o, err = queryOrder(ctx, tx, q.Get("buyer_cancel"), id, now)
		if err == nil {
			return writeEffects(ctx, tx, now, moveRelease, order.EventCancelled, o)
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

// CancelDue implements store.Orders: one transaction per batch, one UPDATE
// deciding which orders it cancels, then the ledger, counters and events of
// exactly those orders, set-based.
func (s *Store) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	var res store.CancelDueResult
	if len(p.IDs) == 0 && p.Claim <= 0 {
		return res, nil
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		res = store.CancelDueResult{Now: now}
		var cancelled []order.Order
		if len(p.IDs) > 0 {
			cancelled, err = queryOrders(ctx, tx, q.Get("cancel_due"), now, p.IDs, p.SkipAttempted, p.Confirmed)
		} else {
			cancelled, err = queryOrders(ctx, tx, q.Get("claim_due"), now, now.Add(-p.Lag), p.Claim, p.SkipAttempted)
		}
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		done := make(map[string]bool, len(cancelled))
		for _, o := range cancelled {
			done[o.ID] = true
			res.Cancelled = append(res.Cancelled, store.Cancelled{
				ID: o.ID, CancelAfter: o.CancelAfter, CancelledAt: o.CancelledAt, PaymentAttempts: o.PaymentAttempts,
			})
		}
		if err := writeEffects(ctx, tx, now, moveRelease, order.EventCancelled, cancelled...); err != nil {
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
		// Why the others were left: their rows, items not needed.
		rows, err := tx.Query(ctx, q.Get("get_orders"), rest)
		if err != nil {
			return fmt.Errorf("read skipped: %w", err)
		}
		others, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Order, error) { return scanOrder(r) })
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
		if len(p.IDs) == 0 {
			return store.CancelDueResult{}, fmt.Errorf("cancel due claim of %d: %w", p.Claim, err)
		}
		return store.CancelDueResult{}, fmt.Errorf("cancel due batch of %d: %w", len(p.IDs), err)
	}
	return res, nil
}

// PaymentChecks implements store.Orders.
func (s *Store) PaymentChecks(ctx context.Context, lag time.Duration, limit int) ([]store.Deadline, error) {
	now, err := s.now(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	out, err := queryDeadlines(ctx, s.pool, q.Get("payment_checks"), now.Add(-lag), limit)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	return out, nil
}

// NextDeadline implements store.Orders.
func (s *Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var at *time.Time
	if err := s.pool.QueryRow(ctx, q.Get("next_deadline")).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next deadline: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return at.UTC(), true, nil
}

// PendingDeadlines implements store.Orders.
func (s *Store) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	from := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if !after.CancelAfter.IsZero() {
		from = pgtype.Timestamptz{Time: after.CancelAfter, Valid: true}
	}
	out, err := queryDeadlines(ctx, s.pool, q.Get("pending_deadlines"), from, after.OrderID, limit)
	if err != nil {
		return nil, fmt.Errorf("pending deadlines: %w", err)
	}
	return out, nil
}

// queryDeadlines runs a query returning (id, cancel_after) rows.
func queryDeadlines(ctx context.Context, db querier, query string, args ...any) ([]store.Deadline, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Deadline, error) {
		var d store.Deadline
		err := r.Scan(&d.OrderID, &d.CancelAfter)
		d.CancelAfter = d.CancelAfter.UTC()
		return d, err
	})
}

// CountStuck implements store.Orders.
func (s *Store) CountStuck(ctx context.Context) (int64, error) {
	now, err := s.now(ctx, s.pool)
	if err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, q.Get("count_stuck"), now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	return n, nil
}
