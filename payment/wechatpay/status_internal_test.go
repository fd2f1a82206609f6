package wechatpay

import (
	"testing"

	"github.com/lapsehq/lapse/payment"
)

// trade_state REFUND (转入退款: paid, then refunded in part or whole) reads
// as paid and refunded — the payment happened, so the gateway check records
// it and never cancels its order — not as a state lapse does not know
// (asked again forever).
func TestRefundedTradeReadsPaidAndRefunded(t *testing.T) {
	t.Parallel()
	total := int64(1299)
	tx := Transaction{MchID: "m", OutTradeNo: "p1", TradeState: "REFUND"}
	tx.Amount = &struct {
		Total    *int64 `json:"total"`
		Currency string `json:"currency"`
	}{Total: &total}
	st, err := tx.status()
	want := payment.Status{State: payment.StatePaid, PaymentID: "p1", AmountCents: 1299, Currency: "CNY", Refunded: true}
	if err != nil || st != want {
		t.Fatalf("REFUND: %+v, %v; want %+v", st, err, want)
	}
	tx.TradeState = "SUCCESS"
	if st, err := tx.status(); err != nil || st.Refunded || st.State != payment.StatePaid {
		t.Fatalf("SUCCESS: %+v, %v; want PAID, not refunded", st, err)
	}
	tx.Amount = nil
	tx.TradeState = "REFUND"
	if st, err := tx.status(); err == nil {
		t.Fatalf("REFUND without an amount: %+v, want an error", st)
	}
}
