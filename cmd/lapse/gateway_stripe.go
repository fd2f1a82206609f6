package main

import (
	"errors"
	"log/slog"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
)

// stripeFlags configure --gateway stripe.
type stripeFlags struct {
	key, webhookSecret secretFlag
	apiBase            *string
}

func addStripeFlags(fs *flagSet) stripeFlags {
	return stripeFlags{
		key: addSecretFlag(fs, "stripe-key",
			"with --gateway stripe: Stripe secret (sk_…) or restricted (rk_…) API key, with write access to PaymentIntents and Checkout Sessions"),
		webhookSecret: addSecretFlag(fs, "stripe-webhook-secret",
			"with --gateway stripe: signing secret (whsec_…) of the webhook endpoint https://<lapse>/v1/payments/notify/stripe; without one Stripe's events are not served"),
		apiBase: fs.String("stripe-api-base", stripe.DefaultAPIBase,
			"with --gateway stripe: Stripe's API base URL (https; http to a loopback stripe-mock)"),
	}
}

// open returns the Stripe gateway and, with a webhook secret, its Notifier.
// Its errors never hold the key or the secret.
func (f stripeFlags) open(g gatewayFlags, logger *slog.Logger) (payment.Gateway, []payment.Notifier, error) {
	if *g.token != "" {
		return nil, nil, errors.New("--gateway-token is for lapse's JSON protocol; with --gateway stripe give --stripe-key-file (or LAPSE_STRIPE_KEY)")
	}
	key, err := f.key.get()
	if err != nil {
		return nil, nil, err
	}
	if key == "" {
		return nil, nil, errors.New("--gateway stripe needs --stripe-key-file (or --stripe-key, LAPSE_STRIPE_KEY)")
	}
	retries := *g.retries
	if retries == 0 {
		retries = -1 // none, as the flag says (0 is the default in stripe.Config)
	}
	gw, err := stripe.New(stripe.Config{Key: key, APIBase: *f.apiBase, Timeout: *g.timeout, Retries: retries})
	if err != nil {
		return nil, nil, err
	}
	secret, err := f.webhookSecret.get()
	if err != nil {
		return nil, nil, err
	}
	if secret == "" {
		logger.Warn("--gateway stripe without --stripe-webhook-secret-file: POST /v1/payments/notify/stripe is not served, and lapse learns of Stripe payments only by asking at each order's deadline")
		return gw, nil, nil
	}
	n, err := stripe.NewNotifier(secret)
	if err != nil {
		return nil, nil, err
	}
	return gw, []payment.Notifier{n}, nil
}
