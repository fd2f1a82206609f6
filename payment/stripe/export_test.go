package stripe

import (
	"context"

	"github.com/lapsehq/lapse/payment"
)

// FindOrCreateRefund is Refund past its checks of the PaymentIntent, for
// the wire format test against stripe-mock, whose PaymentIntent fixture is
// never succeeded.
func (g *Gateway) FindOrCreateRefund(ctx context.Context, r payment.Refund) (payment.RefundResult, error) {
	return g.findOrCreate(ctx, r)
}
