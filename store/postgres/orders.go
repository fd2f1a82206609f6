package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// scanOrder reads the column list every order query returns (items excluded).
func scanOrder(row pgx.CollectableRow) (order.Order, error) {
	var (
		o                   order.Order
		status              string
		paidAt, cancelledAt *time.Time
		reason, paymentID   *string
		reservationID       *string
	)
	err := row.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &o.CreatedAt, &o.ExpiresAt, &o.CancelAfter, &paidAt,
		&cancelledAt, &reason, &paymentID, &o.RefundRequired, &o.PaymentAttempts, &o.Version, &reservationID)
	if err != nil {
		return order.Order{}, err
	}
	o.Status = order.Status(status)
	o.CreatedAt, o.ExpiresAt, o.CancelAfter = o.CreatedAt.UTC(), o.ExpiresAt.UTC(), o.CancelAfter.UTC()
	setNullable(&o, paidAt, cancelledAt, reason, paymentID, reservationID)
	return o, nil
}

// setNullable sets the order's columns that may be NULL from their scanned
// values (times in UTC).
func setNullable(o *order.Order, paidAt, cancelledAt *time.Time, reason, paymentID, reservationID *string) {
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
	if reservationID != nil {
		o.ReservationID = *reservationID
	}
}

// orderSet collects the order rows of one query and the items of get_items.
type orderSet struct {
	os []order.Order
	at map[string]int // id → index in os
}

func (s *orderSet) readOrders(rows pgx.Rows) error {
	os, err := pgx.CollectRows(rows, scanOrder)
	s.os = os
	s.at = make(map[string]int, len(os))
	for i, o := range os {
		s.at[o.ID] = i
	}
	return err
}

func (s *orderSet) readItems(rows pgx.Rows) error {
	var id string
	var it order.Item
	_, err := pgx.ForEachRow(rows, []any{&id, &it.SKU, &it.Qty}, func() error {
		if i, ok := s.at[id]; ok {
			s.os[i].Items = append(s.os[i].Items, it)
		}
		return nil
	})
	return err
}

// orders runs the named query returning order rows, then get_items for the
// orders it returned: two round trips, the second skipped when no row came.
func (e executor) orders(ctx context.Context, name string, args ...any) ([]order.Order, error) {
	rows, err := e.db.Query(ctx, q.Get(name), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	var s orderSet
	if err := s.readOrders(rows); err != nil || len(s.os) == 0 {
		return s.os, interpretError(err)
	}
	ids := make([]string, len(s.os))
	for i, o := range s.os {
		ids[i] = o.ID
	}
	rows, err = e.db.Query(ctx, q.Get("get_items"), ids)
	if err == nil {
		err = s.readItems(rows)
	}
	return s.os, interpretError(err)
}

// ordersOf is orders for a query that can only return orders of ids: the
// query and get_items go in one round trip.
func (e executor) ordersOf(ctx context.Context, ids []string, name string, args ...any) ([]order.Order, error) {
	var s orderSet
	var b pgx.Batch
	b.Queue(q.Get(name), args...).Query(s.readOrders)
	b.Queue(q.Get("get_items"), ids).Query(s.readItems)
	if err := e.send(ctx, &b); err != nil {
		return nil, err
	}
	return s.os, nil
}

// one runs a query that returns the row of order id or none (a guarded
// UPDATE … RETURNING, a locking read), and reads the order's items in the
// same round trip: ok=false when no row came.
func (e executor) one(ctx context.Context, id, name string, args ...any) (order.Order, bool, error) {
	os, err := e.ordersOf(ctx, []string{id}, name, args...)
	if err != nil || len(os) == 0 {
		return order.Order{}, false, err
	}
	return os[0], true, nil
}

// Orders implements core.Executor.
func (e executor) Orders(ctx context.Context, ids []string) ([]order.Order, error) {
	return e.ordersOf(ctx, ids, "get_orders", ids)
}

// LockOrder implements core.Executor.
func (e executor) LockOrder(ctx context.Context, id string) (order.Order, error) {
	o, ok, err := e.one(ctx, id, "lock_order", id)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	return o, err
}

// ListOrders implements core.Executor.
func (e executor) ListOrders(ctx context.Context, a core.ListArgs) ([]order.Order, error) {
	after := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	if !a.First {
		after = pgtype.Timestamptz{Time: a.AfterCreated, Valid: true}
	}
	return e.orders(ctx, "list_orders", string(a.Status), after, a.AfterID, a.Limit)
}

// ClaimKey implements core.Executor.
func (e executor) ClaimKey(ctx context.Context, k core.Key, now time.Time) (bool, error) {
	tag, err := e.exec(ctx, "idempotency_claim", k.Key, k.RequestHash, k.OrderID, now)
	return tag.RowsAffected() == 1, err
}

// KeyOwner implements core.Executor.
func (e executor) KeyOwner(ctx context.Context, key string) (hash, orderID string, err error) {
	err = e.scan(ctx, "idempotency_get", []any{key}, &hash, &orderID)
	return hash, orderID, err
}

// InsertOrder implements core.Executor: the order and its items in one round trip.
func (e executor) InsertOrder(ctx context.Context, o order.Order) error {
	skus, qtys := make([]string, len(o.Items)), make([]int64, len(o.Items))
	for i, it := range o.Items {
		skus[i], qtys[i] = it.SKU, it.Qty
	}
	var b pgx.Batch
	b.Queue(q.Get("insert_order"), o.ID, o.AmountCents, o.Currency, o.CreatedAt, o.ExpiresAt, o.CancelAfter, o.ReservationID)
	b.Queue(q.Get("insert_items"), o.ID, skus, qtys)
	return e.send(ctx, &b)
}

// StartPayment implements core.Executor.
func (e executor) StartPayment(ctx context.Context, id, paymentID string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "start_payment", id, now, paymentID)
}

// SupersedePayment implements core.Executor.
func (e executor) SupersedePayment(ctx context.Context, id, oldID, newID string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "supersede_payment", id, oldID, newID, now)
}

// MarkPaid implements core.Executor.
func (e executor) MarkPaid(ctx context.Context, p store.PaymentParams, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, p.OrderID, "mark_paid", p.OrderID, now, p.PaymentID, p.AmountCents, p.Currency)
}

// FlagRefund implements core.Executor.
func (e executor) FlagRefund(ctx context.Context, id, paymentID string, _ time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "flag_refund", id, paymentID)
}

// FailPayment implements core.Executor.
func (e executor) FailPayment(ctx context.Context, id, paymentID string) (order.Order, bool, error) {
	return e.one(ctx, id, "fail_payment", id, paymentID)
}

// scanPayment reads the column list of get_payments.
func scanPayment(row pgx.CollectableRow) (order.Payment, error) {
	var p order.Payment
	var status string
	err := row.Scan(&p.PaymentID, &status, &p.AmountCents, &p.Currency, &p.Conflicts, &p.CreatedAt, &p.UpdatedAt)
	p.Status, p.CreatedAt, p.UpdatedAt = order.PaymentStatus(status), p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p, err
}

// payments runs the named query returning payment rows.
func (e executor) payments(ctx context.Context, name string, args ...any) ([]order.Payment, error) {
	rows, err := e.db.Query(ctx, q.Get(name), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	ps, err := pgx.CollectRows(rows, scanPayment)
	return ps, interpretError(err)
}

// Payments implements core.Executor.
func (e executor) Payments(ctx context.Context, orderID string) ([]order.Payment, error) {
	return e.payments(ctx, "get_payments", orderID)
}

// InsertPayment implements core.Executor: an id the order already used
// violates lapse_payments_pkey, one another order has lapse_payments_payment_id_unique;
// interpretError reads both as store.ErrPaymentIDUsed.
func (e executor) InsertPayment(ctx context.Context, orderID string, p order.Payment) error {
	_, err := e.exec(ctx, "insert_payment", orderID, p.PaymentID, string(p.Status), p.AmountCents, p.CreatedAt)
	return err
}

// SavePayment implements core.Executor.
func (e executor) SavePayment(ctx context.Context, orderID string, p order.Payment) error {
	_, err := e.exec(ctx, "save_payment", orderID, p.PaymentID, string(p.Status), p.AmountCents, p.UpdatedAt, p.Currency)
	return err
}

// NoteConflict implements core.Executor.
func (e executor) NoteConflict(ctx context.Context, orderID, paymentID string) error {
	_, err := e.exec(ctx, "note_conflict", orderID, paymentID)
	return err
}

// EndPayment implements core.Executor.
func (e executor) EndPayment(ctx context.Context, orderID, paymentID string, status order.PaymentStatus, now time.Time) (bool, error) {
	tag, err := e.exec(ctx, "end_payment", orderID, paymentID, string(status), now)
	return tag.RowsAffected() == 1, err
}

// ExtendOrder implements core.Executor.
func (e executor) ExtendOrder(ctx context.Context, id string, expiresAt, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "extend_order", id, expiresAt, now)
}

// BuyerCancel implements core.Executor.
func (e executor) BuyerCancel(ctx context.Context, id string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, id, "buyer_cancel", id, now)
}

// CancelDue implements core.Executor. The items are read after the UPDATE,
// of the orders it cancelled only.
func (e executor) CancelDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	return e.orders(ctx, "cancel_due", a.Now, a.IDs, a.SkipAttempted, a.Confirmed, string(a.Reason), a.Anytime)
}

// ClaimDue implements core.Executor.
func (e executor) ClaimDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	return e.orders(ctx, "claim_due", a.Now, a.DueBy, a.Limit, a.SkipAttempted)
}

// SeeCallback implements core.Executor: the purge and the record in one round trip.
func (e executor) SeeCallback(ctx context.Context, callbackID, orderID string, now, forgetBefore time.Time) (bool, error) {
	var first bool
	var b pgx.Batch
	b.Queue(q.Get("callback_purge"), forgetBefore)
	b.Queue(q.Get("callback_seen"), callbackID, orderID, now).Exec(func(tag pgconn.CommandTag) error {
		first = tag.RowsAffected() == 1
		return nil
	})
	err := e.send(ctx, &b)
	return first, err
}

// PaymentChecks implements core.Executor.
func (e executor) PaymentChecks(ctx context.Context, dueBy time.Time, limit int) ([]store.Deadline, error) {
	return e.deadlines(ctx, "payment_checks", dueBy, limit)
}

// NextDeadline implements core.Executor.
func (e executor) NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error) {
	var at *time.Time
	if err := e.scan(ctx, "next_deadline", []any{skipAttempted}, &at); err != nil || at == nil {
		return time.Time{}, false, err
	}
	return at.UTC(), true, nil
}

// PendingDeadlines implements core.Executor.
func (e executor) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	from := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if !after.CancelAfter.IsZero() {
		from = pgtype.Timestamptz{Time: after.CancelAfter, Valid: true}
	}
	return e.deadlines(ctx, "pending_deadlines", from, after.OrderID, limit)
}

// deadlines runs the named query returning (id, cancel_after) rows.
func (e executor) deadlines(ctx context.Context, name string, args ...any) ([]store.Deadline, error) {
	rows, err := e.db.Query(ctx, q.Get(name), args...)
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

// CountStuck implements core.Executor.
func (e executor) CountStuck(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := e.scan(ctx, "count_stuck", []any{now}, &n)
	return n, err
}

// OrdersOfPayment implements core.Executor.
func (e executor) OrdersOfPayment(ctx context.Context, paymentID string) ([]string, error) {
	rows, err := e.db.Query(ctx, q.Get("orders_of_payment"), paymentID)
	if err != nil {
		return nil, interpretError(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, interpretError(err)
}

// CancelDueClocked implements core.DueClockExecutor: the clock, the UPDATE
// and the items of the orders it cancelled in one statement, sent in the
// round trip of the transaction's BEGIN (pgTx).
func (t txExecutor) CancelDueClocked(ctx context.Context, a core.CancelArgs) ([]order.Order, time.Time, error) {
	return t.clocked(ctx, "cancel_due_clocked", a.IDs, a.SkipAttempted, a.Confirmed, string(a.Reason), a.Anytime)
}

// ClaimDueClocked implements core.DueClockExecutor.
func (t txExecutor) ClaimDueClocked(ctx context.Context, a core.ClaimArgs) ([]order.Order, time.Time, error) {
	return t.clocked(ctx, "claim_due_clocked", max(a.Lag, 0), a.Limit, a.SkipAttempted)
}

// clocked runs a statement of the shape of cancel_due_clocked: one row
// always, its first column the clock, then an order's columns and its items
// (skus, qtys), all null when it cancelled nothing.
func (t txExecutor) clocked(ctx context.Context, name string, args ...any) ([]order.Order, time.Time, error) {
	var (
		os  []order.Order
		now *time.Time
	)
	var b pgx.Batch
	b.Queue(q.Get(name), args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				id, status, currency, reason, paymentID, reservationID *string
				amount, version                                        *int64
				attempts                                               *int
				created, expires, cancelAfter, paidAt, cancelledAt     *time.Time
				refund                                                 *bool
				skus                                                   []string
				qtys                                                   []int64
			)
			err := rows.Scan(&now, &id, &status, &amount, &currency, &created, &expires, &cancelAfter, &paidAt,
				&cancelledAt, &reason, &paymentID, &refund, &attempts, &version, &reservationID, &skus, &qtys)
			if err != nil {
				return err
			}
			if id == nil {
				continue // nothing cancelled: the clock alone
			}
			o := order.Order{ID: *id, Status: order.Status(*status), AmountCents: *amount, Currency: *currency,
				CreatedAt: created.UTC(), ExpiresAt: expires.UTC(), CancelAfter: cancelAfter.UTC(),
				RefundRequired: *refund, PaymentAttempts: *attempts, Version: *version}
			setNullable(&o, paidAt, cancelledAt, reason, paymentID, reservationID)
			for i := range skus {
				o.Items = append(o.Items, order.Item{SKU: skus[i], Qty: qtys[i]})
			}
			os = append(os, o)
		}
		return rows.Err()
	})
	if err := t.send(ctx, &b); err != nil {
		return nil, time.Time{}, err
	}
	if now == nil {
		return nil, time.Time{}, errNoClock
	}
	return os, now.UTC(), nil
}
