package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

// lapse's API never redirects, so a redirect is someone else's doing (a
// proxy, a hostile server): the client follows none, and above all never
// carries the bearer token to another origin. Here the server redirects to
// another port of the same host, which net/http's client treats as the
// same host and would send the Authorization header to.
func TestClientFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	const tok = "redirect-test-token-0123456789"
	var reached, withToken atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Authorization") != "" {
			withToken.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"o1","status":"PENDING","items":[{"sku":"tee","qty":1}],"amount_cents":1,"currency":"USD"}`))
	}))
	t.Cleanup(other.Close)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.RequestURI(), status)
		}))
		t.Cleanup(redirecting.Close)
		if !strings.HasPrefix(redirecting.URL, "http://127.0.0.1:") || !strings.HasPrefix(other.URL, "http://127.0.0.1:") {
			t.Fatalf("want both servers on 127.0.0.1: %s %s", redirecting.URL, other.URL)
		}
		for name, hc := range map[string]*http.Client{"the client's own": nil, "a caller's http.Client": {}} {
			opts := []client.Option{client.WithToken(tok), client.WithRetry(1, 0)}
			if hc != nil {
				opts = append(opts, client.WithHTTPClient(hc))
			}
			c, err := client.New(redirecting.URL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, getErr := c.GetOrder(ctx, "o1")
			_, createErr := c.CreateOrder(ctx, client.CreateOrder{ID: "o1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1})
			for op, err := range map[string]error{"GetOrder": getErr, "CreateOrder": createErr} {
				var ae *client.Error
				if !errors.As(err, &ae) || ae.Status != status || !strings.Contains(err.Error(), "redirect") || strings.Contains(err.Error(), tok) {
					t.Errorf("%d, %s, %s: %v, want a *client.Error of status %d that says a redirect was not followed", status, name, op, err, status)
				}
			}
		}
	}
	if n, m := reached.Load(), withToken.Load(); n != 0 || m != 0 {
		t.Fatalf("the other port was reached %d times, %d of them with the bearer token", n, m)
	}
}
