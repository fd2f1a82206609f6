package stripe_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/gatewaytest"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
)

// The conformance suite every gateway adapter runs. Stripe knows
// PaymentIntents, not orders (AttemptsOnly), and a PaymentIntent it does
// not know is an error, never NOT_PAID (UnknownIsError): its id comes from
// the buyer's client, and "No such payment_intent" is as often a live key
// asked about a test id, or another account's, as a payment never made.
func TestGatewayConformance(t *testing.T) {
	t.Parallel()
	const timeout = 250 * time.Millisecond
	gatewaytest.Run(t, gatewaytest.Harness{
		New: func(t *testing.T) (payment.Gateway, gatewaytest.Fake) {
			fs := stripetest.New(t, testKey)
			return newGateway(t, fs.URL, stripe.Config{Timeout: timeout}), &fakeStripe{fs}
		},
		Timeout:        timeout,
		AttemptsOnly:   true,
		UnknownIsError: true,
		PaymentID:      "pi_suite1",
		PartialRefunds: true,
		Currency:       "USD", // stripetest's PaymentIntents are in usd
	})
}

// fakeStripe is stripetest's server as the suite's gatewaytest.Fake: a
// trade is a PaymentIntent whose status says the suite's state.
type fakeStripe struct{ *stripetest.Server }

var statusOf = map[gatewaytest.Trade]string{
	gatewaytest.TradePaid:     "succeeded",
	gatewaytest.TradeNotPaid:  "requires_payment_method",
	gatewaytest.TradePending:  "processing",
	gatewaytest.TradeClosed:   "canceled",
	gatewaytest.TradeUnmapped: "requires_capture", // authorised, not captured: lapse does not decide that
}

func (f *fakeStripe) Set(orderID, paymentID string, st gatewaytest.Trade, cents int64) {
	if paymentID == "" {
		return // Stripe has no trade for an order as a whole
	}
	if st == gatewaytest.TradeUnknown {
		f.Forget(paymentID)
		return
	}
	pi := stripetest.PaymentIntent{ID: paymentID, Status: statusOf[st], Amount: max(cents, 1), Metadata: map[string]string{"order_id": orderID}}
	if st == gatewaytest.TradePaid {
		pi.AmountReceived = cents
	}
	f.Server.Set(pi)
}

func (f *fakeStripe) Refunds(_, paymentID string) int { return len(f.Server.Refunds(paymentID)) }

func (f *fakeStripe) Fail(fault gatewaytest.Fault) {
	f.SetOutage(map[gatewaytest.Fault]stripetest.Outage{
		gatewaytest.FaultNone:        stripetest.OutageNone,
		gatewaytest.FaultServerError: stripetest.OutageServerError,
		gatewaytest.FaultHang:        stripetest.OutageHang,
		gatewaytest.FaultGarbage:     stripetest.OutageGarbage,
	}[fault])
}
