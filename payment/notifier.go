package payment

import (
	"context"
	"net/http"
)

// Notifier verifies the notifications a gateway sends in its own format —
// Stripe's signed events, Alipay's signed form, WeChat Pay's signed and
// encrypted JSON — and turns them into lapse's reports: of payments and of
// refunds (Report.Kind). lapse serves each configured Notifier at POST
// /v1/payments/notify/{Name}, without the API token: the gateway's
// signature is the authentication.
//
// A notification that fails verification — forged, stale, signed with
// another key, malformed — changes nothing, and Refuse answers it. One that
// passes is applied report by report (a replay is recognised by its
// CallbackID and changes nothing), then Acknowledge answers; a report lapse
// could not apply (its store down) makes the whole notification Refused, so
// the gateway sends it again.
type Notifier interface {
	// Name is the route's last segment: stripe, alipay, wechatpay.
	Name() string
	// Verify checks the notification's signature and freshness and returns
	// the reports it carries: none for an event lapse does not act on (it
	// is still acknowledged, so the gateway stops sending it).
	Verify(ctx context.Context, header http.Header, body []byte) ([]Report, error)
	// Acknowledge answers an accepted notification as the gateway expects
	// (Alipay: the text "success"; WeChat Pay: 204; Stripe: 200).
	Acknowledge(w http.ResponseWriter)
	// Refuse answers a notification that failed verification or could not
	// be applied, as the gateway expects (so that it retries a good one).
	Refuse(w http.ResponseWriter, err error)
}

// Report is one outcome a gateway's notification carries: a payment's (the
// zero Kind) or, since a gateway sends its refunds' outcomes to the same
// notify URL, a refund's (ReportRefund).
type Report struct {
	// Kind says what is reported: a payment attempt's outcome
	// (ReportPayment, the zero value) or a refund's (ReportRefund).
	Kind ReportKind
	// OrderID is lapse's order; "" when the notification names only the
	// payment (a Stripe PaymentIntent without metadata.order_id, a
	// Charge): lapse then finds the order by PaymentID.
	OrderID string
	// PaymentID is the attempt's id at the gateway (out_trade_no,
	// PaymentIntent id); for a refund, the attempt refunded.
	PaymentID string
	// Succeeded, of a payment: the buyer paid AmountCents; otherwise the
	// attempt failed or was cancelled at the gateway. Of a refund: the
	// money went back; otherwise the refund failed or was closed at the
	// gateway (Stripe's failed or canceled, WeChat Pay's ABNORMAL or
	// CLOSED) and the money is still the merchant's.
	Succeeded bool
	// AmountCents is, of a payment, what the buyer paid; of a refund, what
	// the gateway says has been refunded of the payment (its total, when
	// the gateway gives one: Stripe's amount_refunded, Alipay's
	// refund_fee), 0 when it does not say.
	AmountCents int64
	// Currency is the ISO 4217 code of AmountCents (upper case) as the
	// notification states it; "" when it does not, read as the order's.
	Currency string
	// RefundID is a refund's id at the gateway (Stripe's re_…, WeChat
	// Pay's refund_id, Alipay's out_biz_no); "" for a payment.
	RefundID string
	// CallbackID identifies the notification as verified — the gateway's
	// event or notify id, or a digest of what its signature covers — so
	// that the same notification again is recognised as a replay.
	CallbackID string
}

// ReportKind is what a Report reports.
type ReportKind uint8

// Report kinds.
const (
	// ReportPayment: a payment attempt's outcome, applied as lapse's own
	// callback is (lapse.Service.Notify).
	ReportPayment ReportKind = iota
	// ReportRefund: a refund's outcome, recorded by
	// lapse.Service.NotifyRefund: money an attempt owed back is then
	// recorded as given back; it is never required (lapse's refunds are
	// recorded from the gateway's answer to them).
	ReportRefund
)
