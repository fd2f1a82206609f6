package lapse

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// RefundNotification is a gateway's word about a refund of one payment
// attempt: its refund notification (Stripe's charge.refunded, WeChat Pay's
// REFUND.*, Alipay's trade notification with refund_fee), verified by its
// payment.Notifier (a payment.Report of Kind payment.ReportRefund).
type RefundNotification struct {
	// Gateway is the notifier's name (stripe, alipay, wechatpay): the
	// label of lapse_refund_notifications_total, and the recorded refund's
	// actor, "gateway:<Gateway>". Required.
	Gateway string
	// OrderID is the order when the notification names it; "" otherwise
	// (the attempt is found by PaymentID). One that names another order
	// than the attempt's is not this payment's: unknown.
	OrderID   string
	PaymentID string
	// RefundID is the gateway's id of the refund, recorded with it.
	RefundID string
	// Succeeded: the money went back. Otherwise the refund failed or was
	// closed at the gateway.
	Succeeded bool
	// AmountCents in Currency is what the gateway says has been refunded
	// of the payment; 0 when it does not say. Less than the attempt's
	// amount (or in another currency) is not the attempt's money given
	// back: it is counted as partial and recorded nowhere.
	AmountCents int64
	Currency    string
}

// RefundNotified is what a refund notification did: the outcome label of
// lapse_refund_notifications_total.
type RefundNotified string

// Outcomes of NotifyRefund.
const (
	// RefundNotifiedRefunded: the attempt owed money (REFUND_REQUIRED) and
	// is now REFUNDED (store.Refunds.MarkRefunded: the refund task DONE,
	// order.refunded written, refund_required cleared with the last).
	RefundNotifiedRefunded RefundNotified = "refunded"
	// RefundNotifiedDuplicate: the attempt is REFUNDED already (the
	// gateway's retry, a replay, lapse's own refund recorded first).
	RefundNotifiedDuplicate RefundNotified = "duplicate"
	// RefundNotifiedNotOwed: the attempt owes nothing (it paid its order,
	// failed, or is still open): money given back at the gateway, its
	// console most likely, that lapse did not ask for. Nothing changes; a
	// warning is logged.
	RefundNotifiedNotOwed RefundNotified = "not_owed"
	// RefundNotifiedPartial: a refund of less than the attempt owes, or in
	// another currency: logged, nothing changes.
	RefundNotifiedPartial RefundNotified = "partial"
	// RefundNotifiedFailed: the gateway failed or closed the refund: logged,
	// nothing changes (the refund task, if any, goes on as it was).
	RefundNotifiedFailed RefundNotified = "failed"
	// RefundNotifiedUnknownPayment: no attempt of lapse's has the payment
	// id (or it is another order's than the notification names).
	RefundNotifiedUnknownPayment RefundNotified = "unknown_payment"
)

// refundNotifiedError labels a notification that could not be recorded
// (the store failed): the gateway is refused and sends it again.
const refundNotifiedError RefundNotified = "error"

// NotifyRefund records a gateway's refund notification. It is never
// required: lapse records its own refunds from the gateway's answer to
// them (the refund dispatcher, RefundPayment); a notification records a
// refund whose answer was lost, or one made in the gateway's console for
// money lapse flagged. Only money an attempt owes is recorded given back;
// every other notification changes nothing and is answered without an
// error, so that the gateway stops sending it (see RefundNotified). Each
// is counted in lapse_refund_notifications_total{gateway,outcome}. An
// error (the store failing) means nothing was recorded: the gateway should
// send it again.
func (s *Service) NotifyRefund(ctx context.Context, n RefundNotification) (RefundNotified, error) {
	if n.Gateway == "" {
		return "", invalid("gateway", "required")
	}
	var out RefundNotified
	var err error
	if validPaymentID("payment_id", n.PaymentID) != nil {
		// No attempt can have it.
		s.log.Warn("refund notification for a payment id lapse could not have; acknowledged, nothing recorded", "gateway", n.Gateway)
		out = RefundNotifiedUnknownPayment
	} else {
		out, err = s.notifyRefund(ctx, n)
	}
	if err != nil {
		out = refundNotifiedError
		err = fmt.Errorf("record the %s refund notification of payment %s: %w", n.Gateway, n.PaymentID, err)
	}
	s.metrics.refundNotifications.WithLabelValues(n.Gateway, string(out)).Inc()
	return out, err
}

func (s *Service) notifyRefund(ctx context.Context, n RefundNotification) (RefundNotified, error) {
	log := s.log.With("gateway", n.Gateway, "payment_id", n.PaymentID, "refund_id", n.RefundID)
	// Twice at most: a MarkRefunded refused because the attempt moved
	// since it was read is decided again on what it became.
	for range 2 {
		o, p, err := s.attemptOfPayment(ctx, n.OrderID, n.PaymentID)
		if errors.Is(err, store.ErrNotFound) {
			log.Warn("refund notification for a payment lapse does not know; acknowledged, nothing recorded", "order_id", n.OrderID)
			return RefundNotifiedUnknownPayment, nil
		}
		if err != nil {
			return "", err
		}
		log := log.With("order_id", o.ID, "attempt", p.Status)
		currency := cmp.Or(p.Currency, o.Currency)
		switch {
		case !n.Succeeded:
			log.Warn("the gateway failed or closed a refund; nothing recorded")
			return RefundNotifiedFailed, nil
		case p.Status == order.PaymentRefunded:
			return RefundNotifiedDuplicate, nil
		case p.Status != order.PaymentRefundRequired:
			log.Warn("the gateway refunded a payment that owes nothing (refunded outside lapse?); nothing changed",
				"order_status", o.Status, "refunded_cents", n.AmountCents)
			return RefundNotifiedNotOwed, nil
		case n.AmountCents > 0 && n.AmountCents < p.AmountCents, n.Currency != "" && !strings.EqualFold(n.Currency, currency):
			log.Warn("the gateway refunded part of the money owed back; the attempt still owes it, nothing recorded",
				"refunded_cents", n.AmountCents, "refunded_currency", n.Currency, "owed_cents", p.AmountCents, "owed_currency", currency)
			return RefundNotifiedPartial, nil
		}
		_, err = s.store.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: n.PaymentID, RefundID: n.RefundID,
			Note: "recorded from the gateway's refund notification", Actor: "gateway:" + n.Gateway})
		if errors.Is(err, store.ErrNotRefundable) {
			continue
		}
		if err != nil {
			return "", err
		}
		s.relay.Notify()
		log.Info("refund recorded from the gateway's notification")
		return RefundNotifiedRefunded, nil
	}
	return "", errors.New("the payment attempt kept changing while its refund was recorded")
}

// attemptOfPayment reads the order with the attempt paymentID and that
// attempt; store.ErrNotFound when no attempt has it, or when orderID names
// another order than the attempt's.
func (s *Service) attemptOfPayment(ctx context.Context, orderID, paymentID string) (order.Order, order.Payment, error) {
	id, err := s.store.OrderOfPayment(ctx, paymentID)
	if err != nil {
		return order.Order{}, order.Payment{}, err
	}
	if orderID != "" && orderID != id {
		return order.Order{}, order.Payment{}, fmt.Errorf("payment %s is order %s's, not %s's: %w", paymentID, id, orderID, store.ErrNotFound)
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return order.Order{}, order.Payment{}, err
	}
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return o, p, nil
		}
	}
	return order.Order{}, order.Payment{}, fmt.Errorf("order %s has no attempt %s: %w", id, paymentID, store.ErrNotFound)
}
