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

// The statements of the refunds (core.RefundExecutor). One writer: a claim
// needs no SKIP LOCKED.

var _ core.RefundExecutor = executor{}

// InsertRefund implements core.RefundExecutor.
func (e executor) InsertRefund(ctx context.Context, r core.NewRefund, now time.Time) error {
	_, err := e.exec(ctx, "insert_refund", r.PaymentID, r.OrderID, r.AmountCents, r.Currency, ms(now))
	return err
}

// scanRefund reads the column list every refund query returns.
func scanRefund(r *sql.Rows) (store.ClaimedRefund, error) {
	var (
		c                        store.ClaimedRefund
		status                   string
		nextAt, since, createdAt int64
		done, dead               sql.NullInt64
		manual                   int
	)
	err := r.Scan(&c.PaymentID, &c.OrderID, &c.AmountCents, &c.Currency, &status, &c.Attempts, &c.Failures,
		&nextAt, &since, &createdAt, &done, &dead, &c.LastError, &c.RefundID, &manual, &c.Note, &c.Actor)
	if err != nil {
		return c, err
	}
	c.Status, c.Manual = order.TaskStatus(status), manual != 0
	c.NextAt, c.Since, c.CreatedAt = fromMS(nextAt), fromMS(since), fromMS(createdAt)
	if done.Valid {
		c.DoneAt = fromMS(done.Int64)
	}
	if dead.Valid {
		c.DeadAt = fromMS(dead.Int64)
	}
	return c, nil
}

func refundOnly(r *sql.Rows) (order.Refund, error) {
	c, err := scanRefund(r)
	return c.Refund, err
}

// ClaimRefunds implements core.RefundExecutor.
func (e executor) ClaimRefunds(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedRefund, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("claim_refunds"), []any{ms(now), ms(leaseUntil), limit}, scanRefund)
}

// SettleRefund implements core.RefundExecutor.
func (e executor) SettleRefund(ctx context.Context, o store.RefundOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	n, err := e.exec(ctx, "settle_refund", o.PaymentID, o.Attempts, string(status), ms(now), ms(nextAt), o.RefundID, o.Error)
	return n == 1, err
}

// RecordRefunded implements core.RefundExecutor.
func (e executor) RecordRefunded(ctx context.Context, r core.NewRefund, m store.MarkRefundedParams, now time.Time) error {
	_, err := e.exec(ctx, "record_refunded", r.PaymentID, r.OrderID, r.AmountCents, r.Currency, ms(now),
		m.RefundID, flag(m.Manual), m.Note, m.Actor)
	return err
}

// RefundPayment implements core.RefundExecutor.
func (e executor) RefundPayment(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	n, err := e.exec(ctx, "refund_payment", orderID, paymentID, ms(now))
	return n == 1, err
}

// ClearRefundRequired implements core.RefundExecutor.
func (e executor) ClearRefundRequired(ctx context.Context, orderID string) (order.Order, bool, error) {
	return e.one(ctx, "clear_refund_required", orderID)
}

// GetRefund implements core.RefundExecutor.
func (e executor) GetRefund(ctx context.Context, paymentID string) (order.Refund, error) {
	rs, err := sqlrows.Collect(ctx, e.db, q.Get("get_refund"), []any{paymentID}, refundOnly)
	if err == nil && len(rs) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return order.Refund{}, err
	}
	return rs[0], nil
}

// ListRefunds implements core.RefundExecutor.
func (e executor) ListRefunds(ctx context.Context, p store.ListTasksParams) ([]order.Refund, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_refunds"), []any{p.Dead, p.OrderID, p.After, p.Limit}, refundOnly)
}

// RetryRefunds implements core.RefundExecutor.
func (e executor) RetryRefunds(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	return e.exec(ctx, "retry_refunds", ms(now), jsonArray(idList(p.IDs)), p.AllDead)
}

// RefundStats implements core.RefundExecutor.
func (e executor) RefundStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullInt64
	err := e.db.QueryRowContext(ctx, q.Get("refund_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = fromMS(oldest.Int64)
	}
	return st, err
}
