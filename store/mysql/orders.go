package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// maxList bounds the placeholders of one expanded list: longer lists are cut
// into several statements of the same transaction (MySQL allows 65,535
// placeholders per statement; batches are 100–200 orders).
const maxList = 500

// Sentinels for "no bound" in keyset pagination: DATETIME's range.
var (
	minTime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
)

// each expands the /*each*/ marker of query: the `?` or parenthesised tuple
// right after it is repeated n times, comma-separated. Only placeholders are
// ever added to the text; the values go as arguments.
func each(query string, n int) string {
	const marker = "/*each*/"
	at := strings.Index(query, marker)
	if at < 0 || n < 1 {
		panic(fmt.Sprintf("mysql: each(%d) on a query without %s", n, marker))
	}
	rest := query[at+len(marker):]
	unit := "?"
	if strings.HasPrefix(rest, "(") {
		unit = rest[:strings.IndexByte(rest, ')')+1]
	}
	var b strings.Builder
	b.Grow(len(query) + n*(len(unit)+2))
	b.WriteString(query[:at])
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(unit)
	}
	b.WriteString(rest[len(unit):])
	return b.String()
}

// chunks cuts xs into pieces of at most maxList.
func chunks[T any](xs []T) [][]T {
	var out [][]T
	for len(xs) > maxList {
		out = append(out, xs[:maxList])
		xs = xs[maxList:]
	}
	if len(xs) > 0 {
		out = append(out, xs)
	}
	return out
}

// args makes query arguments: the values of before, then every element of
// list, then the values of after.
func args[T any](before []any, list []T, after ...any) []any {
	out := make([]any, 0, len(before)+len(list)+len(after))
	out = append(out, before...)
	for _, x := range list {
		out = append(out, x)
	}
	return append(out, after...)
}

// affected runs one statement and returns its affected-row count (matched
// rows: the connection sets CLIENT_FOUND_ROWS).
func affected(ctx context.Context, db querier, query string, a ...any) (int64, error) {
	r, err := db.ExecContext(ctx, query, a...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// scanOrders reads rows of order columns followed by one item's sku and qty,
// an order's rows consecutive (the queries sort by the order first).
func scanOrders(rows *sql.Rows) ([]order.Order, error) {
	defer rows.Close()
	var out []order.Order
	for rows.Next() {
		var (
			o                   order.Order
			status              string
			paidAt, cancelledAt sql.NullTime
			reason, paymentID   sql.NullString
			sku                 sql.NullString
			qty                 sql.NullInt64
		)
		err := rows.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &o.CreatedAt, &o.ExpiresAt, &o.CancelAfter,
			&paidAt, &cancelledAt, &reason, &paymentID, &o.RefundRequired, &o.PaymentAttempts, &o.Version, &sku, &qty)
		if err != nil {
			return nil, err
		}
		if n := len(out); n == 0 || out[n-1].ID != o.ID {
			o.Status = order.Status(status)
			if paidAt.Valid {
				o.PaidAt = paidAt.Time
			}
			if cancelledAt.Valid {
				o.CancelledAt = cancelledAt.Time
			}
			o.CancelReason = order.CancelReason(reason.String)
			o.PaymentID = paymentID.String
			out = append(out, o)
		}
		if sku.Valid {
			last := &out[len(out)-1]
			last.Items = append(last.Items, order.Item{SKU: sku.String, Qty: qty.Int64})
		}
	}
	return out, rows.Err()
}

// queryOrders runs a query returning order rows with their items.
func queryOrders(ctx context.Context, db querier, query string, a ...any) ([]order.Order, error) {
	rows, err := db.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	return scanOrders(rows)
}

// queryOrder is queryOrders for one order; ErrNotFound when none.
func queryOrder(ctx context.Context, db querier, query string, a ...any) (order.Order, error) {
	os, err := queryOrders(ctx, db, query, a...)
	if err != nil {
		return order.Order{}, err
	}
	if len(os) == 0 {
		return order.Order{}, store.ErrNotFound
	}
	return os[0], nil
}

// getOrders reads the orders of ids (missing ones are left out), by id.
func getOrders(ctx context.Context, db querier, ids []string) (map[string]order.Order, error) {
	out := make(map[string]order.Order, len(ids))
	for _, chunk := range chunks(ids) {
		os, err := queryOrders(ctx, db, each(q.Get("get_orders"), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return nil, err
		}
		for _, o := range os {
			out[o.ID] = o
		}
	}
	return out, nil
}

// insertEvents writes one outbox row per order, its payload the order as the
// API shows it, in one multi-row INSERT.
func insertEvents(ctx context.Context, tx *sql.Tx, now time.Time, typ string, os ...order.Order) error {
	for _, chunk := range chunks(os) {
		a := make([]any, 0, 5*len(chunk))
		for _, o := range chunk {
			payload, err := json.Marshal(o)
			if err != nil {
				return fmt.Errorf("encode %s event: %w", typ, err)
			}
			a = append(a, uuid.Must(uuid.NewV7()).String(), typ, o.ID, string(payload), now)
		}
		if _, err := tx.ExecContext(ctx, each(q.Get("insert_events"), len(chunk)), a...); err != nil {
			return fmt.Errorf("write %s events: %w", typ, err)
		}
	}
	return nil
}

// moveStock writes the ledger rows of action ("release" or "commit") for
// every item of the orders and applies the matching counter update. The
// ledger goes first: its primary key refuses a second release or commit, and
// the error rolls the whole transaction back. The SKU rows are then locked in
// SKU order, and updated set-based.
func moveStock(ctx context.Context, tx *sql.Tx, now time.Time, action string, os []order.Order) error {
	if len(os) == 0 {
		return nil
	}
	ids := make([]string, len(os))
	var skus []string
	for i, o := range os {
		ids[i] = o.ID
		for _, it := range o.Items {
			skus = append(skus, it.SKU)
		}
	}
	slices.Sort(skus)
	skus = slices.Compact(skus)
	for _, chunk := range chunks(ids) {
		if _, err := tx.ExecContext(ctx, each(q.Get("ledger_insert"), len(chunk)), args([]any{action, now}, chunk)...); err != nil {
			return fmt.Errorf("stock ledger %s: %w", action, interpretError(err, errLedgerRefused))
		}
	}
	for _, chunk := range chunks(skus) {
		rows, err := tx.QueryContext(ctx, each(q.Get("lock_skus"), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return fmt.Errorf("lock skus: %w", err)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("lock skus: %w", err)
		}
	}
	counter := map[string]string{"release": "release_stock", "commit": "commit_stock"}[action]
	for _, chunk := range chunks(ids) {
		if _, err := tx.ExecContext(ctx, each(q.Get(counter), len(chunk)), args(nil, chunk, now)...); err != nil {
			return fmt.Errorf("stock %s: %w", action, err)
		}
	}
	return nil
}

// CreateOrder implements store.Orders.
func (s *Store) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	var res store.CreateOrderResult
	// Reserve in SKU order: two orders sharing SKUs lock them in the same order.
	byKey := store.ItemsBySKU(p.Items)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		o := p.NewOrder(now)
		if p.IdempotencyKey != "" {
			// The key goes first: a concurrent request with the same key waits
			// here until this transaction ends, then finds the key and replays.
			_, err := tx.ExecContext(ctx, q.Get("idempotency_put"), p.IdempotencyKey, p.RequestHash, o.ID, now)
			if isDuplicate(err) {
				var hash, id string
				if err := tx.QueryRowContext(ctx, q.Get("idempotency_get"), p.IdempotencyKey).Scan(&hash, &id); err != nil {
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
		_, err = tx.ExecContext(ctx, q.Get("insert_order"), o.ID, o.AmountCents, o.Currency,
			o.CreatedAt, o.ExpiresAt, o.CancelAfter)
		if err != nil {
			return fmt.Errorf("insert order: %w", interpretError(err, store.ErrOrderExists))
		}
		for _, it := range byKey {
			n, err := affected(ctx, tx, q.Get("reserve_sku"), it.Qty, it.Qty, now, it.SKU, it.Qty)
			if err != nil {
				return fmt.Errorf("reserve %s: %w", it.SKU, err)
			}
			if n == 0 {
				return fmt.Errorf("%w: sku %q", store.ErrInsufficientStock, it.SKU)
			}
		}
		for _, chunk := range chunks(byKey) {
			a := make([]any, 0, 3*len(chunk))
			for _, it := range chunk {
				a = append(a, o.ID, it.SKU, it.Qty)
			}
			if _, err := tx.ExecContext(ctx, each(q.Get("insert_items"), len(chunk)), a...); err != nil {
				return fmt.Errorf("insert items: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, each(q.Get("ledger_insert"), 1), "reserve", now, o.ID); err != nil {
			return fmt.Errorf("stock ledger reserve: %w", interpretError(err, errLedgerRefused))
		}
		res = store.CreateOrderResult{Order: o}
		return insertEvents(ctx, tx, now, order.EventCreated, o)
	})
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("create order %s: %w", p.ID, err)
	}
	return res, nil
}

// GetOrder implements store.Orders.
func (s *Store) GetOrder(ctx context.Context, id string) (order.Order, error) {
	o, err := queryOrder(ctx, s.db, q.Get("get_order"), id)
	if err != nil {
		return order.Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// ListOrders implements store.Orders.
func (s *Store) ListOrders(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	afterCreated, afterID := maxTime, ""
	if p.Cursor != "" {
		c, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			return store.ListOrdersResult{}, err
		}
		afterCreated, afterID = c, id
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	status := string(p.Status)
	os, err := queryOrders(ctx, s.db, q.Get("list_orders"), status, status, afterCreated, afterCreated, afterID, limit+1)
	if err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("list orders: %w", err)
	}
	return store.Page(os, limit), nil
}

// StartPayment implements store.Orders.
func (s *Store) StartPayment(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		for range 2 {
			n, err := affected(ctx, tx, q.Get("start_payment"), id, now)
			if err != nil {
				return err
			}
			if n == 1 {
				o, err = queryOrder(ctx, tx, q.Get("get_order"), id)
				return err
			}
			// The update matched nothing: say why, from the row as it is now.
			if o, err = queryOrder(ctx, tx, q.Get("lock_order"), id); err != nil {
				return err
			}
			switch {
			case o.Status == order.Paying:
				return nil
			case o.Status == order.Pending && !o.ExpiresAt.After(now):
				return store.ErrOrderExpired
			case o.Status != order.Pending:
				return store.ErrNotPending
			}
			// PENDING and not expired: a failed payment put it back after the
			// UPDATE looked. The row is locked now, so the next UPDATE decides.
		}
		return fmt.Errorf("order changed while locked")
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
	if _, err := tx.ExecContext(ctx, q.Get("callback_purge"), now.Add(-store.CallbackMemory)); err != nil {
		return false, fmt.Errorf("purge callback ids: %w", err)
	}
	n, err := affected(ctx, tx, q.Get("callback_seen"), p.CallbackID, p.OrderID, now)
	if err != nil {
		return false, fmt.Errorf("record callback id: %w", err)
	}
	return n == 0, nil
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
		n, err := affected(ctx, tx, q.Get("mark_paid"), now, p.PaymentID, p.OrderID, p.AmountCents)
		if err != nil {
			return err
		}
		if n == 1 {
			o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
			if err != nil {
				return err
			}
			res = store.PaymentResult{Order: o, Outcome: store.OutcomePaid}
			if err := moveStock(ctx, tx, now, "commit", []order.Order{o}); err != nil {
				return err
			}
			return insertEvents(ctx, tx, now, order.EventPaid, o)
		}
		// PAID and CANCELLED are final, so what follows sees a settled status.
		n, err = affected(ctx, tx, q.Get("flag_refund"), p.PaymentID, p.OrderID, p.AmountCents)
		if err != nil {
			return err
		}
		if n == 1 {
			o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
			if err != nil {
				return err
			}
			res = store.PaymentResult{Order: o, Outcome: store.OutcomeRefundRequired}
			return insertEvents(ctx, tx, now, order.EventRefundRequired, o)
		}
		o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
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
		n, err := affected(ctx, tx, q.Get("fail_payment"), p.OrderID)
		if err != nil {
			return err
		}
		o, err := queryOrder(ctx, tx, q.Get("get_order"), p.OrderID)
		res = store.PaymentResult{Order: o, Outcome: store.OutcomeNoChange}
		if n == 1 {
			res.Outcome = store.OutcomeFailed
		}
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
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		for range 2 {
			n, err := affected(ctx, tx, q.Get("buyer_cancel"), now, id)
			if err != nil {
				return err
			}
			if n == 1 {
				if o, err = queryOrder(ctx, tx, q.Get("get_order"), id); err != nil {
					return err
				}
				if err := moveStock(ctx, tx, now, "release", []order.Order{o}); err != nil {
					return err
				}
				return insertEvents(ctx, tx, now, order.EventCancelled, o)
			}
			if o, err = queryOrder(ctx, tx, q.Get("lock_order"), id); err != nil {
				return err
			}
			if o.Status != order.Pending {
				return store.ErrNotPending
			}
			// PENDING again (a failed payment): locked now, so try once more.
		}
		return fmt.Errorf("order changed while locked")
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
	// A duplicate id in the batch is reported once; the locks are taken in id
	// order, so two batches sharing orders queue rather than deadlock.
	var uniq []string
	seen := make(map[string]bool, len(p.IDs))
	for _, id := range p.IDs {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	sorted := slices.Sorted(slices.Values(uniq))
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		res = store.CancelDueResult{Now: now}
		// Step 1: lock exactly the orders to cancel.
		var locked []string
		if len(uniq) > 0 {
			for _, chunk := range chunks(sorted) {
				ids, err := queryIDs(ctx, tx, each(q.Get("lock_due"), len(chunk)), args(nil, chunk, now, confirmed, skip, confirmed)...)
				if err != nil {
					return fmt.Errorf("lock due orders: %w", err)
				}
				locked = append(locked, ids...)
			}
		} else {
			if locked, err = queryIDs(ctx, tx, q.Get("claim_due"), now.Add(-p.Lag), skip, p.Claim); err != nil {
				return fmt.Errorf("claim due orders: %w", err)
			}
		}
		// Steps 2–4: cancel them, release their stock, write their events.
		cancelled, err := cancelLocked(ctx, tx, now, locked, confirmed)
		if err != nil {
			return err
		}
		done := make(map[string]bool, len(cancelled))
		for _, o := range cancelled {
			done[o.ID] = true
			res.Cancelled = append(res.Cancelled, store.Cancelled{
				ID: o.ID, CancelAfter: o.CancelAfter, CancelledAt: o.CancelledAt, PaymentAttempts: o.PaymentAttempts,
			})
		}
		var rest []string
		for _, id := range uniq {
			if !done[id] {
				rest = append(rest, id)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		found, err := getOrders(ctx, tx, rest)
		if err != nil {
			return fmt.Errorf("read skipped: %w", err)
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
		return store.CancelDueResult{}, fmt.Errorf("cancel due batch of %d: %w", max(len(p.IDs), p.Claim), err)
	}
	return res, nil
}

// cancelLocked cancels the orders ids, which this transaction holds locked
// and found due, and returns them as they are now, in the order of ids.
func cancelLocked(ctx context.Context, tx *sql.Tx, now time.Time, ids []string, confirmed int) ([]order.Order, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var n int64
	for _, chunk := range chunks(ids) {
		k, err := affected(ctx, tx, each(q.Get("cancel_due"), len(chunk)), args([]any{now}, chunk, now, confirmed)...)
		if err != nil {
			return nil, fmt.Errorf("cancel: %w", err)
		}
		n += k
	}
	if n != int64(len(ids)) {
		// The rows are locked and were due: this cannot happen.
		return nil, fmt.Errorf("cancel: %d of %d locked orders changed", n, len(ids))
	}
	byID, err := getOrders(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("read cancelled: %w", err)
	}
	os := make([]order.Order, len(ids))
	for i, id := range ids {
		os[i] = byID[id]
	}
	if err := moveStock(ctx, tx, now, "release", os); err != nil {
		return nil, err
	}
	if err := insertEvents(ctx, tx, now, order.EventCancelled, os...); err != nil {
		return nil, err
	}
	return os, nil
}

func queryIDs(ctx context.Context, tx *sql.Tx, query string, a ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// PaymentChecks implements store.Orders.
func (s *Store) PaymentChecks(ctx context.Context, lag time.Duration, limit int) ([]store.Deadline, error) {
	now, err := s.now(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	out, err := queryDeadlines(ctx, s.db, q.Get("payment_checks"), now.Add(-lag), limit)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	return out, nil
}

// NextDeadline implements store.Orders.
func (s *Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullTime
	if err := s.db.QueryRowContext(ctx, q.Get("next_deadline")).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next deadline: %w", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return at.Time, true, nil
}

// PendingDeadlines implements store.Orders.
func (s *Store) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	from := minTime
	if !after.CancelAfter.IsZero() {
		from = after.CancelAfter
	}
	out, err := queryDeadlines(ctx, s.db, q.Get("pending_deadlines"), from, from, after.OrderID, limit)
	if err != nil {
		return nil, fmt.Errorf("pending deadlines: %w", err)
	}
	return out, nil
}

// queryDeadlines runs a query returning (id, cancel_after) rows.
func queryDeadlines(ctx context.Context, db querier, query string, a ...any) ([]store.Deadline, error) {
	rows, err := db.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Deadline
	for rows.Next() {
		var d store.Deadline
		if err := rows.Scan(&d.OrderID, &d.CancelAfter); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// CountStuck implements store.Orders.
func (s *Store) CountStuck(ctx context.Context) (int64, error) {
	now, err := s.now(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, q.Get("count_stuck"), now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count stuck payments: %w", err)
	}
	return n, nil
}
