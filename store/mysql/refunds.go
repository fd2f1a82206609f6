package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of the refunds (core.RefundExecutor). MySQL has no
// UPDATE … RETURNING: as for the commands, rows are locked, changed, then
// read back in the same transaction.

var _ core.RefundExecutor = executor{}

// InsertRefund implements core.RefundExecutor.
func (e executor) InsertRefund(ctx context.Context, r core.NewRefund, now time.Time) error {
	_, err := e.db.ExecContext(ctx, q.Get("insert_refund"), r.PaymentID, r.OrderID, r.AmountCents, r.Currency, now, now, now)
	return err
}

// scanRefund reads the column list every refund query returns.
func scanRefund(r *sql.Rows) (store.ClaimedRefund, error) {
	var (
		c          store.ClaimedRefund
		status     string
		done, dead sql.NullTime
	)
	err := r.Scan(&c.PaymentID, &c.OrderID, &c.AmountCents, &c.Currency, &status, &c.Attempts, &c.Failures,
		&c.NextAt, &c.Since, &c.CreatedAt, &done, &dead, &c.LastError, &c.RefundID, &c.Manual, &c.Note, &c.Actor)
	if err != nil {
		return c, err
	}
	c.Status = order.TaskStatus(status)
	c.NextAt, c.Since, c.CreatedAt = c.NextAt.UTC(), c.Since.UTC(), c.CreatedAt.UTC()
	if done.Valid {
		c.DoneAt = done.Time.UTC()
	}
	if dead.Valid {
		c.DeadAt = dead.Time.UTC()
	}
	return c, nil
}

func refundOnly(r *sql.Rows) (order.Refund, error) {
	c, err := scanRefund(r)
	return c.Refund, err
}

// ClaimRefunds implements core.RefundExecutor: select and lock, lease,
// read back.
func (e executor) ClaimRefunds(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedRefund, error) {
	ids, err := e.queryIDs(ctx, q.Get("claim_refunds_select"), now, limit)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if _, err := e.db.ExecContext(ctx, each(q.Get("claim_refunds_lease"), len(ids)), args([]any{leaseUntil}, ids)...); err != nil {
		return nil, err
	}
	return sqlrows.Collect(ctx, e.db, each(q.Get("refunds_by_id"), len(ids)), args(nil, ids), scanRefund)
}

// SettleRefund implements core.RefundExecutor.
func (e executor) SettleRefund(ctx context.Context, o store.RefundOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	st := string(status)
	n, err := e.affected(ctx, q.Get("settle_refund"), st, nextAt, o.Error, st, o.RefundID, st, st, now, st, now,
		o.PaymentID, o.Attempts)
	return n == 1, err
}

// RecordRefunded implements core.RefundExecutor.
func (e executor) RecordRefunded(ctx context.Context, r core.NewRefund, m store.MarkRefundedParams, now time.Time) error {
	_, err := e.db.ExecContext(ctx, q.Get("record_refunded"), r.PaymentID, r.OrderID, r.AmountCents, r.Currency,
		now, now, now, now, m.RefundID, m.Manual, m.Note, m.Actor)
	return err
}

// RefundPayment implements core.RefundExecutor.
func (e executor) RefundPayment(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	n, err := e.affected(ctx, q.Get("refund_payment"), now, orderID, paymentID)
	return n == 1, err
}

// ClearRefundRequired implements core.RefundExecutor: the update, then the
// order read back.
func (e executor) ClearRefundRequired(ctx context.Context, orderID string) (order.Order, bool, error) {
	return e.transition(ctx, orderID, q.Get("clear_refund_required"), orderID, orderID)
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
	return sqlrows.Collect(ctx, e.db, q.Get("list_refunds"), []any{p.OrderID, p.OrderID, p.Dead, p.After, p.Limit}, refundOnly)
}

// RetryRefunds implements core.RefundExecutor.
func (e executor) RetryRefunds(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	if p.AllDead {
		return e.affected(ctx, q.Get("retry_dead_refunds"), now, now)
	}
	var n int64
	for _, chunk := range chunks(p.IDs) {
		k, err := e.affected(ctx, each(q.Get("retry_refunds"), len(chunk)), args([]any{now, now}, chunk)...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// RefundStats implements core.RefundExecutor.
func (e executor) RefundStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest sql.NullTime
	err := e.db.QueryRowContext(ctx, q.Get("refund_stats")).Scan(&st.Pending, &st.Dead, &oldest)
	if oldest.Valid {
		st.OldestPending = oldest.Time.UTC()
	}
	return st, err
}
