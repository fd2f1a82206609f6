package payment

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The protocol's refund route:
//
//	POST {base}/payments/{order_id}/refund
//	  Idempotency-Key: <refund_key>
//	  {"payment_id", "amount_cents", "currency", "refund_key", "reason"}
//	  200 {"refund_id", "status": "SUCCEEDED"|"PENDING", "amount_cents", "currency"}
//	      the refund, made now or before under the same refund_key (the same
//	      refund_id for every retry)
//	  404 {"error": "unknown_payment", "order_id"}   the gateway does not know the
//	      payment as the order's: ErrUnknownPayment
//	  409 {"error": "not_paid" | "already_refunded"}: ErrNotRefundable
//	  409 {"error": "partial_refund"}: a partial amount to a gateway that
//	      refunds whole payments only: ErrPartialRefund
//	  409 {"error": "refund_failed"}: the gateway took the refund and failed
//	      it: ErrRefundFailed
//
// Anything else — a 5xx, a timeout, a 200 without a refund_id or with
// another amount, a 404 without the protocol's body — is an error that
// wraps none of these, and the refund is sent again later with the same
// refund_key: a gateway behind the protocol must make one refund per key.

// refundBody is the protocol's refund request.
type refundBody struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency,omitempty"`
	RefundKey   string `json:"refund_key"`
	Reason      string `json:"reason,omitempty"`
}

// refundAnswer is the protocol's answer to a refund (200), or its refusal
// (404, 409).
type refundAnswer struct {
	RefundID    string  `json:"refund_id"`
	Status      string  `json:"status"`
	AmountCents *int64  `json:"amount_cents"`
	Currency    string  `json:"currency"`
	Error       string  `json:"error"`
	OrderID     *string `json:"order_id"`
}

// Refusals a refund is answered with (the "error" of a 404 or a 409).
const (
	refusalUnknownPayment  = "unknown_payment"
	refusalNotPaid         = "not_paid"
	refusalAlreadyRefunded = "already_refunded"
	refusalPartial         = "partial_refund"
	refusalFailed          = "refund_failed"
	refusalKeyReused       = "key_reused"
)

var _ Refunder = (*HTTPGateway)(nil)

// Refund implements Refunder: POST {base}/payments/{order_id}/refund. It is
// retried as Query and Close are (a 5xx, a timeout): the refund_key makes a
// retry the same refund.
func (g *HTTPGateway) Refund(ctx context.Context, r Refund) (RefundResult, error) {
	if err := CheckRefund(r); err != nil {
		return RefundResult{}, fmt.Errorf("payment: refund: %w", err)
	}
	body, err := json.Marshal(refundBody{PaymentID: r.PaymentID, AmountCents: r.AmountCents, Currency: r.Currency, RefundKey: r.Key, Reason: r.Reason})
	if err != nil {
		return RefundResult{}, err
	}
	var res RefundResult
	err = g.do(ctx, request{method: http.MethodPost, url: g.attemptURL(r.OrderID, "/refund", ""), body: body, key: r.Key},
		func(code int, body []byte) (verdict, error) {
			var a refundAnswer
			jsonErr := json.Unmarshal(body, &a)
			switch {
			case code == http.StatusOK:
				if jsonErr != nil {
					return broken, fmt.Errorf("%w: malformed JSON: %v: %s", ErrBadResponse, jsonErr, Snippet(body))
				}
				res, err = a.result(r)
				if err != nil {
					return broken, err
				}
				return answered, nil
			case code == http.StatusNotFound:
				if jsonErr != nil || a.Error != refusalUnknownPayment || a.OrderID == nil || *a.OrderID != r.OrderID {
					return answered, fmt.Errorf("%w: 404 without the protocol's body naming the order (is the gateway URL right?): %s", ErrBadResponse, Snippet(body))
				}
				return answered, ErrUnknownPayment
			case code == http.StatusConflict && jsonErr == nil:
				switch a.Error {
				case refusalNotPaid, refusalAlreadyRefunded:
					return answered, fmt.Errorf("%w (%s)", ErrNotRefundable, a.Error)
				case refusalPartial:
					return answered, ErrPartialRefund
				case refusalFailed:
					return answered, ErrRefundFailed
				case refusalKeyReused:
					return answered, fmt.Errorf("%w: refund_key %q was used for another refund", ErrBadResponse, r.Key)
				}
			case code >= 500:
				return transient, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
			}
			return answered, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
		})
	if err != nil {
		return RefundResult{}, fmt.Errorf("payment: refund order %q payment %q: %w", r.OrderID, r.PaymentID, err)
	}
	return res, nil
}

// result reads a 200 answer to r.
func (a refundAnswer) result(r Refund) (RefundResult, error) {
	if a.RefundID == "" || a.AmountCents == nil {
		return RefundResult{}, fmt.Errorf("%w: a refund without refund_id or amount_cents", ErrBadResponse)
	}
	if *a.AmountCents != r.AmountCents {
		return RefundResult{}, fmt.Errorf("%w: asked to refund %d, the gateway answers %d", ErrBadResponse, r.AmountCents, *a.AmountCents)
	}
	st := RefundState(a.Status)
	if st != RefundSucceeded && st != RefundPending {
		return RefundResult{}, fmt.Errorf("%w: unknown refund status %q", ErrBadResponse, a.Status)
	}
	cur := r.Currency
	if a.Currency != "" {
		a.Currency = strings.ToUpper(a.Currency)
		if !isCurrencyCode(a.Currency) {
			return RefundResult{}, fmt.Errorf("%w: currency %q: want an ISO 4217 code", ErrBadResponse, a.Currency)
		}
		if r.Currency != "" && a.Currency != r.Currency {
			return RefundResult{}, fmt.Errorf("%w: asked to refund %s, the gateway answers %s", ErrBadResponse, r.Currency, a.Currency)
		}
		cur = a.Currency
	}
	return RefundResult{RefundID: a.RefundID, State: st, AmountCents: *a.AmountCents, Currency: cur}, nil
}
