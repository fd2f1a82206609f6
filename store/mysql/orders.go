package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
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
func (e executor) affected(ctx context.Context, query string, a ...any) (int64, error) {
	r, err := e.db.ExecContext(ctx, query, a...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// queryOrders runs a query returning rows of order columns followed by one
// item's sku and qty, an order's rows consecutive (the queries sort by the
// order first), and gathers them into orders with their items.
func (e executor) queryOrders(ctx context.Context, query string, a ...any) ([]order.Order, error) {
	var out []order.Order
	err := sqlrows.Each(ctx, e.db, query, a, func(rows *sql.Rows) error {
		var (
			o                   order.Order
			status              string
			paidAt, cancelledAt sql.NullTime
			reason, paymentID   sql.NullString
			reservationID       sql.NullString
			sku                 sql.NullString
			qty                 sql.NullInt64
		)
		err := rows.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &o.CreatedAt, &o.ExpiresAt, &o.CancelAfter,
			&paidAt, &cancelledAt, &reason, &paymentID, &o.RefundRequired, &o.PaymentAttempts, &o.Version, &reservationID, &sku, &qty)
		if err != nil {
			return err
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
			o.ReservationID = reservationID.String
			out = append(out, o)
		}
		if sku.Valid {
			last := &out[len(out)-1]
			last.Items = append(last.Items, order.Item{SKU: sku.String, Qty: qty.Int64})
		}
		return nil
	})
	return out, err
}

// queryOrder is queryOrders for one order; store.ErrNotFound when none.
func (e executor) queryOrder(ctx context.Context, query string, a ...any) (order.Order, error) {
	os, err := e.queryOrders(ctx, query, a...)
	if err != nil {
		return order.Order{}, err
	}
	if len(os) == 0 {
		return order.Order{}, store.ErrNotFound
	}
	return os[0], nil
}

// Orders implements core.Executor.
func (e executor) Orders(ctx context.Context, ids []string) ([]order.Order, error) {
	var out []order.Order
	for _, chunk := range chunks(ids) {
		os, err := e.queryOrders(ctx, each(q.Get("get_orders"), len(chunk)), args(nil, chunk)...)
		if err != nil {
			return nil, err
		}
		out = append(out, os...)
	}
	return out, nil
}

// ListOrders implements core.Executor.
func (e executor) ListOrders(ctx context.Context, a core.ListArgs) ([]order.Order, error) {
	if a.First {
		a.AfterCreated, a.AfterID = maxTime, ""
	}
	status := string(a.Status)
	return e.queryOrders(ctx, q.Get("list_orders"), status, status, a.AfterCreated, a.AfterCreated, a.AfterID, a.Limit)
}

// LockOrder implements core.Executor.
func (e executor) LockOrder(ctx context.Context, id string) (order.Order, error) {
	return e.queryOrder(ctx, q.Get("lock_order"), id)
}

// ClaimKey implements core.Executor: the INSERT of a key another request
// holds waits for that request's transaction, then fails with a duplicate
// key, which leaves this transaction going.
func (e executor) ClaimKey(ctx context.Context, k core.Key, now time.Time) (bool, error) {
	_, err := e.db.ExecContext(ctx, q.Get("idempotency_put"), k.Key, k.RequestHash, k.OrderID, now)
	if isDuplicate(err) {
		return false, nil
	}
	return err == nil, err
}

// KeyOwner implements core.Executor.
func (e executor) KeyOwner(ctx context.Context, key string) (hash, orderID string, err error) {
	err = e.db.QueryRowContext(ctx, q.Get("idempotency_get"), key).Scan(&hash, &orderID)
	return hash, orderID, interpretError(err, nil)
}

// InsertOrder implements core.Executor: the order row, then its items in
// one multi-row INSERT.
func (e executor) InsertOrder(ctx context.Context, o order.Order) error {
	_, err := e.db.ExecContext(ctx, q.Get("insert_order"), o.ID, o.AmountCents, o.Currency,
		o.CreatedAt, o.ExpiresAt, o.CancelAfter, o.ReservationID)
	if err != nil {
		if isDuplicate(err) && strings.Contains(err.Error(), "orders_reservation") {
			return interpretError(err, store.ErrReservationUsed)
		}
		return interpretError(err, store.ErrOrderExists)
	}
	for _, chunk := range chunks(o.Items) {
		a := make([]any, 0, 3*len(chunk))
		for _, it := range chunk {
			a = append(a, o.ID, it.SKU, it.Qty)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("insert_items"), len(chunk)), a...); err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
	}
	return nil
}

// ReserveSKU implements core.Executor.
func (e executor) ReserveSKU(ctx context.Context, sku string, qty int64, now time.Time) (bool, error) {
	n, err := e.affected(ctx, q.Get("reserve_sku"), qty, qty, now, sku, qty)
	return n == 1, err
}

// transition runs the guarded UPDATE query of order id and, when it matched
// the row, reads the order back: MySQL has no UPDATE … RETURNING.
func (e executor) transition(ctx context.Context, id, query string, a ...any) (order.Order, bool, error) {
	n, err := e.affected(ctx, query, a...)
	if err != nil || n != 1 {
		return order.Order{}, false, err
	}
	o, err := e.queryOrder(ctx, q.Get("get_order"), id)
	return o, err == nil, err
}

// StartPayment implements core.Executor.
func (e executor) StartPayment(ctx context.Context, id, paymentID string, now time.Time) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("start_payment"), paymentID, paymentID, id, id, now)
}

// SupersedePayment implements core.Executor.
func (e executor) SupersedePayment(ctx context.Context, id, oldID, newID string, now time.Time) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("supersede_payment"), newID, id, oldID, oldID, now)
}

// MarkPaid implements core.Executor.
func (e executor) MarkPaid(ctx context.Context, p store.PaymentParams, now time.Time) (order.Order, bool, error) {
	return e.transition(ctx, p.OrderID, q.Get("mark_paid"), now, p.PaymentID, p.OrderID, p.AmountCents,
		p.Currency, p.Currency, p.OrderID, p.PaymentID, p.PaymentID)
}

// FlagRefund implements core.Executor. The flag records no time.
func (e executor) FlagRefund(ctx context.Context, id, paymentID string, _ time.Time) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("flag_refund"), paymentID, paymentID, id)
}

// FailPayment implements core.Executor.
func (e executor) FailPayment(ctx context.Context, id, paymentID string) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("fail_payment"), id, paymentID)
}

// Payments implements core.Executor.
func (e executor) Payments(ctx context.Context, orderID string) ([]order.Payment, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("get_payments"), []any{orderID}, func(r *sql.Rows) (order.Payment, error) {
		var p order.Payment
		var status string
		err := r.Scan(&p.PaymentID, &status, &p.AmountCents, &p.Currency, &p.Conflicts, &p.CreatedAt, &p.UpdatedAt)
		p.Status = order.PaymentStatus(status)
		return p, err
	})
}

// InsertPayment implements core.Executor. A duplicate key fails only the
// INSERT, not the transaction (which the core ends).
func (e executor) InsertPayment(ctx context.Context, orderID string, p order.Payment) error {
	_, err := e.db.ExecContext(ctx, q.Get("insert_payment"), orderID, p.PaymentID, string(p.Status), p.AmountCents,
		p.Currency, p.CreatedAt, p.CreatedAt)
	return interpretError(err, store.ErrPaymentIDUsed)
}

// SavePayment implements core.Executor: the attempt's row if it is recorded
// and open (clientFoundRows: a match counts even if nothing changed), else a
// new row — a duplicate then is another order's payment id, or an ended
// attempt, which the core never saves.
func (e executor) SavePayment(ctx context.Context, orderID string, p order.Payment) error {
	n, err := e.affected(ctx, q.Get("save_payment"), string(p.Status), p.AmountCents, p.Currency, p.UpdatedAt, orderID, p.PaymentID)
	if err != nil || n == 1 {
		return err
	}
	p.CreatedAt = p.UpdatedAt
	return e.InsertPayment(ctx, orderID, p)
}

// NoteConflict implements core.Executor.
func (e executor) NoteConflict(ctx context.Context, orderID, paymentID string) error {
	_, err := e.db.ExecContext(ctx, q.Get("note_conflict"), orderID, paymentID)
	return err
}

// EndPayment implements core.Executor.
func (e executor) EndPayment(ctx context.Context, orderID, paymentID string, status order.PaymentStatus, now time.Time) (bool, error) {
	n, err := e.affected(ctx, q.Get("end_payment"), string(status), now, orderID, paymentID)
	return n == 1, err
}

// ExtendOrder implements core.Executor.
func (e executor) ExtendOrder(ctx context.Context, id string, expiresAt, now time.Time) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("extend_order"), expiresAt, expiresAt, id, now)
}

// BuyerCancel implements core.Executor.
func (e executor) BuyerCancel(ctx context.Context, id string, now time.Time) (order.Order, bool, error) {
	return e.transition(ctx, id, q.Get("buyer_cancel"), now, id)
}

// CancelDue implements core.Executor: lock exactly the orders of the batch
// to cancel (in id order, so batches sharing orders queue rather than
// deadlock), then cancel them.
func (e executor) CancelDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	locked, err := e.lockDue(ctx, a)
	if err != nil {
		return nil, err
	}
	return e.moveLocked(ctx, "cancel_due", []any{a.Now, string(a.Reason)}, locked, a.Now, a.Anytime, a.Confirmed)
}

// lockDue locks the orders of a batch that are due (lock_due), in id order.
func (e executor) lockDue(ctx context.Context, a core.CancelArgs) ([]string, error) {
	var locked []string
	for _, chunk := range chunks(a.IDs) {
		ids, err := e.queryIDs(ctx, each(q.Get("lock_due"), len(chunk)),
			args(nil, chunk, a.Now, a.Anytime, a.Confirmed, a.SkipAttempted, a.Confirmed)...)
		if err != nil {
			return nil, fmt.Errorf("lock due orders: %w", err)
		}
		locked = append(locked, ids...)
	}
	return locked, nil
}

// ClaimDue implements core.Executor: lock up to a.Limit due orders no other
// transaction holds, earliest first, then cancel them.
func (e executor) ClaimDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	locked, err := e.claimDue(ctx, a)
	if err != nil {
		return nil, err
	}
	return e.moveLocked(ctx, "cancel_due", []any{a.Now, string(order.ReasonTimeout)}, locked, a.Now, false, false)
}

// claimDue locks up to a.Limit due orders no other transaction holds: the
// earliest due (claim_due, without a lock), then those of them it can lock
// by primary key (claim_lock), in id order.
func (e executor) claimDue(ctx context.Context, a core.ClaimArgs) ([]string, error) {
	due, err := e.queryIDs(ctx, q.Get("claim_due"), a.DueBy, a.SkipAttempted, a.Now, a.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim due orders: %w", err)
	}
	if len(due) == 0 {
		return nil, nil
	}
	slices.Sort(due)
	var locked []string
	for _, chunk := range chunks(due) {
		ids, err := e.queryIDs(ctx, each(q.Get("claim_lock"), len(chunk)), args(nil, chunk, a.DueBy, a.SkipAttempted)...)
		if err != nil {
			return nil, fmt.Errorf("lock claimed orders: %w", err)
		}
		locked = append(locked, ids...)
	}
	return locked, nil
}

// moveLocked runs the transition named (cancel_due, command_due: params
// lead, the ids, tail) on the orders ids, which this transaction
// holds locked and found due, and reads them back, in the order of ids.
func (e executor) moveLocked(ctx context.Context, name string, lead []any, ids []string, tail ...any) ([]order.Order, error) {
	var n int64
	for _, chunk := range chunks(ids) {
		k, err := e.affected(ctx, each(q.Get(name), len(chunk)), args(lead, chunk, tail...)...)
		if err != nil {
			return nil, err
		}
		n += k
	}
	if n != int64(len(ids)) {
		// The rows are locked and were due: this cannot happen.
		return nil, fmt.Errorf("%d of %d locked orders changed", n, len(ids))
	}
	cancelled, err := e.Orders(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read cancelled: %w", err)
	}
	byID := make(map[string]order.Order, len(cancelled))
	for _, o := range cancelled {
		byID[o.ID] = o
	}
	os := make([]order.Order, len(ids))
	for i, id := range ids {
		os[i] = byID[id]
	}
	return os, nil
}

// queryIDs runs a query returning order ids.
func (e executor) queryIDs(ctx context.Context, query string, a ...any) ([]string, error) {
	return sqlrows.Collect(ctx, e.db, query, a, func(r *sql.Rows) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
}

// SeeCallback implements core.Executor: INSERT IGNORE inserts no row for a
// callback id already recorded.
func (e executor) SeeCallback(ctx context.Context, callbackID, orderID string, now, forgetBefore time.Time) (bool, error) {
	if _, err := e.db.ExecContext(ctx, q.Get("callback_purge"), forgetBefore); err != nil {
		return false, fmt.Errorf("purge callback ids: %w", err)
	}
	n, err := e.affected(ctx, q.Get("callback_seen"), callbackID, orderID, now)
	return n == 1, err
}

// PaymentChecks implements core.Executor.
func (e executor) PaymentChecks(ctx context.Context, dueBy time.Time, limit int) ([]store.Deadline, error) {
	return e.queryDeadlines(ctx, q.Get("payment_checks"), dueBy, limit)
}

// NextDeadline implements core.Executor.
func (e executor) NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error) {
	var at sql.NullTime
	if err := e.db.QueryRowContext(ctx, q.Get("next_deadline"), skipAttempted, skipAttempted).Scan(&at); err != nil {
		return time.Time{}, false, err
	}
	return at.Time, at.Valid, nil
}

// PendingDeadlines implements core.Executor.
func (e executor) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	from := minTime
	if !after.CancelAfter.IsZero() {
		from = after.CancelAfter
	}
	return e.queryDeadlines(ctx, q.Get("pending_deadlines"), from, from, after.OrderID, limit)
}

// queryDeadlines runs a query returning (id, cancel_after) rows.
func (e executor) queryDeadlines(ctx context.Context, query string, a ...any) ([]store.Deadline, error) {
	return sqlrows.Collect(ctx, e.db, query, a, func(r *sql.Rows) (store.Deadline, error) {
		var d store.Deadline
		return d, r.Scan(&d.OrderID, &d.CancelAfter)
	})
}

// CountStuck implements core.Executor.
func (e executor) CountStuck(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := e.db.QueryRowContext(ctx, q.Get("count_stuck"), now).Scan(&n)
	return n, err
}

// OrdersOfPayment implements core.Executor.
func (e executor) OrdersOfPayment(ctx context.Context, paymentID string) ([]string, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("orders_of_payment"), []any{paymentID}, func(r *sql.Rows) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
}
