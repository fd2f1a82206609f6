package lapse

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Pay starts a payment: PENDING with expires_at ahead → PAYING. From then on
// the order is never cancelled blind; its outcome comes from the gateway.
// A PAYING order is returned as it is (a second click). ErrOrderExpired once
// expires_at has passed; ErrNotPending for PAID or CANCELLED.
func (s *Service) Pay(ctx context.Context, id string) (order.Order, error) {
	return s.store.StartPayment(ctx, id)
}

// PaymentStatus is the outcome a gateway reports.
type PaymentStatus string

// Payment statuses of the callback.
const (
	PaymentSucceeded PaymentStatus = "SUCCEEDED"
	PaymentFailed    PaymentStatus = "FAILED"
)

// Notification is a payment outcome reported by the gateway (already
// authenticated: see payment.VerifySignature).
type Notification struct {
	OrderID     string
	PaymentID   string
	Status      PaymentStatus
	AmountCents int64
	// CallbackID identifies the signed message (see store.PaymentParams): the
	// same message again is a replay and changes nothing.
	CallbackID string
}

// Notify applies a payment outcome.
//
// SUCCEEDED: PENDING or PAYING → PAID (stock committed); PAID → no change (a
// duplicate); CANCELLED → stays CANCELLED, flagged refund_required. An amount
// other than the order's changes nothing and returns ErrAmountMismatch.
// FAILED: PAYING → PENDING with payment_attempts incremented, and the cancel
// timer is set again (it fires at once if cancel_after has passed).
func (s *Service) Notify(ctx context.Context, n Notification) (store.PaymentResult, error) {
	if n.OrderID == "" {
		return store.PaymentResult{}, invalid("order_id", "required")
	}
	if n.PaymentID == "" || len(n.PaymentID) > maxKeyLen {
		return store.PaymentResult{}, invalid("payment_id", "want 1-%d characters", maxKeyLen)
	}
	p := store.PaymentParams{OrderID: n.OrderID, PaymentID: n.PaymentID, AmountCents: n.AmountCents, CallbackID: n.CallbackID}
	switch n.Status {
	case PaymentSucceeded:
		res, err := s.store.CompletePayment(ctx, p)
		if err != nil {
			return res, err
		}
		s.notePayment(ctx, res, n.PaymentID)
		return res, nil
	case PaymentFailed:
		res, err := s.store.FailPayment(ctx, p)
		if err != nil {
			return res, err
		}
		// Also on a duplicate of a report that failed the payment: the first
		// may have committed without reaching this (its answer lost, so the
		// gateway sent it again). Schedule is an upsert.
		if res.Order.Status == order.Pending {
			s.schedule(ctx, res.Order.ID, res.Order.CancelAfter)
		}
		return res, nil
	default:
		return store.PaymentResult{}, invalid("status", "%s", fmt.Sprintf("want SUCCEEDED or FAILED, got %q", n.Status))
	}
}

// notePayment does what follows a successful payment being recorded, however
// it was learnt (callback, gateway query, confirmation).
func (s *Service) notePayment(ctx context.Context, res store.PaymentResult, paymentID string) {
	switch res.Outcome {
	case store.OutcomePaid:
		s.metrics.paid.Inc()
		s.unschedule(ctx, res.Order.ID)
		if s.cfg.RemindBefore > 0 {
			s.unschedule(ctx, reminderPrefix+res.Order.ID)
		}
	case store.OutcomeRefundRequired:
		s.metrics.refundRequired.Inc()
		s.log.Warn("payment succeeded for a cancelled order: refund required",
			"order_id", res.Order.ID, "payment_id", paymentID, "amount_cents", res.Order.AmountCents)
	}
}
