package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// The statements of the refunds (core.RefundExecutor).

var _ core.RefundExecutor = executor{}

// InsertRefund implements core.RefundExecutor.
func (e executor) InsertRefund(ctx context.Context, r core.NewRefund, now time.Time) error {
	_, err := e.exec(ctx, "insert_refund", r.PaymentID, r.OrderID, r.AmountCents, r.Currency, now)
	return err
}

// scanRefund reads the column list every refund query returns.
func scanRefund(r pgx.CollectableRow) (store.ClaimedRefund, error) {
	var (
		c          store.ClaimedRefund
		status     string
		done, dead *time.Time
	)
	err := r.Scan(&c.PaymentID, &c.OrderID, &c.AmountCents, &c.Currency, &status, &c.Attempts, &c.Failures,
		&c.NextAt, &c.Since, &c.CreatedAt, &done, &dead, &c.LastError, &c.RefundID, &c.Manual, &c.Note, &c.Actor)
	if err != nil {
		return c, err
	}
	c.Status = order.TaskStatus(status)
	c.NextAt, c.Since, c.CreatedAt = c.NextAt.UTC(), c.Since.UTC(), c.CreatedAt.UTC()
	if done != nil {
		c.DoneAt = done.UTC()
	}
	if dead != nil {
		c.DeadAt = dead.UTC()
	}
	return c, nil
}

func refundOnly(r pgx.CollectableRow) (order.Refund, error) {
	c, err := scanRefund(r)
	return c.Refund, err
}

// queryRefunds runs the named query and reads its rows with scan.
func queryRefunds[T any](ctx context.Context, e executor, name string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := e.db.Query(ctx, q.Get(name), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, scan)
	return out, interpretError(err)
}

// ClaimRefunds implements core.RefundExecutor.
func (e executor) ClaimRefunds(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedRefund, error) {
	return queryRefunds(ctx, e, "claim_refunds", scanRefund, now, leaseUntil, limit)
}

// SettleRefund implements core.RefundExecutor.
func (e executor) SettleRefund(ctx context.Context, o store.RefundOutcome, status order.TaskStatus, now, nextAt time.Time) (bool, error) {
	tag, err := e.exec(ctx, "settle_refund", o.PaymentID, o.Attempts, string(status), now, nextAt, o.RefundID, o.Error)
	return tag.RowsAffected() == 1, err
}

// RecordRefunded implements core.RefundExecutor.
func (e executor) RecordRefunded(ctx context.Context, r core.NewRefund, m store.MarkRefundedParams, now time.Time) error {
	_, err := e.exec(ctx, "record_refunded", r.PaymentID, r.OrderID, r.AmountCents, r.Currency, now,
		m.RefundID, m.Manual, m.Note, m.Actor)
	return err
}

// RefundPayment implements core.RefundExecutor.
func (e executor) RefundPayment(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error) {
	tag, err := e.exec(ctx, "refund_payment", orderID, paymentID, now)
	return tag.RowsAffected() == 1, err
}

// ClearRefundRequired implements core.RefundExecutor.
func (e executor) ClearRefundRequired(ctx context.Context, orderID string) (order.Order, bool, error) {
	return e.one(ctx, orderID, "clear_refund_required", orderID)
}

// GetRefund implements core.RefundExecutor.
func (e executor) GetRefund(ctx context.Context, paymentID string) (order.Refund, error) {
	rs, err := queryRefunds(ctx, e, "get_refund", refundOnly, paymentID)
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
	return queryRefunds(ctx, e, "list_refunds", refundOnly, p.Dead, p.OrderID, p.After, p.Limit)
}

// RetryRefunds implements core.RefundExecutor.
func (e executor) RetryRefunds(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error) {
	tag, err := e.exec(ctx, "retry_refunds", now, p.IDs, p.AllDead)
	return tag.RowsAffected(), err
}

// RefundStats implements core.RefundExecutor.
func (e executor) RefundStats(ctx context.Context) (store.TaskStats, error) {
	var st store.TaskStats
	var oldest *time.Time
	if err := e.scan(ctx, "refund_stats", nil, &st.Pending, &st.Dead, &oldest); err != nil {
		return st, err
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	return st, nil
}
