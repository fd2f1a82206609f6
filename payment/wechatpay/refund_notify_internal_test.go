package wechatpay

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lapsehq/lapse/payment"
)

// A refund notification's decrypted resource (the signature and the
// decryption are a payment notification's, tested with them): SUCCESS
// reports the refund of out_trade_no succeeded with amount.refund,
// ABNORMAL and CLOSED that it failed, another status nothing; another
// merchant's, or one without its fields, is refused.
func TestRefundReport(t *testing.T) {
	t.Parallel()
	n := &Notifier{mchID: "1900000109"}
	for _, c := range []struct {
		name, plain string
		want        []payment.Report
		err         bool
	}{
		{"SUCCESS", `{"mchid":"1900000109","out_trade_no":"p1","out_refund_no":"lapse-refund-p1","refund_id":"5020","refund_status":"SUCCESS","amount":{"total":1299,"refund":1299,"payer_total":1299,"payer_refund":1299}}`,
			[]payment.Report{{Kind: payment.ReportRefund, PaymentID: "p1", RefundID: "5020", Succeeded: true, AmountCents: 1299, CallbackID: "EV-1"}}, false},
		{"ABNORMAL", `{"mchid":"1900000109","out_trade_no":"p1","out_refund_no":"lapse-refund-p1","refund_id":"5020","refund_status":"ABNORMAL","amount":{"total":1299,"refund":1299}}`,
			[]payment.Report{{Kind: payment.ReportRefund, PaymentID: "p1", RefundID: "5020", CallbackID: "EV-1"}}, false},
		{"CLOSED without a refund_id names the out_refund_no", `{"mchid":"1900000109","out_trade_no":"p1","out_refund_no":"lapse-refund-p1","refund_status":"CLOSED"}`,
			[]payment.Report{{Kind: payment.ReportRefund, PaymentID: "p1", RefundID: "lapse-refund-p1", CallbackID: "EV-1"}}, false},
		{"PROCESSING", `{"mchid":"1900000109","out_trade_no":"p1","refund_id":"5020","refund_status":"PROCESSING"}`, nil, false},
		{"another merchant's", `{"mchid":"1900000999","out_trade_no":"p1","refund_id":"5020","refund_status":"SUCCESS","amount":{"refund":1299}}`, nil, true},
		{"SUCCESS without amount.refund", `{"mchid":"1900000109","out_trade_no":"p1","refund_id":"5020","refund_status":"SUCCESS"}`, nil, true},
		{"no out_trade_no", `{"mchid":"1900000109","refund_id":"5020","refund_status":"SUCCESS","amount":{"refund":1}}`, nil, true},
		{"not JSON", `{`, nil, true},
	} {
		got, err := n.refundReport("EV-1", []byte(c.plain))
		if c.err {
			if !errors.Is(err, ErrInvalidNotification) {
				t.Errorf("%s: %+v, %v; want ErrInvalidNotification", c.name, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
