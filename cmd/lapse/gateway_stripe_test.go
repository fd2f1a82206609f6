package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/lapsehq/lapse/payment/stripe/stripetest"
)

// `lapse serve --gateway stripe` against a local server playing Stripe: the
// key from a file, the webhook secret from the environment; an unpaid order
// is cancelled at Stripe then in lapse, a webhook pays another; neither
// secret ever shows in the log.
func TestServeWithStripe(t *testing.T) {
	t.Parallel()
	const key, whsec = "sk_test_cmdKeyValue8080", "whsec_cmdWebhookSecret9090"
	fs := stripetest.New(t, key)
	fs.Set(stripetest.PaymentIntent{ID: "pi_cmdunpaid", Status: "requires_payment_method", Amount: 999})
	fs.Set(stripetest.PaymentIntent{ID: "pi_cmdpaid", Status: "requires_payment_method", Amount: 999})
	s := startServe(t, []string{"LAPSE_STRIPE_WEBHOOK_SECRET=" + whsec},
		"--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--grace", "0s",
		"--gateway", "stripe", "--stripe-key-file", writeSecret(t, key+"\n"), "--stripe-api-base", fs.URL)
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	for _, c := range []struct{ id, pid string }{{"o-unpaid", "pi_cmdunpaid"}, {"o-paid", "pi_cmdpaid"}} {
		s.call("POST", "/v1/orders", fmt.Sprintf(`{"id": %q, "items": [{"sku": "tee", "qty": 1}], "amount_cents": 999, "timeout_seconds": 1}`, c.id), 201)
		s.call("POST", "/v1/orders/"+c.id+"/pay", fmt.Sprintf(`{"payment_id": %q}`, c.pid), 200)
	}
	// The buyer pays o-paid; Stripe's webhook (no metadata.order_id) says so.
	fs.SetStatus("pi_cmdpaid", "succeeded")
	body := `{"id": "evt_cmd1", "object": "event", "api_version": "2025-01-27.acacia", "type": "payment_intent.succeeded",
		"data": {"object": {"id": "pi_cmdpaid", "object": "payment_intent", "status": "succeeded", "amount_received": 999, "metadata": {}}}}`
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: whsec})
	s.call("POST", "/v1/payments/notify/stripe", body, 200, "Stripe-Signature", signed.Header)
	if o := s.call("GET", "/v1/orders/o-paid", "", 200); o["status"] != "PAID" {
		t.Fatalf("o-paid after the webhook: %v", o["status"])
	}
	forged := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: "whsec_other"})
	if e := s.call("POST", "/v1/payments/notify/stripe", body, 400, "Stripe-Signature", forged.Header); fmt.Sprint(e["error"]) != "map[code:invalid_signature message:stripe: webhook signature not valid: webhook had no valid signature]" {
		t.Fatalf("forged: %v", e)
	}
	// o-unpaid: the check retrieves its PaymentIntent, cancels it, then the order.
	s.waitStatus("o-unpaid", "CANCELLED", 15*time.Second)
	if st := fs.Status("pi_cmdunpaid"); st != "canceled" {
		t.Fatalf("pi_cmdunpaid: %s", st)
	}
	s.stop()
	logs := s.logs.String()
	for _, secret := range []string{key, whsec, "cmdKeyValue8080", "cmdWebhookSecret9090"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs)
		}
	}
}

// A refused start says what is wrong, never the key or the secret.
func TestServeRefusesABadStripeConfiguration(t *testing.T) {
	t.Parallel()
	const key = "sk_test_refusedKey4242"
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	keyFile := writeSecret(t, key)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--gateway", "stripe"}, "--gateway stripe needs --stripe-key-file"},
		{nil, []string{"--gateway", "stripe", "--stripe-key-file", keyFile, "--stripe-api-base", "http://stripe.example.com"}, "plain http only to a loopback host"},
		{nil, []string{"--gateway", "stripe", "--stripe-key-file", keyFile, "--stripe-api-base", "https://u:refusedKey4242@api.stripe.com"}, "no user or password"},
		{[]string{"LAPSE_STRIPE_KEY=pk_test_refusedKey4242"}, []string{"--gateway", "stripe"}, "publishable key"},
		{[]string{"LAPSE_STRIPE_KEY=" + key}, []string{"--gateway", "stripe", "--stripe-key-file", keyFile}, "not both"},
		{[]string{"LAPSE_STRIPE_WEBHOOK_SECRET=" + key}, []string{"--gateway", "stripe", "--stripe-key-file", keyFile}, "does not start with whsec_"},
		{nil, []string{"--gateway", "stripe", "--stripe-key-file", keyFile, "--gateway-token", "refusedKey4242"}, "--gateway-token is for lapse's JSON protocol"},
	} {
		out, code := lapseCmd(t, c.env, append([]string{"serve", "--store", db}, c.args...)...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v %v: exit %d, want an error with %q:\n%s", c.env, c.args, code, c.want, out)
		}
		if strings.Contains(out, "refusedKey4242") {
			t.Errorf("%v %v: the output shows the key:\n%s", c.env, c.args, out)
		}
	}
	out, code := lapseCmd(t, nil, "reconcile", "--store", db, "--gateway", "stripe", "--stripe-key-file", keyFile)
	if code != 2 || !strings.Contains(out, "--gateway stripe is not supported") {
		t.Errorf("reconcile --gateway stripe: exit %d:\n%s", code, out)
	}
}
