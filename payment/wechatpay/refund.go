package wechatpay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse/payment"
)

// Refund statuses.
const (
	refundSuccess    = "SUCCESS"
	refundProcessing = "PROCESSING"
	refundAbnormal   = "ABNORMAL"
	refundClosed     = "CLOSED"
)

// stateRefund is the trade_state of a trade refunded (in part or whole).
const stateRefund = "REFUND"

// maxRefundNo is the length of an out_refund_no.
const maxRefundNo = 64

// RefundNo is the out_refund_no of a refund: its key, as it is when it fits
// WeChat Pay's 64 characters of letters, digits and _-|*@, else hashed
// (payment.GatewayKey).
func RefundNo(key string) string {
	return payment.GatewayKey(key, maxRefundNo, func(r rune) bool {
		return strings.ContainsRune("_-|*@", r) || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	})
}

// refundAnswer is the part of a refund (the create's answer) the adapter
// reads.
type refundAnswer struct {
	RefundID    string `json:"refund_id"`
	OutRefundNo string `json:"out_refund_no"`
	OutTradeNo  string `json:"out_trade_no"`
	Status      string `json:"status"`
	Amount      *struct {
		Refund   *int64 `json:"refund"`
		Currency string `json:"currency"`
	} `json:"amount"`
}

var _ payment.Refunder = (*Gateway)(nil)

// Refund implements payment.Refunder. It queries the trade out_trade_no =
// r.PaymentID (unknown: payment.ErrUnknownPayment; NOTPAY, CLOSED, REVOKED,
// PAYERROR: payment.ErrNotRefundable; paid in another currency than r's: an
// error), then POST /v3/refund/domestic/refunds with out_trade_no,
// out_refund_no = RefundNo(r.Key) — WeChat Pay makes one refund per
// out_refund_no and answers it again to a request repeated — reason and
// amount {refund, total (the trade's, as WeChat Pay requires), currency}.
// SUCCESS has succeeded, PROCESSING is pending; ABNORMAL (the buyer's card
// or account cannot take it back) and CLOSED are payment.ErrRefundFailed.
// WeChat Pay refunds in part: a partial amount is refunded. Responses are
// verified as the query's are.
func (g *Gateway) Refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	res, err := g.refund(ctx, r)
	if err != nil {
		return payment.RefundResult{}, fmt.Errorf("wechatpay: refund order %q payment %q: %w", r.OrderID, r.PaymentID, err)
	}
	return res, nil
}

func (g *Gateway) refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	if err := payment.CheckRefund(r); err != nil {
		return payment.RefundResult{}, err
	}
	tx, known, err := g.transaction(ctx, r.PaymentID)
	if err != nil {
		return payment.RefundResult{}, err
	}
	if !known {
		return payment.RefundResult{}, fmt.Errorf("%w: WeChat Pay has no trade %q", payment.ErrUnknownPayment, r.PaymentID)
	}
	switch tx.TradeState {
	case stateSuccess, stateRefund:
	case stateNotPay, stateClosed, stateRevoked, statePayError:
		return payment.RefundResult{}, fmt.Errorf("%w: the trade is %s", payment.ErrNotRefundable, tx.TradeState)
	default:
		return payment.RefundResult{}, fmt.Errorf("%w: a refund of a trade in state %q", ErrBadResponse, tx.TradeState)
	}
	if tx.Amount == nil || tx.Amount.Total == nil || *tx.Amount.Total <= 0 {
		return payment.RefundResult{}, fmt.Errorf("%w: a %s trade without a valid amount.total", ErrBadResponse, tx.TradeState)
	}
	currency := strings.ToUpper(tx.Amount.Currency)
	if currency == "" {
		currency = Domestic
	}
	if r.Currency != "" && r.Currency != currency {
		return payment.RefundResult{}, fmt.Errorf("asked to refund %s, the trade was paid in %s", r.Currency, currency)
	}
	refundNo := RefundNo(r.Key)
	type amount struct {
		Refund   int64  `json:"refund"`
		Total    int64  `json:"total"`
		Currency string `json:"currency"`
	}
	body, err := json.Marshal(struct {
		OutTradeNo  string `json:"out_trade_no"`
		OutRefundNo string `json:"out_refund_no"`
		Reason      string `json:"reason,omitempty"`
		Amount      amount `json:"amount"`
	}{r.PaymentID, refundNo, truncateRunes(r.Reason, 80), amount{r.AmountCents, *tx.Amount.Total, currency}})
	if err != nil {
		return payment.RefundResult{}, err
	}
	code, answer, err := g.do(ctx, http.MethodPost, "/v3/refund/domestic/refunds", body)
	if err != nil {
		return payment.RefundResult{}, err
	}
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		if e := parseAPIError(answer); e.Code == "RESOURCE_NOT_EXISTS" || e.Code == "ORDER_NOT_EXIST" {
			return payment.RefundResult{}, fmt.Errorf("%w: refund answered 404 %s (%s)", payment.ErrUnknownPayment, e.Code, e.Message)
		}
		return payment.RefundResult{}, fmt.Errorf("%w: refund: HTTP 404: %s", ErrBadResponse, payment.Snippet(answer))
	default:
		e := parseAPIError(answer)
		return payment.RefundResult{}, fmt.Errorf("%w: refund: HTTP %d %s (%s)", ErrBadResponse, code, e.Code, e.Message)
	}
	var a refundAnswer
	if err := json.Unmarshal(answer, &a); err != nil {
		return payment.RefundResult{}, fmt.Errorf("%w: refund: malformed answer: %v: %s", ErrBadResponse, err, payment.Snippet(answer))
	}
	switch {
	case a.RefundID == "" || a.OutRefundNo != refundNo || a.OutTradeNo != r.PaymentID:
		return payment.RefundResult{}, fmt.Errorf("%w: refund: the answer is refund %q, out_refund_no %q of out_trade_no %q", ErrBadResponse, a.RefundID, a.OutRefundNo, a.OutTradeNo)
	case a.Amount == nil || a.Amount.Refund == nil || *a.Amount.Refund != r.AmountCents:
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s: asked %d, the answer's amount.refund is another: %s", ErrBadResponse, a.RefundID, r.AmountCents, payment.Snippet(answer))
	}
	res := payment.RefundResult{RefundID: a.RefundID, AmountCents: r.AmountCents, Currency: currency}
	if c := a.Amount.Currency; c != "" && !strings.EqualFold(c, currency) {
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s in %s of a trade in %s", ErrBadResponse, a.RefundID, c, currency)
	}
	switch a.Status {
	case refundSuccess:
		res.State = payment.RefundSucceeded
	case refundProcessing:
		res.State = payment.RefundPending
	case refundAbnormal, refundClosed:
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s is %s", payment.ErrRefundFailed, a.RefundID, a.Status)
	default:
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s: unknown status %q", ErrBadResponse, a.RefundID, a.Status)
	}
	return res, nil
}

// truncateRunes cuts s to at most n characters (WeChat Pay counts a reason
// in characters).
func truncateRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
