package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
)

// gatewayNotify is POST /v1/payments/notify/{gateway}: a gateway's own
// notification (Stripe, Alipay, WeChat Pay), verified by its Notifier and
// applied report by report: a payment's through the same path as lapse's
// own callback, a refund's by Service.NotifyRefund.
// It answers as the gateway expects, never with lapse's JSON errors: a
// gateway retries what it was not acknowledged.
func (s *server) gatewayNotify(n payment.Notifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		body, err := readBody(r)
		if err != nil {
			// Refused for good (each Notifier answers a
			// *http.MaxBytesError 413), so said once here: the body is
			// not shown, and nobody else will see it.
			if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
				s.log.Warn("gateway notification too large; refused with 413", "gateway", n.Name(), "limit_bytes", MaxBodyBytes, "remote", r.RemoteAddr)
			} else {
				s.log.Warn("gateway notification could not be read; refused", "gateway", n.Name(), "err", err, "remote", r.RemoteAddr)
			}
			n.Refuse(w, err)
			return
		}
		reports, err := n.Verify(ctx, r.Header, body)
		if err != nil {
			s.log.Warn("gateway notification refused", "gateway", n.Name(), "err", err, "remote", r.RemoteAddr)
			n.Refuse(w, err)
			return
		}
		for _, rep := range reports {
			apply := s.applyReport
			if rep.Kind == payment.ReportRefund {
				apply = s.applyRefund
			}
			if err := apply(r, n, rep); err != nil {
				s.log.Error("gateway notification not applied; the gateway will send it again", "gateway", n.Name(),
					"payment_id", rep.PaymentID, "order_id", rep.OrderID, "err", err)
				n.Refuse(w, err)
				return
			}
		}
		n.Acknowledge(w)
	})
}

// applyReport applies one verified report. A payment lapse does not know
// (not one of its orders' attempts) is logged and acknowledged: the gateway
// would otherwise send it for days.
func (s *server) applyReport(r *http.Request, n payment.Notifier, rep payment.Report) error {
	ctx := r.Context()
	orderID := rep.OrderID
	if orderID == "" {
		id, err := s.svc.OrderOfPayment(ctx, rep.PaymentID)
		if errors.Is(err, lapse.ErrNotFound) {
			s.log.Warn("gateway notification for a payment lapse does not know; acknowledged", "gateway", n.Name(), "payment_id", rep.PaymentID)
			return nil
		}
		if err != nil {
			return fmt.Errorf("find the order of payment %s: %w", rep.PaymentID, err)
		}
		orderID = id
	}
	status := lapse.PaymentFailed
	if rep.Succeeded {
		status = lapse.PaymentSucceeded
	}
	_, err := s.svc.Notify(ctx, lapse.Notification{OrderID: orderID, PaymentID: rep.PaymentID, Status: status,
		AmountCents: rep.AmountCents, Currency: rep.Currency, CallbackID: n.Name() + ":" + rep.CallbackID})
	var inv *lapse.InvalidError
	if errors.Is(err, lapse.ErrNotFound) || errors.Is(err, lapse.ErrPaymentIDUsed) || errors.As(err, &inv) {
		s.log.Warn("gateway notification names no order of lapse's, or one it cannot apply; acknowledged", "gateway", n.Name(),
			"order_id", orderID, "payment_id", rep.PaymentID, "err", err)
		return nil
	}
	return err
}

// applyRefund records one verified refund report (Service.NotifyRefund,
// which logs and counts what it did). Only the store failing is an error:
// a refund of a payment lapse does not know, or of one that owes nothing,
// is acknowledged, so that the gateway stops sending it.
func (s *server) applyRefund(r *http.Request, n payment.Notifier, rep payment.Report) error {
	_, err := s.svc.NotifyRefund(r.Context(), lapse.RefundNotification{Gateway: n.Name(), OrderID: rep.OrderID, PaymentID: rep.PaymentID,
		RefundID: rep.RefundID, Succeeded: rep.Succeeded, AmountCents: rep.AmountCents, Currency: rep.Currency})
	return err
}
