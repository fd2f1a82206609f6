package sqlite

// The executor: one method per statement of queries.sql, on the reader pool
// (reads outside a transaction) or on the write transaction. Every decision
// is store/core's; what is SQLite's is here: times as Unix milliseconds, lists
// as one JSON array expanded with json_each, RETURNING, and one writer, so a
// "locking" read is a plain read.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor runs the statements on db: the reader pool or the write transaction.
type executor struct {
	db    querier
	clock clock.Clock
}

var _ core.Executor = executor{}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func jsonArray(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with slices of strings, numbers and plain structs
	}
	return string(b)
}

// isUniqueViolation reports whether err is a primary-key or unique constraint failure.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// exec runs one statement and returns how many rows it changed.
func (e executor) exec(ctx context.Context, name string, args ...any) (int64, error) {
	r, err := e.db.ExecContext(ctx, q.Get(name), args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// DBNow implements core.Executor: SQLite's "now" is the store's clock.
func (e executor) DBNow(context.Context) (time.Time, error) {
	return e.clock.Now().UTC().Truncate(time.Millisecond), nil
}

type rowScanner interface{ Scan(dest ...any) error }

// scanOrder reads the column list every order query returns (items excluded).
func scanOrder(sc rowScanner) (order.Order, error) {
	var (
		o                             order.Order
		created, expires, cancelAfter int64
		paidAt, cancelledAt           sql.NullInt64
		status                        string
		reason, paymentID             sql.NullString
		reservationID                 sql.NullString
		refund                        int64
	)
	err := sc.Scan(&o.ID, &status, &o.AmountCents, &o.Currency, &created, &expires, &cancelAfter, &paidAt,
		&cancelledAt, &reason, &paymentID, &refund, &o.PaymentAttempts, &o.Version, &reservationID)
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
	o.ReservationID = reservationID.String
	o.RefundRequired = refund != 0
	return o, nil
}

// orders runs a query returning order rows and fills their items.
func (e executor) orders(ctx context.Context, name string, args ...any) ([]order.Order, error) {
	out, err := sqlrows.Collect(ctx, e.db, q.Get(name), args, func(r *sql.Rows) (order.Order, error) { return scanOrder(r) })
	if err != nil {
		return nil, err
	}
	return out, e.fillItems(ctx, out)
}

// one is orders for a guarded UPDATE … RETURNING of one order: ok=false
// when it matched nothing.
func (e executor) one(ctx context.Context, name string, args ...any) (order.Order, bool, error) {
	os, err := e.orders(ctx, name, args...)
	if err != nil || len(os) == 0 {
		return order.Order{}, false, err
	}
	return os[0], true, nil
}

// fillItems loads the items of os, in SKU order (BINARY collation: byte order).
func (e executor) fillItems(ctx context.Context, os []order.Order) error {
	if len(os) == 0 {
		return nil
	}
	ids := make([]string, len(os))
	at := make(map[string]int, len(os))
	for i, o := range os {
		ids[i] = o.ID
		at[o.ID] = i
	}
	err := sqlrows.Each(ctx, e.db, q.Get("get_items"), []any{jsonArray(ids)}, func(r *sql.Rows) error {
		var id string
		var it order.Item
		if err := r.Scan(&id, &it.SKU, &it.Qty); err != nil {
			return err
		}
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

// Orders implements core.Executor.
func (e executor) Orders(ctx context.Context, ids []string) ([]order.Order, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return e.orders(ctx, "get_orders", jsonArray(ids))
}

// ListOrders implements core.Executor.
func (e executor) ListOrders(ctx context.Context, a core.ListArgs) ([]order.Order, error) {
	after := int64(math.MaxInt64)
	if !a.First {
		after = ms(a.AfterCreated)
	}
	return e.orders(ctx, "list_orders", string(a.Status), after, a.AfterID, a.Limit)
}

// LockOrder implements core.Executor: the write transaction already holds
// the whole database, so a plain read is a locked one.
func (e executor) LockOrder(ctx context.Context, id string) (order.Order, error) {
	o, ok, err := e.one(ctx, "get_orders", jsonArray([]string{id}))
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	return o, err
}

// GetSKU implements core.Executor.
func (e executor) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	var out store.SKU
	err := e.db.QueryRowContext(ctx, q.Get("get_sku"), sku).Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	return out, err
}

// UnpublishedEvents implements core.Executor.
func (e executor) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	return e.events(ctx, "unpublished_events", limit)
}

// deadlines runs a query returning (id, cancel_after) rows.
func (e executor) deadlines(ctx context.Context, name string, args ...any) ([]store.Deadline, error) {
	return sqlrows.Collect(ctx, e.db, q.Get(name), args, func(r *sql.Rows) (store.Deadline, error) {
		var d store.Deadline
		var at int64
		err := r.Scan(&d.OrderID, &at)
		d.CancelAfter = fromMS(at)
		return d, err
	})
}

// PaymentChecks implements core.Executor.
func (e executor) PaymentChecks(ctx context.Context, dueBy time.Time, limit int) ([]store.Deadline, error) {
	return e.deadlines(ctx, "payment_checks", ms(dueBy), limit)
}

// PendingDeadlines implements core.Executor.
func (e executor) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	from := int64(math.MinInt64)
	if !after.CancelAfter.IsZero() {
		from = ms(after.CancelAfter)
	}
	return e.deadlines(ctx, "pending_deadlines", from, after.OrderID, limit)
}

// NextDeadline implements core.Executor.
func (e executor) NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := e.db.QueryRowContext(ctx, q.Get("next_deadline"), flag(skipAttempted)).Scan(&at); err != nil || !at.Valid {
		return time.Time{}, false, err
	}
	return fromMS(at.Int64), true, nil
}

// CountStuck implements core.Executor.
func (e executor) CountStuck(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := e.db.QueryRowContext(ctx, q.Get("count_stuck"), ms(now)).Scan(&n)
	return n, err
}

// AuditRows implements core.Executor.
func (e executor) AuditRows(ctx context.Context, c sqlfile.Query, now time.Time, lag time.Duration, row func(string)) error {
	return sqlrows.Each(ctx, e.db, c.SQL, []any{ms(now), lag.Milliseconds()}, func(r *sql.Rows) error {
		var detail string
		err := r.Scan(&detail)
		if err == nil {
			row(detail)
		}
		return err
	})
}

// ClaimKey implements core.Executor.
func (e executor) ClaimKey(ctx context.Context, k core.Key, now time.Time) (bool, error) {
	n, err := e.exec(ctx, "idempotency_claim", k.Key, k.RequestHash, k.OrderID, ms(now))
	return n == 1, err
}

// KeyOwner implements core.Executor.
func (e executor) KeyOwner(ctx context.Context, key string) (hash, orderID string, err error) {
	err = e.db.QueryRowContext(ctx, q.Get("idempotency_get"), key).Scan(&hash, &orderID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", store.ErrNotFound
	}
	return hash, orderID, err
}

// InsertOrder implements core.Executor.
func (e executor) InsertOrder(ctx context.Context, o order.Order) error {
	_, err := e.exec(ctx, "insert_order", o.ID, o.AmountCents, o.Currency, ms(o.CreatedAt), ms(o.ExpiresAt), ms(o.CancelAfter), o.ReservationID)
	if isUniqueViolation(err) {
		if strings.Contains(err.Error(), "lapse_orders.reservation_id") {
			return store.ErrReservationUsed
		}
		return store.ErrOrderExists
	}
	if err != nil || len(o.Items) == 0 {
		return err // an order of order-service mode may have no items (json_each of null is one null row)
	}
	if _, err := e.exec(ctx, "insert_items", o.ID, jsonArray(o.Items)); err != nil {
		return fmt.Errorf("insert items: %w", err)
	}
	return nil
}

// ReserveSKU implements core.Executor.
func (e executor) ReserveSKU(ctx context.Context, sku string, qty int64, now time.Time) (bool, error) {
	n, err := e.exec(ctx, "reserve_sku", qty, sku, ms(now))
	return n == 1, err
}

// StartPayment implements core.Executor.
func (e executor) StartPayment(ctx context.Context, id, paymentID string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "start_payment", id, ms(now), paymentID)
}

// SupersedePayment implements core.Executor.
func (e executor) SupersedePayment(ctx context.Context, id, oldID, newID string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "supersede_payment", id, oldID, newID, ms(now))
}

// MarkPaid implements core.Executor.
func (e executor) MarkPaid(ctx context.Context, p store.PaymentParams, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "mark_paid", p.OrderID, ms(now), p.PaymentID, p.AmountCents, p.Currency)
}

// FlagRefund implements core.Executor.
func (e executor) FlagRefund(ctx context.Context, id, paymentID string, _ time.Time) (order.Order, bool, error) {
	return e.one(ctx, "flag_refund", id, paymentID)
}

// FailPayment implements core.Executor.
func (e executor) FailPayment(ctx context.Context, id, paymentID string) (order.Order, bool, error) {
	return e.one(ctx, "fail_payment", id, paymentID)
}

// Payments implements core.Executor.
func (e executor) Payments(ctx context.Context, orderID string) ([]order.Payment, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("get_payments"), []any{orderID}, func(r *sql.Rows) (order.Payment, error) {
		var p order.Payment
		var status string
		var created, updated int64
		err := r.Scan(&p.PaymentID, &status, &p.AmountCents, &p.Currency, &p.Conflicts, &created, &updated)
		p.Status, p.CreatedAt, p.UpdatedAt = order.PaymentStatus(status), fromMS(created), fromMS(updated)
		return p, err
	})
}

// InsertPayment implements core.Executor.
func (e executor) InsertPayment(ctx context.Context, orderID string, p order.Payment) error {
	_, err := e.exec(ctx, "insert_payment", orderID, p.PaymentID, string(p.Status), p.AmountCents, ms(p.CreatedAt))
	if isUniqueViolation(err) {
		return store.ErrPaymentIDUsed
	}
	return err
}

// SavePayment implements core.Executor.
func (e executor) SavePayment(ctx context.Context, orderID string, p order.Payment) error {
	_, err := e.exec(ctx, "save_payment", orderID, p.PaymentID, string(p.Status), p.AmountCents, ms(p.UpdatedAt), p.Currency)
	if isUniqueViolation(err) {
		return store.ErrPaymentIDUsed // another order's
	}
	return err
}

// NoteConflict implements core.Executor.
func (e executor) NoteConflict(ctx context.Context, orderID, paymentID string) error {
	_, err := e.exec(ctx, "note_conflict", orderID, paymentID)
	return err
}

// EndPayment implements core.Executor.
func (e executor) EndPayment(ctx context.Context, orderID, paymentID string, status order.PaymentStatus, now time.Time) (bool, error) {
	n, err := e.exec(ctx, "end_payment", orderID, paymentID, string(status), ms(now))
	return n == 1, err
}

// ExtendOrder implements core.Executor.
func (e executor) ExtendOrder(ctx context.Context, id string, expiresAt, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "extend_order", id, ms(expiresAt), ms(now))
}

// BuyerCancel implements core.Executor.
func (e executor) BuyerCancel(ctx context.Context, id string, now time.Time) (order.Order, bool, error) {
	return e.one(ctx, "buyer_cancel", id, ms(now))
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CancelDue implements core.Executor.
func (e executor) CancelDue(ctx context.Context, a core.CancelArgs) ([]order.Order, error) {
	return e.orders(ctx, "cancel_due", ms(a.Now), jsonArray(a.IDs), flag(a.SkipAttempted), flag(a.Confirmed), string(a.Reason), flag(a.Anytime))
}

// ClaimDue implements core.Executor: SQLite has one writer, so the claim
// needs no SKIP LOCKED.
func (e executor) ClaimDue(ctx context.Context, a core.ClaimArgs) ([]order.Order, error) {
	return e.orders(ctx, "claim_due", ms(a.Now), ms(a.DueBy), a.Limit, flag(a.SkipAttempted))
}

// SeeCallback implements core.Executor.
func (e executor) SeeCallback(ctx context.Context, callbackID, orderID string, now, forgetBefore time.Time) (bool, error) {
	if _, err := e.exec(ctx, "callback_purge", ms(forgetBefore)); err != nil {
		return false, fmt.Errorf("purge callback ids: %w", err)
	}
	n, err := e.exec(ctx, "callback_seen", callbackID, orderID, ms(now))
	return n == 1, err
}

type eventRow struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	OrderID string `json:"order_id"`
	Payload string `json:"payload"`
}

// WriteEffects implements core.Executor. The counters move by order id
// (release_stock, commit_stock sum the items): with one writer there is no
// lock order to keep.
func (e executor) WriteEffects(ctx context.Context, ef core.Effects) error {
	if ef.Move != core.MoveNone {
		ids := jsonArray(ef.IDs)
		if _, err := e.exec(ctx, "ledger_insert", ids, string(ef.Move), ms(ef.Now)); err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("%w: %w", core.ErrMovedTwice, err)
			}
			return fmt.Errorf("stock ledger %s: %w", ef.Move, err)
		}
		counter := map[core.Move]string{core.MoveRelease: "release_stock", core.MoveCommit: "commit_stock"}[ef.Move]
		if counter != "" {
			if _, err := e.exec(ctx, counter, ids, ms(ef.Now)); err != nil {
				return fmt.Errorf("stock %s: %w", ef.Move, err)
			}
		}
	}
	if err := e.insertTasks(ctx, ef); err != nil {
		return err
	}
	if len(ef.HooksHeld) > 0 {
		if _, err := e.exec(ctx, "hook_failures_clear", jsonArray(ef.HooksHeld)); err != nil {
			return fmt.Errorf("hook failures: %w", err)
		}
	}
	if len(ef.Events) == 0 {
		return nil
	}
	rows := make([]eventRow, len(ef.Events))
	for i, ev := range ef.Events {
		rows[i] = eventRow{ID: ev.ID, Type: ef.Type, OrderID: ev.OrderID, Payload: string(ev.Payload)}
	}
	if _, err := e.exec(ctx, "insert_events", ms(ef.Now), jsonArray(rows)); err != nil {
		return fmt.Errorf("write %s events: %w", ef.Type, err)
	}
	return nil
}

// SetStock implements core.Executor.
func (e executor) SetStock(ctx context.Context, sku string, available int64, now time.Time) (store.SKU, error) {
	var out store.SKU
	err := e.db.QueryRowContext(ctx, q.Get("set_stock"), sku, available, ms(now)).
		Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	return out, err
}

// MarkPublished implements core.Executor.
func (e executor) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	_, err := e.exec(ctx, "mark_published", ms(now), jsonArray(seqs))
	return err
}

// OrdersOfPayment implements core.Executor.
func (e executor) OrdersOfPayment(ctx context.Context, paymentID string) ([]string, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("orders_of_payment"), []any{paymentID}, func(r *sql.Rows) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
}
