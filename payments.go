package lapse

import (
	"context"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Pay starts a payment attempt with a payment id lapse assigns
// ("<order id>-<attempt number>"): PENDING with expires_at ahead → PAYING.
// From then on the order is never cancelled blind; its outcome comes from
// the gateway. A PAYING order is returned as it is (a second click).
// ErrOrderExpired once expires_at has passed; ErrNotPending for PAID or
// CANCELLED.
func (s *Service) Pay(ctx context.Context, id string) (order.Order, error) {
	return s.PayAttempt(ctx, id, "")
}

// maxPaymentIDLen bounds a payment id: gateways' own ids (out_trade_no,
// PaymentIntent ids) are far shorter.
const maxPaymentIDLen = 128

// PayAttempt starts the payment attempt paymentID, the id the client uses
// at the gateway for it (its out_trade_no, PaymentIntent id, …); empty, lapse
// assigns one as Pay does. The same attempt asked again changes nothing;
// another id while the order is PAYING becomes the current attempt, and the
// previous one is superseded (its success would still be recorded: money is
// never dropped). ErrPaymentIDUsed when an earlier attempt of the order had
// that id.
func (s *Service) PayAttempt(ctx context.Context, id, paymentID string) (order.Order, error) {
	return s.payAttempt(ctx, s.own(), id, paymentID)
}

// payAttempt is PayAttempt and PayAttemptTx.
func (s *Service) payAttempt(ctx context.Context, ops ops, id, paymentID string) (order.Order, error) {
	if paymentID != "" {
		if err := validPaymentID("payment_id", paymentID); err != nil {
			return order.Order{}, err
		}
	}
	o, err := ops.start(ctx, store.StartPaymentParams{OrderID: id, PaymentID: paymentID})
	if err == nil && paymentID != "" && s.checks != nil && !ops.joined {
		// A named attempt may have superseded another: close that one at
		// the gateway, so the buyer cannot pay an abandoned attempt.
		s.checks.closeSuperseded(o.ID)
	}
	return o, err
}

// validPaymentID accepts 1–128 printable ASCII characters, no spaces.
func validPaymentID(field, id string) error {
	if id == "" || len(id) > maxPaymentIDLen {
		return invalid(field, "want 1-%d printable ASCII characters", maxPaymentIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return invalid(field, "want printable ASCII characters, no spaces (byte %d)", i)
		}
	}
	return nil
}

// PaymentStatus is the outcome a gateway reports.
type PaymentStatus string

// Payment statuses of the callback.
const (
	PaymentSucceeded PaymentStatus = "SUCCEEDED"
	PaymentFailed    PaymentStatus = "FAILED"
)

// Notification is a payment outcome reported by the gateway (already
// authenticated: see payment.VerifyCallback).
type Notification struct {
	OrderID     string
	PaymentID   string
	Status      PaymentStatus
	AmountCents int64
	// Currency is the ISO 4217 code of AmountCents (any case; "" for the
	// order's). A success in another currency than the order's cannot pay
	// it: it is money to give back, as another amount is.
	Currency string
	// CallbackID identifies the signed message (see store.PaymentParams): the
	// same message again is a replay and changes nothing.
	CallbackID string
}

// Notify applies a payment outcome.
//
// Each report acts on the payment attempt it names (store.Orders).
// SUCCEEDED of any attempt: PENDING or PAYING → PAID (stock committed); the
// paying payment again → no change; a success that cannot pay the order
// (PAID by another attempt, CANCELLED, another amount) → recorded and
// flagged refund_required. FAILED of the current attempt: PAYING → PENDING
// with payment_attempts incremented, and the cancel timer is set again (it
// fires at once if cancel_after has passed); of any other attempt, no change.
func (s *Service) Notify(ctx context.Context, n Notification) (store.PaymentResult, error) {
	return s.notify(ctx, s.own(), n)
}

// notify is Notify and NotifyTx.
func (s *Service) notify(ctx context.Context, ops ops, n Notification) (store.PaymentResult, error) {
	if n.OrderID == "" {
		return store.PaymentResult{}, invalid("order_id", "required")
	}
	if err := validPaymentID("payment_id", n.PaymentID); err != nil {
		return store.PaymentResult{}, err
	}
	currency, err := paymentCurrency(n.Currency)
	if err != nil {
		return store.PaymentResult{}, err
	}
	p := store.PaymentParams{OrderID: n.OrderID, PaymentID: n.PaymentID, AmountCents: n.AmountCents, Currency: currency, CallbackID: n.CallbackID,
		AutoRefund: s.cfg.AutoRefund}
	switch n.Status {
	case PaymentSucceeded:
		res, err := ops.complete(ctx, p)
		if err != nil {
			return res, err
		}
		s.notePayment(ctx, res, n.PaymentID, ops.joined)
		return res, nil
	case PaymentFailed:
		res, err := ops.fail(ctx, p)
		if err != nil {
			return res, err
		}
		if res.Outcome == store.OutcomeConflict {
			s.notePayment(ctx, res, n.PaymentID, ops.joined)
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

// paymentCurrency normalises a reported currency: "" (the order's), or
// three letters of ISO 4217 in any case (Stripe reports "usd").
func paymentCurrency(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	u := strings.ToUpper(c)
	if !currencyRE.MatchString(u) {
		return "", invalid("currency", "want three letters (ISO 4217), got %q", c)
	}
	return u, nil
}

// notePayment does what follows a successful payment being recorded, however
// it was learnt (callback, gateway query, confirmation). joined: recorded in
// a caller's transaction that may still roll back — only a timer is set.
func (s *Service) notePayment(ctx context.Context, res store.PaymentResult, paymentID string, joined bool) {
	if joined {
		if res.Outcome == store.OutcomeRefundRequired && res.Order.Status == order.Pending {
			s.schedule(ctx, res.Order.ID, res.Order.CancelAfter)
		}
		return
	}
	switch res.Outcome {
	case store.OutcomePaid:
		s.metrics.paid.Inc()
		s.unschedule(ctx, res.Order.ID)
		if s.cfg.RemindBefore > 0 {
			s.unschedule(ctx, reminderPrefix+res.Order.ID)
		}
		if res.Superseded && s.checks != nil {
			// Another attempt was open when this one paid: close it at
			// the gateway, so the buyer cannot pay the order twice.
			s.checks.closeSuperseded(res.Order.ID)
		}
	case store.OutcomeRefundRequired:
		s.metrics.refundRequired.Inc()
		s.log.Warn("a payment succeeded that cannot pay the order: refund required",
			"order_id", res.Order.ID, "status", res.Order.Status, "payment_id", paymentID)
		if res.Order.Status == order.Pending {
			// It ended the current attempt: the order is PENDING again,
			// and its timer (fired already, perhaps) cancels it unless a
			// new attempt pays it. Schedule is an upsert.
			s.schedule(ctx, res.Order.ID, res.Order.CancelAfter)
		}
	case store.OutcomeConflict:
		s.metrics.paymentConflicts.Inc()
		s.log.Warn("a payment report disagrees with how its attempt already ended: refused, nothing changed",
			"order_id", res.Order.ID, "payment_id", paymentID)
	}
}

// OrderOfPayment returns the order with a payment attempt named paymentID:
// a gateway's notification may name only the payment (a Stripe
// PaymentIntent without metadata.order_id). ErrNotFound when none has.
func (s *Service) OrderOfPayment(ctx context.Context, paymentID string) (string, error) {
	if err := validPaymentID("payment_id", paymentID); err != nil {
		return "", err
	}
	return s.store.OrderOfPayment(ctx, paymentID)
}
