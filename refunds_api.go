package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Bounds of the operators' view of the refund tasks (GET /v1/refunds, POST
// /v1/refunds/retry), as for stock tasks and cancel commands. A refund is
// keyed by its payment attempt's id.
const (
	// DefaultRefundsLimit is the page size of ListRefunds when none is given.
	DefaultRefundsLimit = 100
	// MaxRefundsLimit is the largest page ListRefunds serves.
	MaxRefundsLimit = 500
	// MaxRefundIDs is the most payment ids one RetryRefunds names.
	MaxRefundIDs = 1000
)

// RefundPage is one page of refunds, in payment id order.
type RefundPage struct {
	Refunds []order.Refund
	// NextAfter is the After of the next page; "" when this page is the last.
	NextAfter string
}

// ListRefunds returns a page of the refunds not DONE — with p.Dead only the
// DEAD ones, with p.OrderID every refund of that order — for operators
// looking at money lapse has not given back yet (GET /v1/refunds, the
// dashboard's refunds page). It reads whatever the store holds, whether or
// not this service runs with AutoRefund. A zero p.Limit is
// DefaultRefundsLimit; p.After is the NextAfter of the previous page (a
// payment id).
func (s *Service) ListRefunds(ctx context.Context, p store.ListTasksParams) (RefundPage, error) {
	if err := validPage(p, MaxRefundsLimit, maxPaymentIDLen); err != nil {
		return RefundPage{}, err
	}
	rs, next, err := pageByID(ctx, p, DefaultRefundsLimit, s.store.ListRefunds, func(r order.Refund) string { return r.PaymentID })
	return RefundPage{Refunds: rs, NextAfter: next}, err
}

// RetryRefunds makes DEAD refunds PENDING and due at once — those p.IDs
// names (payment ids), or with p.AllDead every DEAD one — their failures
// and age counted afresh, and returns how many. A retried refund is asked
// of the gateway with its attempt's key again (payment.RefundKey), so a
// refund the gateway made after all is answered, not made twice. An id
// that names no DEAD refund is not an error: the count tells. This
// instance's refund dispatcher, if it runs one (AutoRefund), is woken;
// without one the refunds wait for an instance that runs it.
func (s *Service) RetryRefunds(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return s.retryDead(ctx, p, deadWork{noun: "refund", maxIDs: MaxRefundIDs, idLen: maxPaymentIDLen, retry: s.store.RetryRefunds,
		wake: func() {
			if s.refunds != nil {
				s.refunds.Notify()
			}
		},
		logged: "dead refunds retried"})
}

// CanRefund reports whether RefundPayment can ask the gateway for a refund
// (the configured gateway is a payment.Refunder); without, a refund can
// only be recorded as made by hand.
func (s *Service) CanRefund() bool {
	_, ok := s.cfg.Gateway.(payment.Refunder)
	return ok
}
