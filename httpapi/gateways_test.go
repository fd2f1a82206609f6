package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// hmacNotifier is a gateway whose notifications are JSON reports signed
// with an HMAC in X-Test-Signature: the routing and application of
// POST /v1/payments/notify/{gateway} under test, not a gateway's format
// (each adapter tests its own).
type hmacNotifier struct{ key []byte }

func (hmacNotifier) Name() string { return "testpay" }

func (n hmacNotifier) sign(body []byte) string {
	m := hmac.New(sha256.New, n.key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func (n hmacNotifier) Verify(_ context.Context, h http.Header, body []byte) ([]payment.Report, error) {
	if !hmac.Equal([]byte(h.Get("X-Test-Signature")), []byte(n.sign(body))) {
		return nil, errors.New("bad signature")
	}
	var reps []payment.Report
	if err := json.Unmarshal(body, &reps); err != nil {
		return nil, err
	}
	return reps, nil
}

func (hmacNotifier) Acknowledge(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

func (hmacNotifier) Refuse(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]string{"refused": err.Error()})
}

func TestGatewayNotificationsAreVerifiedThenApplied(t *testing.T) {
	n := hmacNotifier{key: []byte("k")}
	e := newEnv(t, envConfig{Notifiers: []payment.Notifier{n}})
	e.setStock(t, "gw", 10)
	for _, id := range []string{"g1", "g2"} {
		e.create(t, createReq{ID: id, Items: []item{{"gw", 1}}, AmountCents: 500})
		if r := e.do(t, "POST", "/v1/orders/"+id+"/pay", map[string]string{"payment_id": "pi_" + id}); r.Status != http.StatusOK {
			t.Fatalf("pay %s: %d %s", id, r.Status, r.Body)
		}
	}
	send := func(reps []payment.Report, sign bool) response {
		t.Helper()
		body, _ := json.Marshal(reps)
		sig := "0000"
		if sign {
			sig = n.sign(body)
		}
		return e.do(t, "POST", "/v1/payments/notify/testpay", string(body), "X-Test-Signature", sig, "Authorization", "")
	}
	// A forged notification changes nothing.
	if r := send([]payment.Report{{OrderID: "g1", PaymentID: "pi_g1", Succeeded: true, AmountCents: 500, CallbackID: "ev1"}}, false); r.Status != http.StatusUnauthorized {
		t.Fatalf("forged: %d %s", r.Status, r.Body)
	}
	if o := e.get(t, "g1"); o.Status != order.Paying {
		t.Fatalf("g1 after a forged notification: %s", o.Status)
	}
	// g1 by its order id; g2 by its payment id only; one payment lapse does not know.
	r := send([]payment.Report{
		{OrderID: "g1", PaymentID: "pi_g1", Succeeded: true, AmountCents: 500, CallbackID: "ev1"},
		{PaymentID: "pi_g2", Succeeded: true, AmountCents: 500, CallbackID: "ev2"},
		{PaymentID: "pi_stranger", Succeeded: true, AmountCents: 1, CallbackID: "ev3"},
	}, true)
	if r.Status != http.StatusNoContent {
		t.Fatalf("signed: %d %s", r.Status, r.Body)
	}
	for _, id := range []string{"g1", "g2"} {
		if o := e.get(t, id); o.Status != order.Paid || o.PaymentID != "pi_"+id {
			t.Fatalf("%s: %s paid by %q, want PAID by pi_%s", id, o.Status, o.PaymentID, id)
		}
	}
	if r := e.do(t, "POST", "/v1/payments/notify/nosuch", "{}"); r.Status != http.StatusNotFound && r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("an unconfigured gateway: %d", r.Status)
	}
}
