package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/lapsehq/lapse/payment"
)

// Metadata keys lapse sets on the refunds it creates.
const (
	// MetadataRefundKey holds the refund's idempotency key (payment.Refund's
	// Key), by which a refund made before is found again after Stripe's
	// idempotency keys expire (24 hours).
	MetadataRefundKey = "lapse_refund_key"
	// MetadataReason holds payment.Refund's Reason: Stripe's own reason
	// takes only duplicate, fraudulent or requested_by_customer.
	MetadataReason = "lapse_reason"
)

var _ payment.Refunder = (*Gateway)(nil)

// Refund implements payment.Refunder, a PaymentIntent at a time, in part or
// whole. It retrieves the PaymentIntent (404, or one of another order:
// payment.ErrUnknownPayment; not succeeded: payment.ErrNotRefundable; paid
// in another currency than r's: an error), looks among its refunds for one
// made under r.Key (GET /v1/refunds?payment_intent=…, metadata
// lapse_refund_key) and answers it if there is one, and otherwise creates
// it: POST /v1/refunds with payment_intent, amount and metadata
// (order_id, lapse_refund_key, lapse_reason), under Idempotency-Key r.Key —
// so that a retry within Stripe's 24 hours is the same request, and one
// after them finds the refund by its metadata. A refund Stripe failed or
// canceled is payment.ErrRefundFailed; one already refunded whole under
// another key, payment.ErrNotRefundable.
func (g *Gateway) Refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	res, err := g.refund(ctx, r)
	if err != nil {
		return payment.RefundResult{}, fmt.Errorf("stripe: refund order %q payment %q: %w", r.OrderID, r.PaymentID, err)
	}
	return res, nil
}

func (g *Gateway) refund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	if err := payment.CheckRefund(r); err != nil {
		return payment.RefundResult{}, err
	}
	pi, err := g.retrieve(ctx, r.OrderID, r.PaymentID)
	if err != nil {
		return payment.RefundResult{}, err
	}
	if pi.Status != stripego.PaymentIntentStatusSucceeded {
		return payment.RefundResult{}, fmt.Errorf("%w: the PaymentIntent is %s", payment.ErrNotRefundable, pi.Status)
	}
	if c := Currency(pi.Currency); r.Currency != "" && c != r.Currency {
		return payment.RefundResult{}, fmt.Errorf("%w: asked to refund %s, the PaymentIntent was paid in %s", ErrUnexpected, r.Currency, c)
	}
	return g.findOrCreate(ctx, r)
}

// findOrCreate answers the refund made under r.Key, creating it if there is
// none.
func (g *Gateway) findOrCreate(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	if rf, err := g.findRefund(ctx, r); err != nil || rf != nil {
		if err != nil {
			return payment.RefundResult{}, err
		}
		return refundResult(rf, r)
	}
	params := &stripego.RefundCreateParams{PaymentIntent: stripego.String(r.PaymentID), Amount: stripego.Int64(r.AmountCents)}
	params.SetIdempotencyKey(r.Key)
	params.AddMetadata("order_id", r.OrderID)
	params.AddMetadata(MetadataRefundKey, r.Key)
	if r.Reason != "" {
		params.AddMetadata(MetadataReason, truncate(r.Reason, 500)) // Stripe's bound on a metadata value
	}
	rf, err := g.c.V1Refunds.Create(ctx, params)
	if err != nil {
		if se, ok := errors.AsType[*stripego.Error](err); ok {
			switch se.Code {
			case stripego.ErrorCodeResourceMissing:
				return payment.RefundResult{}, fmt.Errorf("create: %w: %w", payment.ErrUnknownPayment, g.describe(err))
			case stripego.ErrorCodeChargeAlreadyRefunded:
				return payment.RefundResult{}, fmt.Errorf("create: %w: %w", payment.ErrNotRefundable, g.describe(err))
			}
		}
		return payment.RefundResult{}, fmt.Errorf("create: %w", g.describe(err))
	}
	return refundResult(rf, r)
}

// findRefund returns the PaymentIntent's refund made under r.Key, or nil.
// An API that does not list refunds (404: a Stripe-compatible API of only
// POST /v1/refunds) has none to find: the create's Idempotency-Key is then
// the only guard, as it is for 24 hours on Stripe itself. Any other failure
// is an error: a refund is never created blind.
func (g *Gateway) findRefund(ctx context.Context, r payment.Refund) (*stripego.Refund, error) {
	params := &stripego.RefundListParams{PaymentIntent: stripego.String(r.PaymentID)}
	params.Limit = stripego.Int64(100)
	seen := 0
	for rf, err := range g.c.V1Refunds.List(ctx, params) {
		if err != nil {
			if se, ok := errors.AsType[*stripego.Error](err); ok && se.HTTPStatusCode == http.StatusNotFound && se.Code != stripego.ErrorCodeResourceMissing {
				return nil, nil
			}
			return nil, fmt.Errorf("list refunds: %w", g.describe(err))
		}
		if rf.Metadata[MetadataRefundKey] == r.Key {
			return rf, nil
		}
		// A PaymentIntent is refunded a few times at most; a list this
		// long is not worth paging through on every refund.
		if seen++; seen >= 100 {
			break
		}
	}
	return nil, nil
}

// refundResult reads a refund Stripe answered for r.
func refundResult(rf *stripego.Refund, r payment.Refund) (payment.RefundResult, error) {
	if rf.ID == "" {
		return payment.RefundResult{}, fmt.Errorf("%w: a refund without an id", ErrUnexpected)
	}
	if rf.PaymentIntent != nil && rf.PaymentIntent.ID != "" && rf.PaymentIntent.ID != r.PaymentID {
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s is of PaymentIntent %s", ErrUnexpected, rf.ID, rf.PaymentIntent.ID)
	}
	if rf.Amount != r.AmountCents {
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s under key %q is of %d, asked %d", ErrUnexpected, rf.ID, r.Key, rf.Amount, r.AmountCents)
	}
	res := payment.RefundResult{RefundID: rf.ID, AmountCents: rf.Amount, Currency: Currency(rf.Currency)}
	switch rf.Status {
	case stripego.RefundStatusSucceeded:
		res.State = payment.RefundSucceeded
	case stripego.RefundStatusPending, stripego.RefundStatusRequiresAction:
		res.State = payment.RefundPending
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s is %s", payment.ErrRefundFailed, rf.ID, rf.Status)
	default:
		return payment.RefundResult{}, fmt.Errorf("%w: refund %s status %q", ErrUnexpected, rf.ID, rf.Status)
	}
	return res, nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
