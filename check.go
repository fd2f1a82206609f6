package lapse

import (
	"context"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// ErrNoGateway is CheckPayment's answer when no payment gateway is configured.
var ErrNoGateway = errors.New("lapse: no payment gateway is configured")

// PaymentCheck is what a gateway query asked on demand found.
type PaymentCheck struct {
	// Gateway is the gateway's answer (read as one over the order's open
	// attempts at a gateway that keeps a trade per attempt).
	Gateway payment.Status
	// Outcome is what recording a PAID answer did (OutcomeNoChange for any
	// other answer, which changes nothing).
	Outcome store.PaymentOutcome
	// Order is the order afterwards.
	Order order.Order
}

// CheckPayment asks the gateway about an order now (the dashboard's "check
// payment now"), the query the deadline's check makes. A PAID answer is
// recorded as that check records it — the order PAID, or, for one that
// cannot be paid any more, flagged refund_required; any other answer changes
// nothing: closing a trade and cancelling stay the deadline's to do.
func (s *Service) CheckPayment(ctx context.Context, id string) (PaymentCheck, error) {
	if s.checks == nil {
		return PaymentCheck{}, ErrNoGateway
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return PaymentCheck{}, err
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
	ans, err := s.checks.query(qctx, id)
	st := ans.Status
	cancel()
	if err != nil {
		s.metrics.gatewayChecks.WithLabelValues("error").Inc()
		return PaymentCheck{}, fmt.Errorf("lapse: query the gateway about order %s: %w: %w", id, ErrGateway, err)
	}
	s.metrics.gatewayChecks.WithLabelValues(string(st.State)).Inc()
	res := PaymentCheck{Gateway: st, Order: o}
	if st.State != payment.StatePaid {
		return res, nil
	}
	pr, err := s.recordPaid(ctx, id, st)
	if err != nil {
		return PaymentCheck{}, fmt.Errorf("lapse: record the payment the gateway reports for order %s: %w", id, err)
	}
	res.Outcome, res.Order = pr.Outcome, pr.Order
	return res, nil
}

// HasGateway reports whether a payment gateway is configured.
func (s *Service) HasGateway() bool { return s.checks != nil }

// GatewayBreaker reports the gateway client's circuit breaker state
// ("closed", "half-open", "open"), and false when the gateway has none to
// report (no gateway, or one that does not expose it).
func (s *Service) GatewayBreaker() (string, bool) {
	b, ok := s.cfg.Gateway.(interface{ BreakerState() string })
	if !ok {
		return "", false
	}
	return b.BreakerState(), true
}
