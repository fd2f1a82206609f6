package wechatpay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/gatewaytest"
	"github.com/lapsehq/lapse/payment/wechatpay"
)

// A refund's request: out_trade_no, out_refund_no (the key), reason, and
// amount with the trade's total and currency as WeChat Pay requires them.
// PROCESSING is pending; ABNORMAL is ErrRefundFailed.
func TestRefundRequest(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetState("p-r1", "SUCCESS", 1299)
	f.SetRefundStatus("PROCESSING")
	res, err := gw.Refund(ctx, payment.Refund{OrderID: "o-1", PaymentID: "p-r1", AmountCents: 300, Currency: "CNY", Key: payment.RefundKey("p-r1"), Reason: "订单已取消"})
	if err != nil || res.State != payment.RefundPending || res.AmountCents != 300 || res.Currency != "CNY" || res.RefundID == "" {
		t.Fatalf("refund: %+v, %v", res, err)
	}
	var body map[string]any
	if err := json.Unmarshal(f.LastRefundBody(), &body); err != nil {
		t.Fatal(err)
	}
	want := `{"amount":{"currency":"CNY","refund":300,"total":1299},"out_refund_no":"lapse-refund-p-r1","out_trade_no":"p-r1","reason":"订单已取消"}`
	if got, _ := json.Marshal(body); string(got) != want {
		t.Fatalf("refund request %s, want %s", got, want)
	}
	f.SetState("p-r2", "SUCCESS", 1299)
	f.SetRefundStatus("ABNORMAL")
	if _, err := gw.Refund(ctx, payment.Refund{OrderID: "o-1", PaymentID: "p-r2", AmountCents: 1299, Key: "k2"}); !errors.Is(err, payment.ErrRefundFailed) {
		t.Fatalf("an ABNORMAL refund: %v, want ErrRefundFailed", err)
	}
}

// The refund's own answer is verified: forged, it is an error, never a
// refund. A trade paid in another currency than the refund's is refused
// unsent; a key longer than out_refund_no's 64 characters is hashed.
func TestRefundDetails(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetState("p-sig", "SUCCESS", 500)
	f.FailOnly("refund", gatewaytest.FaultBadSignature)
	if res, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: "p-sig", AmountCents: 500, Key: "k"}); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a forged refund answer: %+v, %v; want a signature error", res, err)
	}
	f.FailOnly("", gatewaytest.FaultNone)

	f.SetPriced("p-usd", 500, "USD")
	if _, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: "p-usd", AmountCents: 500, Currency: "CNY", Key: "k3"}); err == nil {
		t.Fatal("a CNY refund of a USD trade: nil error")
	}
	if n := f.Count("refund"); n != 1 {
		t.Fatalf("%d refund requests, want 1 (the forged one)", n)
	}
	f.SetState("p-long", "SUCCESS", 500)
	key := payment.RefundKey(strings.Repeat("x", 60))
	if _, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: "p-long", AmountCents: 500, Key: key}); err != nil {
		t.Fatal(err)
	}
	if no := wechatpay.RefundNo(key); len(no) > 64 || !strings.Contains(string(f.LastRefundBody()), `"out_refund_no":"`+no+`"`) {
		t.Fatalf("out_refund_no of a %d-character key: %s", len(key), f.LastRefundBody())
	}
}
