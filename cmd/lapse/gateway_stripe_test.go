package main

import (
	"fmt"
	"path/filepath"
	"slices"
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

// A refused start — of lapse serve, of lapse reconcile — says what is
// wrong, never the key or the secret.
func TestServeRefusesABadStripeConfiguration(t *testing.T) {
	t.Parallel()
	const key = "sk_test_refusedKey4242"
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	if out, code := lapseCmd(t, nil, "migrate", "--store", db); code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
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
		for _, command := range []string{"serve", "reconcile"} {
			out, code := lapseCmd(t, c.env, append([]string{command, "--store", db}, c.args...)...)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Errorf("%s %v %v: exit %d, want an error with %q:\n%s", command, c.env, c.args, code, c.want, out)
			}
			if command == "reconcile" && code != 2 {
				t.Errorf("reconcile %v %v: exit %d, want 2 (could not compare)", c.env, c.args, code)
			}
			if strings.Contains(out, "refusedKey4242") {
				t.Errorf("%s %v %v: the output shows the key:\n%s", command, c.env, c.args, out)
			}
		}
	}
}

// `lapse reconcile --gateway stripe` asks Stripe about each PaymentIntent
// lapse recorded of an order — the paying one, a superseded one — on a store
// that `lapse serve --gateway stripe` filled: clean, then a superseded
// PaymentIntent of a cancelled order found succeeded (money taken for a
// cancelled order), then a PaymentIntent Stripe does not know (an error,
// never "not paid").
func TestReconcileWithStripe(t *testing.T) {
	t.Parallel()
	const key = "sk_test_reconcileKey5151"
	fs := stripetest.New(t, key)
	for _, id := range []string{"pi_rcold", "pi_rcnew"} {
		fs.Set(stripetest.PaymentIntent{ID: id, Status: "requires_payment_method", Amount: 999})
	}
	// Paid, its webhook lost: the deadline's check finds it succeeded.
	fs.Set(stripetest.PaymentIntent{ID: "pi_rcpaid", Status: "succeeded", Amount: 999, AmountReceived: 999})
	keyFile := writeSecret(t, key+"\n")
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	gateway := []string{"--gateway", "stripe", "--stripe-key-file", keyFile, "--stripe-api-base", fs.URL}
	s := startServe(t, nil, append([]string{"--store", db, "--grace", "0s"}, gateway...)...)
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	for _, id := range []string{"o-paid", "o-cancelled", "o-abandoned"} {
		s.call("POST", "/v1/orders", fmt.Sprintf(`{"id": %q, "items": [{"sku": "tee", "qty": 1}], "amount_cents": 999, "timeout_seconds": 2}`, id), 201)
	}
	s.call("POST", "/v1/orders/o-paid/pay", `{"payment_id": "pi_rcpaid"}`, 200)
	// The buyer opens a checkout, then another: the first is superseded.
	s.call("POST", "/v1/orders/o-cancelled/pay", `{"payment_id": "pi_rcold"}`, 200)
	s.call("POST", "/v1/orders/o-cancelled/pay", `{"payment_id": "pi_rcnew"}`, 200)
	s.waitStatus("o-paid", "PAID", 15*time.Second)
	s.waitStatus("o-cancelled", "CANCELLED", 15*time.Second)
	s.waitStatus("o-abandoned", "CANCELLED", 15*time.Second)
	s.stop()

	retrieves := func() (n []int) {
		for _, id := range []string{"pi_rcpaid", "pi_rcold", "pi_rcnew"} {
			n = append(n, fs.Count("GET /v1/payment_intents/"+id))
		}
		return n
	}
	posts := func() (n int) {
		for _, c := range fs.Calls() {
			if strings.HasPrefix(c, "POST ") {
				n++
			}
		}
		return n
	}
	before, postsBefore := retrieves(), posts()
	rep, stderr, code := reconcileJSON(t, append([]string{"--store", db}, gateway...)...)
	if code != 0 || !rep.OK() || rep.Orders != 3 || rep.GatewayRecords != 2 {
		t.Fatalf("reconcile of a store Stripe agrees with: exit %d, %+v\n%s", code, rep, stderr)
	}
	after := retrieves()
	for i := range after {
		if after[i] != before[i]+1 {
			t.Errorf("PaymentIntents retrieved %v before reconcile, %v after: want each once more", before, after)
			break
		}
	}
	if posts() != postsBefore {
		t.Errorf("reconcile sent POSTs to Stripe: %q", fs.Calls())
	}

	// pi_rcold, closed when pi_rcnew superseded it, went through after all.
	fs.SetStatus("pi_rcold", "succeeded")
	rep, stderr, code = reconcileJSON(t, append([]string{"--store", db}, gateway...)...)
	if code != 1 {
		t.Fatalf("a cancelled order paid at Stripe: exit %d, want 1\n%+v\n%s", code, rep, stderr)
	}
	if got := mismatchRows(rep.Mismatches); !slices.Equal(got, []string{"cancelled_but_paid o-cancelled pi_rcold"}) || len(rep.Errors) != 0 {
		t.Fatalf("mismatches %q, errors %v; want o-cancelled's pi_rcold cancelled_but_paid", got, rep.Errors)
	}
	if m := rep.Mismatches[0]; m.GatewayAmount != 999 || m.LapseStatus != "CANCELLED" || m.GatewayStatus != "PAID" {
		t.Errorf("row %+v", m)
	}

	// A PaymentIntent Stripe does not know: an error, never "not paid"
	// (which would report the paid order unpaid at Stripe).
	fs.SetStatus("pi_rcold", "canceled")
	fs.Forget("pi_rcpaid")
	rep, stderr, code = reconcileJSON(t, append([]string{"--store", db}, gateway...)...)
	if code == 0 || len(rep.Mismatches) != 0 || len(rep.Errors) != 1 || rep.Errors[0].OrderID != "o-paid" ||
		!strings.Contains(rep.Errors[0].Error, "pi_rcpaid") {
		t.Fatalf("an unknown PaymentIntent: exit %d, mismatches %q, errors %v; want o-paid in error, no mismatch\n%s",
			code, mismatchRows(rep.Mismatches), rep.Errors, stderr)
	}
	for _, out := range []string{stderr, fmt.Sprint(rep)} {
		if strings.Contains(out, "reconcileKey5151") {
			t.Errorf("the key shows:\n%s", out)
		}
	}
}
