package payment_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lapsehq/lapse/payment"
)

// The refund route's wire format: what is sent (the body, the
// Idempotency-Key, the same key on a retry after a 5xx), and how each
// answer the protocol allows — and some it does not — is read.
func TestHTTPGatewayRefundWire(t *testing.T) {
	t.Parallel()
	type sent struct {
		path, key, contentType string
		body                   map[string]any
	}
	cases := []struct {
		name   string
		status int
		answer string
		want   error // a sentinel errors.Is must find; nil: success
		plain  bool  // an error wrapping none of the refund sentinels
	}{
		{name: "succeeded", status: 200, answer: `{"refund_id":"re_1","status":"SUCCEEDED","amount_cents":1200,"currency":"usd"}`},
		{name: "pending", status: 200, answer: `{"refund_id":"re_1","status":"PENDING","amount_cents":1200}`},
		{name: "unknown payment", status: 404, answer: `{"error":"unknown_payment","order_id":"o/1"}`, want: payment.ErrUnknownPayment},
		{name: "a 404 of another order", status: 404, answer: `{"error":"unknown_payment","order_id":"o-2"}`, plain: true},
		{name: "a proxy's 404", status: 404, answer: `<html>Not Found</html>`, plain: true},
		{name: "not paid", status: 409, answer: `{"error":"not_paid"}`, want: payment.ErrNotRefundable},
		{name: "already refunded", status: 409, answer: `{"error":"already_refunded"}`, want: payment.ErrNotRefundable},
		{name: "partial", status: 409, answer: `{"error":"partial_refund"}`, want: payment.ErrPartialRefund},
		{name: "failed", status: 409, answer: `{"error":"refund_failed"}`, want: payment.ErrRefundFailed},
		{name: "key reused", status: 409, answer: `{"error":"key_reused"}`, plain: true},
		{name: "another amount", status: 200, answer: `{"refund_id":"re_1","status":"SUCCEEDED","amount_cents":1100}`, plain: true},
		{name: "another currency", status: 200, answer: `{"refund_id":"re_1","status":"SUCCEEDED","amount_cents":1200,"currency":"EUR"}`, plain: true},
		{name: "no refund id", status: 200, answer: `{"status":"SUCCEEDED","amount_cents":1200}`, plain: true},
		{name: "an unknown status", status: 200, answer: `{"refund_id":"re_1","status":"REVERSED","amount_cents":1200}`, plain: true},
		{name: "a 400", status: 400, answer: `{"error":"bad request"}`, plain: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []sent
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				raw, _ := io.ReadAll(r.Body)
				s := sent{path: r.Method + " " + r.URL.EscapedPath(), key: r.Header.Get("Idempotency-Key"), contentType: r.Header.Get("Content-Type")}
				_ = json.Unmarshal(raw, &s.body)
				mu.Lock()
				got = append(got, s)
				first := len(got) == 1
				mu.Unlock()
				if first {
					http.Error(w, "busy", http.StatusServiceUnavailable) // retried with the same key
					return
				}
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.answer))
			}))
			t.Cleanup(srv.Close)
			gw := newGateway(t, srv.URL, fast(payment.HTTPConfig{Retries: 1}))
			res, err := gw.Refund(context.Background(), payment.Refund{OrderID: "o/1", PaymentID: "pay-1", AmountCents: 1200,
				Currency: "USD", Key: "lapse-refund-pay-1", Reason: "late payment"})
			switch {
			case c.want == nil && !c.plain:
				if err != nil || res.RefundID != "re_1" || res.AmountCents != 1200 || res.Currency != "USD" {
					t.Fatalf("%+v, %v", res, err)
				}
			case c.want != nil:
				if !errors.Is(err, c.want) {
					t.Fatalf("%+v, %v; want %v", res, err, c.want)
				}
			default:
				for _, s := range []error{payment.ErrUnknownPayment, payment.ErrNotRefundable, payment.ErrPartialRefund, payment.ErrRefundFailed} {
					if err == nil || errors.Is(err, s) {
						t.Fatalf("%+v, %v; want an error other than %v", res, err, s)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 {
				t.Fatalf("%d requests, want 2 (one retry after the 503)", len(got))
			}
			wantBody := map[string]any{"payment_id": "pay-1", "amount_cents": 1200.0, "currency": "USD", "refund_key": "lapse-refund-pay-1", "reason": "late payment"}
			for _, s := range got {
				if s.path != "POST /payments/o%2F1/refund" || s.key != "lapse-refund-pay-1" || s.contentType != "application/json" || len(s.body) != len(wantBody) {
					t.Fatalf("sent %+v", s)
				}
				for k, v := range wantBody {
					if s.body[k] != v {
						t.Fatalf("sent %s=%v, want %v", k, s.body[k], v)
					}
				}
			}
		})
	}
	t.Run("a refund without a key is refused before anything is sent", func(t *testing.T) {
		t.Parallel()
		gw := newGateway(t, "http://127.0.0.1:1", fast(payment.HTTPConfig{}))
		if _, err := gw.Refund(context.Background(), payment.Refund{OrderID: "o", PaymentID: "p", AmountCents: 1}); err == nil {
			t.Fatal("nil error")
		}
	})
}
