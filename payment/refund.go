package payment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// Refunder is a Gateway that can give one payment attempt's money back: an
// optional capability, discovered by type assertion as AttemptGateway and
// CurrencyGateway are (every adapter lapse ships has it: Stripe, Alipay,
// WeChat Pay, the generic HTTP gateway).
//
// A refund is idempotent on both sides: lapse names it by Refund.Key, which
// it derives from the attempt (RefundKey) and keeps across retries, and the
// adapter hands that key to the gateway (Stripe's Idempotency-Key, Alipay's
// out_request_no, WeChat Pay's out_refund_no, the protocol's refund_key), so
// that a refund sent again — after a timeout, a 5xx, a crash between
// sending it and recording it — moves the money once and answers the same
// refund.
//
// Every error means "not refunded as far as lapse can tell": the caller
// retries later with the same Key, which is safe. Some errors are final and
// say so: ErrUnknownPayment (the gateway does not know the payment as the
// order's), ErrNotRefundable (it holds no money of it to refund),
// ErrPartialRefund (a partial amount to a gateway that refunds only whole
// payments), ErrRefundFailed (the gateway took the refund and then failed
// it). A Refund is never answered with a success the gateway did not give.
type Refunder interface {
	// Refund refunds r.AmountCents of the payment attempt r.PaymentID of
	// order r.OrderID.
	Refund(ctx context.Context, r Refund) (RefundResult, error)
}

// Refund is a request to give back (part of) one payment attempt's money.
type Refund struct {
	// OrderID is the order the payment attempt belongs to.
	OrderID string
	// PaymentID is the payment attempt (the gateway's trade of it: a
	// PaymentIntent id, an out_trade_no).
	PaymentID string
	// AmountCents is how much to refund, in Currency's minor units; the
	// payment's whole amount unless the gateway refunds partially (see
	// ErrPartialRefund). Must be positive: lapse never asks the gateway to
	// pick the amount, so that what it records is what it asked for.
	AmountCents int64
	// Currency is the ISO 4217 code of AmountCents (upper case): the
	// currency the payment was made in. An adapter that can read the
	// payment's currency refuses a refund in another one.
	Currency string
	// Key is the refund's idempotency key, stable across retries of the
	// same refund (RefundKey of the attempt). An adapter whose gateway
	// limits its key's length or alphabet passes it through GatewayKey.
	Key string
	// Reason is a note for the gateway's records (Alipay's refund_reason,
	// WeChat Pay's reason, Stripe's metadata.lapse_reason); may be empty.
	Reason string
}

// RefundState is where a refund stands at the gateway.
type RefundState string

// Refund states.
const (
	// RefundSucceeded: the gateway refunded the money.
	RefundSucceeded RefundState = "SUCCEEDED"
	// RefundPending: the gateway accepted the refund and is processing it
	// (a bank transfer, WeChat Pay's PROCESSING): the money is on its way,
	// and Refund with the same Key later answers the final state.
	RefundPending RefundState = "PENDING"
)

// RefundResult is the gateway's answer to a refund.
type RefundResult struct {
	// RefundID is the gateway's id of the refund (Stripe's re_…, WeChat
	// Pay's refund_id; Alipay has none and answers the out_request_no):
	// the same for every retry of one Key.
	RefundID string
	State    RefundState
	// AmountCents and Currency are what the gateway says it refunds.
	AmountCents int64
	Currency    string
}

// Refund errors. Each is returned wrapped, with what was refunded; like
// ErrUnknownPayment (which a Refunder also returns, wrapped, for a payment
// the gateway does not know as the order's), each is final for the refund
// it answers: sending it again with the same Key answers the same.
var (
	// ErrPartialRefund: the amount is not the payment's whole amount, and
	// the gateway refunds whole payments only (lapse's mock gateway; a
	// gateway behind the HTTP protocol that answers partial_refund).
	ErrPartialRefund = errors.New("payment: the gateway refunds a payment whole, not in part")
	// ErrNotRefundable: the gateway knows the payment but holds no money of
	// it to refund: it was never paid, or closed, or its money was already
	// refunded under another key.
	ErrNotRefundable = errors.New("payment: the gateway has no money of this payment to refund")
	// ErrRefundFailed: the gateway took the refund and then failed it
	// (Stripe's failed or canceled refund, WeChat Pay's ABNORMAL or CLOSED):
	// the money is still the merchant's, and a person must see why.
	ErrRefundFailed = errors.New("payment: the gateway failed the refund")
)

// RefundKey is the idempotency key of the refund of a payment attempt: one
// refund per attempt, the same key for every retry of it.
func RefundKey(paymentID string) string { return "lapse-refund-" + paymentID }

// GatewayKey fits an idempotency key to a gateway's limits: key itself when
// it has at most max characters, each one allowed; otherwise "lapse-"
// followed by 32 hex digits of its SHA-256 (38 characters, stable, so that
// every retry names the same refund). allowed nil allows any character.
func GatewayKey(key string, max int, allowed func(r rune) bool) string {
	if len(key) <= max && (allowed == nil || strings.IndexFunc(key, func(r rune) bool { return !allowed(r) }) < 0) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "lapse-" + hex.EncodeToString(sum[:16])
}

// CheckRefund says what is wrong with a refund request before anything is
// sent: an adapter calls it first.
func CheckRefund(r Refund) error {
	switch {
	case r.OrderID == "":
		return errEmptyOrderID
	case r.PaymentID == "":
		return errEmptyPaymentID
	case r.AmountCents <= 0:
		return errors.New("refund amount must be positive")
	case r.Key == "":
		return errors.New("refund without an idempotency key")
	case r.Currency != "" && !isCurrencyCode(r.Currency):
		return errors.New("refund currency " + r.Currency + ": want an ISO 4217 code")
	}
	return nil
}

func isCurrencyCode(c string) bool {
	return len(c) == 3 && strings.IndexFunc(c, func(r rune) bool { return r < 'A' || r > 'Z' }) < 0
}
