package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/lapsehq/lapse/payment"
)

// Tolerance is how old a webhook's signed timestamp may be.
const Tolerance = 5 * time.Minute

// Errors of the Notifier's Verify, both answered 400 by Refuse.
var (
	// ErrInvalidSignature: no Stripe-Signature, one made with another
	// secret, a forged or altered body, a timestamp older than Tolerance.
	ErrInvalidSignature = errors.New("stripe: webhook signature not valid")
	// ErrInvalidEvent: a correctly signed event lapse cannot read.
	ErrInvalidEvent = errors.New("stripe: webhook event not readable")
)

// Notifier is a payment.Notifier for Stripe's webhook events, served at POST
// /v1/payments/notify/stripe. It acts on payment_intent.succeeded (a
// payment of amount_received), payment_intent.payment_failed and
// payment_intent.canceled (the attempt failed); on charge.refunded and on
// charge.refund.updated, refund.updated and refund.failed (a refund's
// outcome: see Verify); and acknowledges every other event without acting
// on it.
type Notifier struct {
	secret string
}

var _ payment.Notifier = (*Notifier)(nil)

// NewNotifier returns the Notifier for the webhook endpoint whose signing
// secret (whsec_…) is given. Its errors never hold the secret.
func NewNotifier(secret string) (*Notifier, error) {
	if err := CheckWebhookSecret(secret); err != nil {
		return nil, err
	}
	return &Notifier{secret: secret}, nil
}

// CheckWebhookSecret says what is wrong with a webhook signing secret,
// without showing it.
func CheckWebhookSecret(secret string) error {
	switch {
	case secret == "":
		return errors.New("stripe: no webhook signing secret")
	case !strings.HasPrefix(secret, "whsec_"):
		return errors.New("stripe: the webhook signing secret does not start with whsec_ (it is the endpoint's signing secret, not an API key)")
	case strings.ContainsAny(secret, " \t\r\n"):
		return errors.New("stripe: the webhook signing secret holds white space")
	}
	return nil
}

// Name implements payment.Notifier.
func (*Notifier) Name() string { return "stripe" }

// Verify implements payment.Notifier: the Stripe-Signature header is checked
// by stripe-go's webhook.ConstructEventWithOptions (Tolerance; an event of
// another API version is accepted, since lapse reads only a PaymentIntent's
// id, status, amount_received, currency and metadata). The report's OrderID is the
// PaymentIntent's metadata.order_id, "" without one (lapse then finds the
// order by the PaymentIntent id): a PaymentIntent made for one order is
// never reported as paying another; its Currency is the PaymentIntent's,
// in upper case; its CallbackID is the event id, so a
// redelivered event changes nothing. Refund events are read by
// refundReports into reports of Kind payment.ReportRefund.
func (n *Notifier) Verify(_ context.Context, header http.Header, body []byte) ([]payment.Report, error) {
	ev, err := webhook.ConstructEventWithOptions(body, header.Get("Stripe-Signature"), n.secret,
		webhook.ConstructEventOptions{Tolerance: Tolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		switch {
		case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
			errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
			return nil, fmt.Errorf("%w: %w", ErrInvalidSignature, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	var succeeded bool
	switch ev.Type {
	case stripego.EventTypePaymentIntentSucceeded:
		succeeded = true
	case stripego.EventTypePaymentIntentPaymentFailed, stripego.EventTypePaymentIntentCanceled:
	case stripego.EventTypeChargeRefunded, stripego.EventTypeChargeRefundUpdated, stripego.EventTypeRefundUpdated, stripego.EventTypeRefundFailed:
		if ev.ID == "" || ev.Data == nil {
			return nil, fmt.Errorf("%w: %s without an id or data", ErrInvalidEvent, ev.Type)
		}
		return refundReports(ev)
	default:
		return nil, nil
	}
	if ev.ID == "" || ev.Data == nil {
		return nil, fmt.Errorf("%w: %s without an id or data", ErrInvalidEvent, ev.Type)
	}
	var pi stripego.PaymentIntent
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
		return nil, fmt.Errorf("%w: event %s: data.object: %w", ErrInvalidEvent, ev.ID, err)
	}
	if !IsPaymentIntentID(pi.ID) {
		return nil, fmt.Errorf("%w: event %s: data.object is not a PaymentIntent (id %q)", ErrInvalidEvent, ev.ID, pi.ID)
	}
	rep := payment.Report{OrderID: pi.Metadata["order_id"], PaymentID: pi.ID, Succeeded: succeeded, CallbackID: ev.ID}
	if succeeded {
		if pi.AmountReceived <= 0 {
			return nil, fmt.Errorf("%w: event %s: payment_intent.succeeded with amount_received %d", ErrInvalidEvent, ev.ID, pi.AmountReceived)
		}
		rep.AmountCents, rep.Currency = pi.AmountReceived, Currency(pi.Currency)
	}
	return []payment.Report{rep}, nil
}

// refundReports reads a refund event (Verify). charge.refunded carries the
// Charge: one report of its PaymentIntent, succeeded, of amount_refunded
// (all refunded of it so far), naming the newest succeeded refund among
// the Charge's refunds — none when every refund listed is still pending
// (charge.refund.updated tells their end); API versions since 2022-11-15
// do not list the refunds, and the report then names none. The other
// events carry one Refund: succeeded is a report of its amount, failed or
// canceled one that failed, pending and requires_action none. A Charge or
// Refund without a PaymentIntent (a charge lapse did not make) reports
// nothing.
func refundReports(ev stripego.Event) ([]payment.Report, error) {
	if ev.Type == stripego.EventTypeChargeRefunded {
		var ch stripego.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil {
			return nil, fmt.Errorf("%w: event %s: data.object: %w", ErrInvalidEvent, ev.ID, err)
		}
		if !strings.HasPrefix(ch.ID, "ch_") && !strings.HasPrefix(ch.ID, "py_") {
			return nil, fmt.Errorf("%w: event %s: data.object is not a Charge (id %q)", ErrInvalidEvent, ev.ID, ch.ID)
		}
		if ch.PaymentIntent == nil || !IsPaymentIntentID(ch.PaymentIntent.ID) || ch.AmountRefunded <= 0 {
			return nil, nil
		}
		refundID := ""
		if ch.Refunds != nil && len(ch.Refunds.Data) > 0 {
			for _, rf := range ch.Refunds.Data {
				if rf != nil && rf.Status == stripego.RefundStatusSucceeded {
					refundID = rf.ID
					break
				}
			}
			if refundID == "" {
				return nil, nil // pending, or failed: charge.refund.updated says
			}
		}
		return []payment.Report{{Kind: payment.ReportRefund, OrderID: ch.Metadata["order_id"], PaymentID: ch.PaymentIntent.ID, Succeeded: true,
			AmountCents: ch.AmountRefunded, Currency: Currency(ch.Currency), RefundID: refundID, CallbackID: ev.ID}}, nil
	}
	var rf stripego.Refund
	if err := json.Unmarshal(ev.Data.Raw, &rf); err != nil {
		return nil, fmt.Errorf("%w: event %s: data.object: %w", ErrInvalidEvent, ev.ID, err)
	}
	if !strings.HasPrefix(rf.ID, "re_") && !strings.HasPrefix(rf.ID, "pyr_") {
		return nil, fmt.Errorf("%w: event %s: data.object is not a Refund (id %q)", ErrInvalidEvent, ev.ID, rf.ID)
	}
	if rf.PaymentIntent == nil || !IsPaymentIntentID(rf.PaymentIntent.ID) {
		return nil, nil
	}
	rep := payment.Report{Kind: payment.ReportRefund, OrderID: rf.Metadata["order_id"], PaymentID: rf.PaymentIntent.ID, RefundID: rf.ID,
		AmountCents: rf.Amount, Currency: Currency(rf.Currency), CallbackID: ev.ID}
	switch rf.Status {
	case stripego.RefundStatusSucceeded:
		rep.Succeeded = true
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
	default:
		return nil, nil
	}
	return []payment.Report{rep}, nil
}

// Acknowledge implements payment.Notifier: 200 with an empty JSON object.
func (*Notifier) Acknowledge(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("{}"))
}

// Refuse implements payment.Notifier: 400 {"error":{"code":
// "invalid_signature"|"invalid_event", "message"}} for a notification that
// failed verification (Stripe retries it, and shows the answer in the
// Dashboard); 500 {"error":{"code":"not_applied"}} for one lapse could not
// apply (its store down), which Stripe sends again.
func (*Notifier) Refuse(w http.ResponseWriter, err error) {
	code, status, msg := "not_applied", http.StatusInternalServerError, "lapse could not apply the event; send it again"
	switch {
	case errors.Is(err, ErrInvalidSignature):
		code, status, msg = "invalid_signature", http.StatusBadRequest, err.Error()
	case errors.Is(err, ErrInvalidEvent):
		code, status, msg = "invalid_event", http.StatusBadRequest, err.Error()
	default:
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code, status, msg = "too_large", http.StatusRequestEntityTooLarge, "event body too large"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
