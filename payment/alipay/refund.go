package alipay

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse/payment"
)

// Sub codes of a refund the adapter acts on.
const (
	subTradeHasClose       = "ACQ.TRADE_HAS_CLOSE"
	subRefundAmtNotEqTotal = "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL" // over what is left of the trade, or another amount under the same out_request_no
	refundStatusSuccess    = "REFUND_SUCCESS"
)

// maxRequestNo is the length of an out_request_no.
const maxRequestNo = 64

// RequestNo is the out_request_no of a refund: its key, as it is when it
// fits Alipay's 64 characters of letters, digits, _ and -, else hashed
// (payment.GatewayKey).
func RequestNo(key string) string {
	return payment.GatewayKey(key, maxRequestNo, func(r rune) bool {
		return r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	})
}

// refundResponse is the part of alipay.trade.refund's response the adapter
// reads.
type refundResponse struct {
	tradeResponse
	// FundChange is Y when this request moved money, N when it did not
	// (a request already made under the same out_request_no, or one still
	// in progress): the refund query then tells.
	FundChange string `json:"fund_change"`
}

// refundQueryResponse is the part of alipay.trade.fastpay.refund.query's
// response the adapter reads.
type refundQueryResponse struct {
	tradeResponse
	OutRequestNo string `json:"out_request_no"`
	RefundAmount string `json:"refund_amount"`
	RefundStatus string `json:"refund_status"`
}

var _ payment.Refunder = (*Gateway)(nil)

// Refund implements payment.Refunder: alipay.trade.refund of the trade
// out_trade_no = r.PaymentID, refund_amount in yuan, out_request_no =
// RequestNo(r.Key) — Alipay makes one refund per out_request_no of a trade
// — and refund_reason. A refund that moved money (fund_change Y) has
// succeeded; one that did not (N: made before, or in progress) is looked up
// with alipay.trade.fastpay.refund.query: found REFUND_SUCCESS (or without
// a status, as older answers are) it has succeeded; not found, it is an
// error, and lapse sends it again. ACQ.TRADE_NOT_EXIST is
// payment.ErrUnknownPayment; a trade not paid, closed or finished
// (ACQ.TRADE_STATUS_ERROR, ACQ.TRADE_HAS_CLOSE) or with nothing left to
// refund (ACQ.REFUND_AMT_NOT_EQUAL_TOTAL), payment.ErrNotRefundable. Alipay
// refunds in part: a partial amount is refunded. The RefundID is the
// out_request_no (Alipay gives a refund no id of its own).
func (g *Gateway) Refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	res, err := g.refund(ctx, r)
	if err != nil {
		return payment.RefundResult{}, fmt.Errorf("alipay: refund order %q payment %q: %w", r.OrderID, r.PaymentID, err)
	}
	return res, nil
}

func (g *Gateway) refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	if err := payment.CheckRefund(r); err != nil {
		return payment.RefundResult{}, err
	}
	if r.Currency != "" && !g.AcceptsCurrency(r.Currency) {
		return payment.RefundResult{}, fmt.Errorf("a refund in %s: the adapter refunds yuan only", r.Currency)
	}
	requestNo := RequestNo(r.Key)
	var resp refundResponse
	err := g.invoke(ctx, "alipay.trade.refund", struct {
		OutTradeNo   string `json:"out_trade_no"`
		RefundAmount string `json:"refund_amount"`
		OutRequestNo string `json:"out_request_no"`
		RefundReason string `json:"refund_reason,omitempty"`
	}{r.PaymentID, FormatAmount(r.AmountCents), requestNo, r.Reason}, &resp)
	if err != nil {
		return payment.RefundResult{}, err
	}
	if resp.Code != codeSuccess {
		switch resp.SubCode {
		case subTradeNotExist:
			return payment.RefundResult{}, fmt.Errorf("trade.refund: %w: %s", payment.ErrUnknownPayment, resp.failure())
		case subTradeStatusErr, subTradeHasClose, subRefundAmtNotEqTotal:
			return payment.RefundResult{}, fmt.Errorf("trade.refund: %w: %s", payment.ErrNotRefundable, resp.failure())
		}
		return payment.RefundResult{}, fmt.Errorf("%w: trade.refund: %s", ErrBadResponse, resp.failure())
	}
	if resp.OutTradeNo != r.PaymentID {
		return payment.RefundResult{}, fmt.Errorf("%w: trade.refund: the answer is about out_trade_no %q", ErrBadResponse, resp.OutTradeNo)
	}
	done := payment.RefundResult{RefundID: requestNo, State: payment.RefundSucceeded, AmountCents: r.AmountCents, Currency: Domestic}
	if resp.FundChange == "Y" {
		return done, nil
	}
	var q refundQueryResponse
	err = g.invoke(ctx, "alipay.trade.fastpay.refund.query", struct {
		OutTradeNo   string `json:"out_trade_no"`
		OutRequestNo string `json:"out_request_no"`
	}{r.PaymentID, requestNo}, &q)
	if err != nil {
		return payment.RefundResult{}, fmt.Errorf("trade.refund answered fund_change %q; the refund query: %w", resp.FundChange, err)
	}
	switch {
	case q.Code != codeSuccess:
		return payment.RefundResult{}, fmt.Errorf("%w: refund.query: %s", ErrBadResponse, q.failure())
	case q.OutRequestNo == "":
		return payment.RefundResult{}, fmt.Errorf("%w: trade.refund answered fund_change %q, and the refund query does not find out_request_no %q", ErrBadResponse, resp.FundChange, requestNo)
	case q.OutRequestNo != requestNo || q.OutTradeNo != r.PaymentID:
		return payment.RefundResult{}, fmt.Errorf("%w: refund.query: the answer is about out_trade_no %q out_request_no %q", ErrBadResponse, q.OutTradeNo, q.OutRequestNo)
	case q.RefundStatus != "" && q.RefundStatus != refundStatusSuccess:
		return payment.RefundResult{}, fmt.Errorf("%w: refund.query: refund_status %q", ErrBadResponse, q.RefundStatus)
	}
	cents, err := ParseAmount(q.RefundAmount)
	if err != nil {
		return payment.RefundResult{}, fmt.Errorf("%w: refund.query: refund_amount: %w", ErrBadResponse, err)
	}
	if cents != r.AmountCents {
		return payment.RefundResult{}, fmt.Errorf("%w: refund.query: out_request_no %q refunded %d, asked %d", ErrBadResponse, requestNo, cents, r.AmountCents)
	}
	return done, nil
}
