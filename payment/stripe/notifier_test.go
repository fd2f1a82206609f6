package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
)

const testWebhookSecret = "whsec_lapsetestsecret0123456789"

// event is a Stripe event of type typ about a PaymentIntent, as Stripe sends
// it (API version of its own: lapse ignores a mismatch).
func event(id, typ, piID, status string, amountReceived int64, orderID string) []byte {
	meta := map[string]string{}
	if orderID != "" {
		meta["order_id"] = orderID
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": "2020-08-27", "created": time.Now().Unix(), "livemode": false,
		"pending_webhooks": 1, "type": typ,
		"data": map[string]any{"object": map[string]any{
			"id": piID, "object": "payment_intent", "amount": 1299, "amount_received": amountReceived, "currency": "usd",
			"status": status, "metadata": meta, "client_secret": piID + "_secret_x",
		}},
	})
	return b
}

// sign returns the Stripe-Signature header of body signed with secret at t.
func sign(body []byte, secret string, t time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: t})
	return http.Header{"Stripe-Signature": {p.Header}}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	n, err := stripe.NewNotifier(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for _, c := range []struct {
		name   string
		body   []byte
		header http.Header
		want   []payment.Report
		err    error
	}{
		{"succeeded, with metadata.order_id", event("evt_1", "payment_intent.succeeded", "pi_1", "succeeded", 1299, "o-1"), nil,
			[]payment.Report{{OrderID: "o-1", PaymentID: "pi_1", Succeeded: true, AmountCents: 1299, Currency: "USD", CallbackID: "evt_1"}}, nil},
		{"succeeded, without: found by payment id", event("evt_2", "payment_intent.succeeded", "pi_2", "succeeded", 500, ""), nil,
			[]payment.Report{{PaymentID: "pi_2", Succeeded: true, AmountCents: 500, Currency: "USD", CallbackID: "evt_2"}}, nil},
		{"payment_failed", event("evt_3", "payment_intent.payment_failed", "pi_3", "requires_payment_method", 0, "o-3"), nil,
			[]payment.Report{{OrderID: "o-3", PaymentID: "pi_3", CallbackID: "evt_3"}}, nil},
		{"canceled", event("evt_4", "payment_intent.canceled", "pi_4", "canceled", 0, ""), nil,
			[]payment.Report{{PaymentID: "pi_4", CallbackID: "evt_4"}}, nil},
		{"another event: acknowledged, no report", event("evt_5", "payment_intent.created", "pi_5", "requires_payment_method", 0, "o-5"), nil, nil, nil},
		{"a charge event", []byte(`{"id":"evt_6","object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_1","object":"charge"}}}`), nil, nil, nil},
		{"forged: another secret", event("evt_7", "payment_intent.succeeded", "pi_7", "succeeded", 1299, "o-7"),
			sign(event("evt_7", "payment_intent.succeeded", "pi_7", "succeeded", 1299, "o-7"), "whsec_someone_else", now), nil, stripe.ErrInvalidSignature},
		{"altered body", event("evt_8", "payment_intent.succeeded", "pi_8", "succeeded", 999999, "o-8"),
			sign(event("evt_8", "payment_intent.succeeded", "pi_8", "succeeded", 1, "o-8"), testWebhookSecret, now), nil, stripe.ErrInvalidSignature},
		{"stale: signed 6 minutes ago", event("evt_9", "payment_intent.succeeded", "pi_9", "succeeded", 1299, "o-9"),
			sign(event("evt_9", "payment_intent.succeeded", "pi_9", "succeeded", 1299, "o-9"), testWebhookSecret, now.Add(-6*time.Minute)), nil, stripe.ErrInvalidSignature},
		{"unsigned", event("evt_10", "payment_intent.succeeded", "pi_10", "succeeded", 1299, "o-10"), http.Header{}, nil, stripe.ErrInvalidSignature},
		{"garbage header", event("evt_11", "payment_intent.succeeded", "pi_11", "succeeded", 1299, "o-11"), http.Header{"Stripe-Signature": {"t=x,v1"}}, nil, stripe.ErrInvalidSignature},
		{"malformed JSON, signed", []byte(`{"id":"evt_12","type":`), nil, nil, stripe.ErrInvalidEvent},
		{"not a PaymentIntent, signed", []byte(`{"id":"evt_13","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"ch_1","amount_received":5}}}`), nil, nil, stripe.ErrInvalidEvent},
		{"succeeded without an amount, signed", event("evt_14", "payment_intent.succeeded", "pi_14", "succeeded", 0, "o-14"), nil, nil, stripe.ErrInvalidEvent},
		{"no event id, signed", event("", "payment_intent.succeeded", "pi_15", "succeeded", 10, "o-15"), nil, nil, stripe.ErrInvalidEvent},
	} {
		h := c.header
		if h == nil {
			h = sign(c.body, testWebhookSecret, now)
		}
		reps, err := n.Verify(ctx, h, c.body)
		if c.err != nil {
			if !errors.Is(err, c.err) || reps != nil {
				t.Errorf("%s: %+v, %v; want %v", c.name, reps, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(reps) != fmt.Sprint(c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, reps, err, c.want)
		}
	}
	if _, err := stripe.NewNotifier("sk_test_123"); err == nil || strings.Contains(err.Error(), "sk_test_123") {
		t.Errorf("an API key as the webhook secret: %v", err)
	}
}

// A payment_intent.succeeded event reports the PaymentIntent's currency
// with its amount (upper case), so that lapse compares it with the order's.
func TestVerifyCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	n, err := stripe.NewNotifier(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Replace(event("evt_jpy", "payment_intent.succeeded", "pi_jpy", "succeeded", 1299, "o-1"),
		[]byte(`"currency":"usd"`), []byte(`"currency":"jpy"`), 1)
	reps, err := n.Verify(context.Background(), sign(body, testWebhookSecret, time.Now()), body)
	if err != nil || len(reps) != 1 || reps[0].Currency != "JPY" || reps[0].AmountCents != 1299 || !reps[0].Succeeded {
		t.Fatalf("%+v, %v; want one success of 1299 JPY", reps, err)
	}
}

func TestAcknowledgeAndRefuse(t *testing.T) {
	t.Parallel()
	n, _ := stripe.NewNotifier(testWebhookSecret)
	w := httptest.NewRecorder()
	n.Acknowledge(w)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || w.Body.String() != "{}" {
		t.Fatalf("acknowledge: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: %w", stripe.ErrInvalidSignature, webhook.ErrTooOld), 400, "invalid_signature"},
		{fmt.Errorf("%w: x", stripe.ErrInvalidEvent), 400, "invalid_event"},
		{errors.New("store: database is locked at /var/lib/lapse/secret-path.db"), 500, "not_applied"},
		{&http.MaxBytesError{Limit: 1}, 413, "too_large"},
	} {
		w := httptest.NewRecorder()
		n.Refuse(w, c.err)
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != c.status || body.Error.Code != c.code ||
			body.Error.Message == "" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("refuse %v: %d %s", c.err, w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), "secret-path") {
			t.Errorf("an internal error shown to Stripe: %s", w.Body)
		}
	}
}
