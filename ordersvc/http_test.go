package ordersvc_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/ordersvc"
)

const (
	secretOld = "whsec_b2xkLXNlY3JldC1mb3ItbGFwc2UtdGVzdHMtMDEyMzQ1"
	secretNew = "whsec_bmV3LXNlY3JldC1mb3ItbGFwc2UtdGVzdHMtMDEyMzQ1"
)

func delivery() ordersvc.Delivery {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return ordersvc.Delivery{ID: ordersvc.CommandID("o-1", at), Attempt: 3, Command: ordersvc.Command{
		Type: ordersvc.Type, OrderID: "o-1", Deadline: ordersvc.FormatTime(at.Add(-time.Minute)), CancelAfter: ordersvc.FormatTime(at),
		AmountCents: 1200, Currency: "EUR", Attempts: []ordersvc.Attempt{}, SchemaVersion: ordersvc.SchemaVersion}}
}

func TestHTTPSendSignsWithEverySecretAndSetsTheHeaders(t *testing.T) {
	d := delivery()
	var got http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r.Header.Clone(), must(io.ReadAll(r.Body))
		_, _ = io.WriteString(w, `{"result":"cancelled","command_id":"`+d.ID+`"}`)
	}))
	defer srv.Close()
	c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL, Secrets: []string{secretNew, secretOld}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Send(context.Background(), d)
	if err != nil || a.Result != ordersvc.Cancelled {
		t.Fatalf("send: %+v, %v", a, err)
	}
	if got.Get("webhook-id") != d.ID || got.Get(ordersvc.HeaderAttempt) != "3" || got.Get(ordersvc.HeaderDeadline) != d.Command.Deadline {
		t.Fatalf("headers %v", got)
	}
	// A receiver holding either secret of the rotation verifies it.
	for _, secret := range []string{secretOld, secretNew} {
		w, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Verify(body, got); err != nil {
			t.Errorf("a receiver with one of the secrets: %v", err)
		}
	}
	if !strings.Contains(string(body), `"type":"order.cancel_if_pending"`) || !strings.Contains(string(body), `"schema_version":1`) {
		t.Fatalf("body %s", body)
	}
}

func TestHTTPSendClassifiesAnswers(t *testing.T) {
	d := delivery()
	cases := []struct {
		name    string
		status  int
		header  string
		body    string
		want    ordersvc.Result
		refusal bool // DEAD at once
		retry   time.Duration
	}{
		{"a final answer", 200, "", `{"result":"already_paid"}`, ordersvc.AlreadyPaid, false, 0},
		{"paying with a retry", 200, "", `{"result":"paying","retry_after_seconds":7}`, ordersvc.Paying, false, 0},
		{"an unknown result is retried, never guessed", 200, "", `{"result":"ok"}`, "", false, 0},
		{"an unreadable answer is retried", 200, "", `<html>`, "", false, 0},
		{"an answer to another command is retried", 200, "", `{"result":"cancelled","command_id":"cmd_other"}`, "", false, 0},
		{"204 without an answer is retried", 204, "", ``, "", false, 0},
		{"503 is retried", 503, "", `down`, "", false, 0},
		{"429 with Retry-After", 429, "12", ``, "", false, 12 * time.Second},
		{"408 is retried", 408, "", ``, "", false, 0},
		{"409 is retried", 409, "", ``, "", false, 0},
		{"400 is refused for good", 400, "", `bad`, "", true, 0},
		{"401 (a wrong secret) is refused for good", 401, "", ``, "", true, 0},
		{"404 is refused for good", 404, "", ``, "", true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL, Secrets: []string{secretNew}})
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.Send(context.Background(), d)
			switch {
			case tc.want != "":
				if err != nil || a.Result != tc.want {
					t.Fatalf("got %+v, %v; want %s", a, err, tc.want)
				}
			case err == nil:
				t.Fatalf("got %+v, want an error", a)
			case ordersvc.IsRefusal(err) != tc.refusal:
				t.Fatalf("%v: refusal %v, want %v", err, ordersvc.IsRefusal(err), tc.refusal)
			}
			var serr *ordersvc.StatusError
			if tc.retry > 0 && (!errors.As(err, &serr) || serr.RetryAfter != tc.retry) {
				t.Fatalf("%v: want Retry-After %s", err, tc.retry)
			}
		})
	}
}

func TestHTTPSendTimesOut(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL, Secrets: []string{secretNew}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), delivery()); err == nil || ordersvc.IsRefusal(err) {
		t.Fatalf("a receiver that never answers: %v, want a retryable error", err)
	}
}

func TestNewHTTPRefusesBadConfig(t *testing.T) {
	for _, cfg := range []ordersvc.HTTPConfig{
		{URL: "ftp://shop/x", Secrets: []string{secretNew}},
		{URL: "http://shop.example/x", Secrets: []string{secretNew}}, // clear text off loopback
		{URL: "https://shop.example/x"},                              // no secret
		{URL: "https://shop.example/x", Secrets: []string{"not-a-secret"}},
	} {
		if _, err := ordersvc.NewHTTP(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		} else if strings.Contains(err.Error(), "not-a-secret") {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}

func TestCommandIDIsStablePerOrderAndDeadline(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	a, b := ordersvc.CommandID("o-1", at), ordersvc.CommandID("o-1", at.In(time.FixedZone("x", 3600)))
	if a != b || !strings.HasPrefix(a, "cmd_") || len(a) != 30 {
		t.Fatalf("ids %q %q", a, b)
	}
	if ordersvc.CommandID("o-1", at.Add(time.Millisecond)) == a || ordersvc.CommandID("o-2", at) == a {
		t.Fatal("another order or deadline gave the same id")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// HTTP.Status asks the Go Receiver's status route over real HTTP: a signed
// GET whose webhook-id names the order. A receiver with another secret, one
// without the route, and one that answers outside the contract are errors
// that say which.
func TestHTTPStatusAgainstTheReceiver(t *testing.T) {
	statuses := map[string]ordersvc.OrderStatus{"o-1": ordersvc.StatusPending, "o-2": ordersvc.StatusPaid, "o-3": ordersvc.StatusCancelled,
		"o-4": ordersvc.StatusPaying, "o-bad": "shipped"}
	statusFunc := func(_ context.Context, orderID string) (ordersvc.OrderStatus, error) {
		if orderID == "o-down" {
			return "", errors.New("replica lagging")
		}
		if s, ok := statuses[orderID]; ok {
			return s, nil
		}
		return ordersvc.StatusNotFound, nil
	}
	start := func(t *testing.T, status ordersvc.StatusFunc) string {
		t.Helper()
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secretOld}, Apply: newApplier(ordersvc.Answer{}).apply, Status: status,
			Now: time.Now})
		mux := http.NewServeMux()
		mux.Handle("/lapse", rc)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL + "/lapse"
	}
	status := func(t *testing.T, url string, secrets ...string) func(string) (ordersvc.OrderStatus, error) {
		c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: url, Secrets: secrets, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return func(id string) (ordersvc.OrderStatus, error) { return c.Status(context.Background(), id) }
	}

	url := start(t, statusFunc)
	ask := status(t, url, secretNew, secretOld) // mid-rotation: the receiver has the old secret only
	for id, want := range map[string]ordersvc.OrderStatus{"o-1": ordersvc.StatusPending, "o-2": ordersvc.StatusPaid, "o-3": ordersvc.StatusCancelled,
		"o-4": ordersvc.StatusPaying, "o-9": ordersvc.StatusNotFound, "o/ü&x=1": ordersvc.StatusNotFound} {
		if got, err := ask(id); err != nil || got != want {
			t.Errorf("status of %q: %q, %v; want %q", id, got, err, want)
		}
	}

	for _, tc := range []struct {
		name, id string
		ask      func(string) (ordersvc.OrderStatus, error)
		want     []string
		noRoute  bool
	}{
		{"a bad signature", "o-1", status(t, url, secretNew), []string{"401", "invalid_signature", "secret"}, false},
		{"no status route", "o-1", status(t, start(t, nil), secretOld), []string{"404", "no status route", "GET ?order_id="}, true},
		{"a path that is not the receiver", "o-1", status(t, strings.TrimSuffix(url, "/lapse")+"/elsewhere", secretOld), []string{"404"}, true},
		{"Status fails", "o-down", ask, []string{"503"}, false},
		{"a sixth status", "o-bad", ask, []string{"500"}, false},
	} {
		got, err := tc.ask(tc.id)
		if err == nil {
			t.Errorf("%s: %q, want an error", tc.name, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", tc.name, err, w)
			}
		}
		if errors.Is(err, ordersvc.ErrNoStatusRoute) != tc.noRoute {
			t.Errorf("%s: %v; errors.Is ErrNoStatusRoute %v", tc.name, err, !tc.noRoute)
		}
	}
}

// An answer that is not a status of the order asked about is an error,
// never a guess.
func TestHTTPStatusRefusesOtherAnswers(t *testing.T) {
	for body, want := range map[string]string{
		`{"order_id":"o-2","status":"paid"}`: "names order",
		`{"order_id":"o-1","status":"gone"}`: "status \"gone\"",
		`not json`:                           "not JSON",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) }))
		c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL, Secrets: []string{secretOld}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Status(context.Background(), "o-1"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("answer %s: %q, %v; want an error saying %q", body, got, err, want)
		}
		srv.Close()
	}
}
