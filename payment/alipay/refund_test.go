package alipay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
)

// A refund's request: out_trade_no, refund_amount in yuan, out_request_no
// (the key), refund_reason. Sent again, Alipay moves no money (fund_change
// N) and the refund query tells it succeeded; a trade refunded whole is
// closed at Alipay, and a refund of it under another key is
// ErrNotRefundable.
func TestRefundRequestAndReplay(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetStatus("p-r1", "TRADE_SUCCESS", 1299)
	r := payment.Refund{OrderID: "o-1", PaymentID: "p-r1", AmountCents: 1299, Currency: "CNY", Key: payment.RefundKey("p-r1"), Reason: "订单已取消"}
	first, err := gw.Refund(ctx, r)
	want := payment.RefundResult{RefundID: "lapse-refund-p-r1", State: payment.RefundSucceeded, AmountCents: 1299, Currency: "CNY"}
	if err != nil || first != want {
		t.Fatalf("refund: %+v, %v; want %+v", first, err, want)
	}
	var biz map[string]string
	if err := json.Unmarshal([]byte(f.LastBiz("alipay.trade.refund")), &biz); err != nil {
		t.Fatal(err)
	}
	wantBiz := map[string]string{"out_trade_no": "p-r1", "refund_amount": "12.99", "out_request_no": "lapse-refund-p-r1", "refund_reason": "订单已取消"}
	if len(biz) != len(wantBiz) {
		t.Fatalf("biz_content %v, want %v", biz, wantBiz)
	}
	for k, v := range wantBiz {
		if biz[k] != v {
			t.Fatalf("biz_content %s=%q, want %q", k, biz[k], v)
		}
	}
	if n := f.Calls("alipay.trade.fastpay.refund.query"); n != 0 {
		t.Fatalf("%d refund queries after fund_change Y", n)
	}
	again, err := gw.Refund(ctx, r)
	if err != nil || again != want {
		t.Fatalf("the refund sent again: %+v, %v", again, err)
	}
	if n := f.Calls("alipay.trade.fastpay.refund.query"); n != 1 {
		t.Fatalf("%d refund queries after fund_change N, want 1", n)
	}
	if tr, _ := f.Trade("p-r1"); tr.Status != "TRADE_CLOSED" || f.Refunds("o-1", "p-r1") != 1 {
		t.Fatalf("after a whole refund the trade is %s with %d refunds", tr.Status, f.Refunds("o-1", "p-r1"))
	}
	r.Key = "another-key"
	if _, err := gw.Refund(ctx, r); !errors.Is(err, payment.ErrNotRefundable) {
		t.Fatalf("a whole refund again under another key: %v, want ErrNotRefundable", err)
	}
}

// TRADE_FINISHED is past Alipay's refund window: ErrNotRefundable. A key
// longer than out_request_no's 64 characters is hashed, the same every
// time. A refund in another currency than yuan is refused unsent.
func TestRefundDetails(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetStatus("p-fin", "TRADE_FINISHED", 500)
	if _, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: "p-fin", AmountCents: 500, Key: "k"}); !errors.Is(err, payment.ErrNotRefundable) {
		t.Fatalf("TRADE_FINISHED: %v, want ErrNotRefundable", err)
	}
	long := strings.Repeat("p", 60)
	f.SetStatus(long, "TRADE_SUCCESS", 500)
	key := payment.RefundKey(long)
	res, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: long, AmountCents: 500, Key: key})
	if err != nil || res.RefundID != alipay.RequestNo(key) || len(res.RefundID) > 64 || res.RefundID == key {
		t.Fatalf("refund under a %d-character key: %+v, %v", len(key), res, err)
	}
	if !strings.Contains(f.LastBiz("alipay.trade.refund"), `"out_request_no":"`+res.RefundID+`"`) {
		t.Fatalf("biz_content %s", f.LastBiz("alipay.trade.refund"))
	}
	n := f.Calls("alipay.trade.refund")
	if _, err := gw.Refund(ctx, payment.Refund{OrderID: "o", PaymentID: long, AmountCents: 500, Currency: "USD", Key: "k2"}); err == nil {
		t.Fatal("a refund in USD: nil error")
	}
	if f.Calls("alipay.trade.refund") != n {
		t.Fatal("a refund in USD was sent")
	}
}
