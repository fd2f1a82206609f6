package alipay

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/url"
	"reflect"
	"testing"

	"github.com/lapsehq/lapse/payment"
)

// A trade notification that carries a refund (refund_fee, out_biz_no)
// reports it: after a refund in part (TRADE_SUCCESS) with the payment's
// report, as before; after a whole one (TRADE_CLOSED) alone — the trade
// was paid, not failed. refund_fee 0.00 is no refund; a malformed one is
// refused.
func TestRefundInTradeNotification(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	n := &Notifier{appID: "2021000000000001", key: &key.PublicKey}
	notify := func(status, total, refundFee string) ([]payment.Report, error) {
		t.Helper()
		v := url.Values{"notify_id": {"nid-1"}, "notify_type": {"trade_status_sync"}, "app_id": {n.appID}, "charset": {"utf-8"},
			"sign_type": {"RSA2"}, "out_trade_no": {"p1"}, "trade_no": {"2026p1"}, "trade_status": {status}, "total_amount": {total}}
		if refundFee != "" {
			v.Set("refund_fee", refundFee)
			v.Set("out_biz_no", "lapse-refund-p1")
			v.Set("gmt_refund", "2026-12-07 12:00:00.123")
		}
		content, err := SignContent(v, "sign", "sign_type")
		if err != nil {
			t.Fatal(err)
		}
		sig, err := SignBytes(key, []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		v.Set("sign", sig)
		return n.Verify(context.Background(), nil, []byte(v.Encode()))
	}
	paid := payment.Report{PaymentID: "p1", Succeeded: true, AmountCents: 1299, Currency: "CNY", CallbackID: "nid-1"}
	refunded := func(cents int64) payment.Report {
		return payment.Report{Kind: payment.ReportRefund, PaymentID: "p1", RefundID: "lapse-refund-p1", Succeeded: true, AmountCents: cents,
			Currency: "CNY", CallbackID: "nid-1"}
	}
	for _, c := range []struct {
		name, status, refundFee string
		want                    []payment.Report
	}{
		{"a refund in part", "TRADE_SUCCESS", "2.99", []payment.Report{paid, refunded(299)}},
		{"a whole refund", "TRADE_CLOSED", "12.99", []payment.Report{refunded(1299)}},
		{"refund_fee 0.00", "TRADE_SUCCESS", "0.00", []payment.Report{paid}},
		{"a closed trade without a refund", "TRADE_CLOSED", "", []payment.Report{{PaymentID: "p1", CallbackID: "nid-1"}}},
	} {
		got, err := notify(c.status, "12.99", c.refundFee)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if got, err := notify("TRADE_CLOSED", "12.99", "12.9.9"); !errors.Is(err, ErrInvalidNotification) {
		t.Errorf("a malformed refund_fee: %+v, %v; want ErrInvalidNotification", got, err)
	}
}
