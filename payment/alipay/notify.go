package alipay

import (
	"context"
	"crypto/rsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/lapsehq/lapse/payment"
)

// ErrInvalidNotification is returned, wrapped, by Notifier.Verify for a
// notification that is forged, signed with another key, tampered with,
// malformed, or meant for another app.
var ErrInvalidNotification = errors.New("alipay: invalid notification")

// Notifier verifies Alipay's asynchronous notifications (the notify_url of
// a trade: POST /v1/payments/notify/alipay) and turns them into lapse's
// payment and refund reports. It is safe for concurrent use.
type Notifier struct {
	appID string
	key   *rsa.PublicKey
}

var _ payment.Notifier = (*Notifier)(nil)

// NewNotifier returns the notifier of the app cfg.AppID, verifying with
// cfg.AlipayPublicKey (the other fields are not used).
func NewNotifier(cfg Config) (*Notifier, error) {
	switch {
	case cfg.AppID == "":
		return nil, errors.New("alipay: Config.AppID is required")
	case cfg.AlipayPublicKey == nil:
		return nil, errors.New("alipay: Config.AlipayPublicKey (Alipay's public key) is required")
	}
	return &Notifier{appID: cfg.AppID, key: cfg.AlipayPublicKey}, nil
}

// Name implements payment.Notifier.
func (*Notifier) Name() string { return "alipay" }

// Verify implements payment.Notifier. The body is the form-encoded
// notification. Its RSA2 signature over the sorted non-empty parameters but
// sign and sign_type must verify with Alipay's public key, and its app_id
// must be ours. TRADE_SUCCESS and TRADE_FINISHED report the payment of
// out_trade_no (total_amount, in trans_currency or currency when the
// notification names one, else CNY); TRADE_CLOSED its failure; WAIT_BUYER_PAY and
// any other status nothing (acknowledged, so that Alipay stops sending it).
// A notification with refund_fee also reports the refund (refundReport),
// and a TRADE_CLOSED one then only that: the trade was paid, and closed by
// a whole refund.
// The report's CallbackID is the notify_id: Alipay sends the same one again
// until it is acknowledged, and lapse applies it once.
//
// There is no freshness check: Alipay retries an unacknowledged
// notification for about a day (4m, 10m, 10m, 1h, 2h, 6h, 15h), the same
// one each time.
func (n *Notifier) Verify(_ context.Context, _ http.Header, body []byte) ([]payment.Report, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: not a form: %v", ErrInvalidNotification, err)
	}
	content, err := SignContent(v, "sign", "sign_type")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	if t := v.Get("sign_type"); t != "" && t != "RSA2" {
		return nil, fmt.Errorf("%w: sign_type %q, want RSA2", ErrInvalidNotification, t)
	}
	sig := v.Get("sign")
	if sig == "" {
		return nil, fmt.Errorf("%w: no sign", ErrInvalidNotification)
	}
	if err := Verify(n.key, []byte(content), sig); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	// Verified: what follows is Alipay's word.
	if subtle.ConstantTimeCompare([]byte(v.Get("app_id")), []byte(n.appID)) != 1 {
		return nil, fmt.Errorf("%w: app_id %q is not ours", ErrInvalidNotification, v.Get("app_id"))
	}
	notifyID, outTradeNo, status := v.Get("notify_id"), v.Get("out_trade_no"), v.Get("trade_status")
	if notifyID == "" || outTradeNo == "" || status == "" {
		return nil, fmt.Errorf("%w: want notify_id, out_trade_no and trade_status", ErrInvalidNotification)
	}
	refund, err := refundReport(v, notifyID, outTradeNo)
	if err != nil {
		return nil, err
	}
	switch status {
	case statusTradeSuccess, statusTradeFinished:
		cents, err := ParseAmount(v.Get("total_amount"))
		if err != nil {
			return nil, fmt.Errorf("%w: total_amount: %v", ErrInvalidNotification, err)
		}
		currency, err := TradeCurrency(v.Get("trans_currency"), v.Get("currency"))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
		}
		reps := []payment.Report{{PaymentID: outTradeNo, Succeeded: true, AmountCents: cents, Currency: currency, CallbackID: notifyID}}
		if refund != nil {
			reps = append(reps, *refund) // paid, then refunded in part
		}
		return reps, nil
	case statusTradeClosed:
		if refund != nil {
			// Refunded whole: the trade was paid, and is closed by the
			// refund. Not a failure of the payment.
			return []payment.Report{*refund}, nil
		}
		return []payment.Report{{PaymentID: outTradeNo, CallbackID: notifyID}}, nil
	}
	return nil, nil
}

// refundReport reads the refund a verified trade notification carries, nil
// when it carries none. Alipay sends no notification of a refund of its
// own: a refund changes the trade, and the trade's notification then says
// so — refund_fee (all refunded of the trade so far, in yuan), gmt_refund
// and out_biz_no (the refund's out_request_no, RequestNo of lapse's key
// for lapse's refunds) — with trade_status TRADE_SUCCESS after a refund in
// part and TRADE_CLOSED after a whole one. The report is of a refund that
// succeeded (Alipay notifies no refund that failed), of refund_fee, named
// by out_biz_no.
func refundReport(v url.Values, notifyID, outTradeNo string) (*payment.Report, error) {
	fee := v.Get("refund_fee")
	if fee == "" {
		return nil, nil
	}
	cents, err := ParseAmount(fee)
	if err != nil {
		return nil, fmt.Errorf("%w: refund_fee: %v", ErrInvalidNotification, err)
	}
	if cents == 0 {
		return nil, nil
	}
	currency, err := TradeCurrency(v.Get("trans_currency"), v.Get("currency"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	return &payment.Report{Kind: payment.ReportRefund, PaymentID: outTradeNo, Succeeded: true, AmountCents: cents, Currency: currency,
		RefundID: v.Get("out_biz_no"), CallbackID: notifyID}, nil
}

// Acknowledge implements payment.Notifier: exactly "success", as Alipay
// requires to stop sending the notification.
func (*Notifier) Acknowledge(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("success"))
}

// Refuse implements payment.Notifier: "failure" (anything but "success"
// makes Alipay send the notification again), with 400 for a notification
// that failed verification, 413 for one over lapse's size limit (a
// *http.MaxBytesError: it will not fit the next time either) and 503 for
// one lapse could not apply.
func (*Notifier) Refuse(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, ErrInvalidNotification) {
		code = http.StatusBadRequest
	} else if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		code = http.StatusRequestEntityTooLarge
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte("failure"))
}
