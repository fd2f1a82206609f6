package web_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
)

// The overview's live fragment is its content without the layout, never
// cached, under the same headers; behind the token, a request without the
// session is sent to the login (which app.js's fetch, refusing redirects,
// takes as the end of its refreshes). The search answers with a redirect
// to the order, by order id or payment id.
func TestOverviewFragmentAndSearch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	if _, err := f.svc.SetStock(ctx, "tee", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o.1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.PayAttempt(ctx, "o.1", "pi_1"); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(base, path string) (*http.Response, string) {
		t.Helper()
		res, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, body := get(f.open, "/?fragment=live")
	if res.StatusCode != http.StatusOK || strings.Contains(body, "<html") || strings.Contains(body, "<header") ||
		!strings.Contains(body, `id="counts" data-live`) || !strings.Contains(body, `data-charts=`) {
		t.Errorf("the live fragment: %d:\n%.400s", res.StatusCode, body)
	}
	if res.Header.Get("Cache-Control") != "no-store" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "connect-src 'self'") {
		t.Errorf("the live fragment's headers: %v", res.Header)
	}
	if res, _ := get(f.guarded, "/?fragment=live"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/login") {
		t.Errorf("the live fragment without a session: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	for q, want := range map[string]string{
		"o.1":   "/ui/orders/o.1",
		"pi_1":  "/ui/orders/o.1?payment=pi_1",
		"+o.1+": "/ui/orders/o.1", // spaces around are not part of the id
		"":      "/ui/orders",
	} {
		res, _ := get(f.open, "/ui/search?q="+q)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want {
			t.Errorf("search %q: %d to %q, want %q", q, res.StatusCode, res.Header.Get("Location"), want)
		}
	}
	if res, body := get(f.open, "/ui/search?q=%3Cb%3Enope"); res.StatusCode != http.StatusNotFound || !strings.Contains(body, "&#34;&lt;b&gt;nope&#34;") {
		t.Errorf("search for nothing: %d:\n%.400s", res.StatusCode, body)
	}
}
