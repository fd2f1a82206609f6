package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
)

const testKey = "sk_test_lapse0123456789secret"

func newGateway(t *testing.T, base string, cfg stripe.Config) *stripe.Gateway {
	t.Helper()
	if cfg.Key == "" {
		cfg.Key = testKey
	}
	cfg.APIBase = base
	if cfg.Retries == 0 {
		cfg.Retries = -1 // the library's retries wait 0.5 s and more; tested once below
	}
	g, err := stripe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestStateOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status string
		want   payment.State // "" → an error
	}{
		{"succeeded", payment.StatePaid},
		{"requires_payment_method", payment.StateNotPaid},
		{"requires_confirmation", payment.StateNotPaid},
		{"requires_action", payment.StatePending}, // the buyer in 3-D Secure: TestThreeDSecureIsPending
		{"processing", payment.StatePending},
		{"canceled", payment.StateClosed},
		{"requires_capture", ""},
		{"", ""},
		{"something_new", ""},
	} {
		st, err := stripe.StateOf(&stripego.PaymentIntent{ID: "pi_1", Status: stripego.PaymentIntentStatus(c.status), Amount: 500, AmountReceived: 500, Currency: "usd"})
		if c.want == "" {
			if err == nil || !errors.Is(err, stripe.ErrUnexpected) {
				t.Errorf("%q: %+v, %v; want ErrUnexpected", c.status, st, err)
			}
			continue
		}
		if err != nil || st.State != c.want {
			t.Errorf("%q: %+v, %v; want %s", c.status, st, err, c.want)
		}
		if c.want == payment.StatePaid && (st.PaymentID != "pi_1" || st.AmountCents != 500 || st.Currency != "USD") {
			t.Errorf("succeeded: %+v; want pi_1 paid 500 USD", st)
		}
	}
}

// Each status through the wire: the fake plays Stripe's documented shapes
// (bearer key, Stripe-Version, form-encoded POSTs, JSON and error objects).
func TestQueryAttemptOverTheWire(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	for i, status := range []string{"succeeded", "requires_payment_method", "requires_confirmation", "requires_action", "processing", "canceled", "requires_capture"} {
		id := "pi_wire" + string(rune('a'+i))
		fs.Set(stripetest.PaymentIntent{ID: id, Status: status, Amount: 1299, Metadata: map[string]string{"order_id": "o-1"}})
		if status == "succeeded" {
			fs.SetStatus(id, status)
		}
		st, err := g.QueryAttempt(ctx, "o-1", id)
		want, wantErr := stripe.StateOf(&stripego.PaymentIntent{ID: id, Status: stripego.PaymentIntentStatus(status), AmountReceived: 1299, Currency: "usd"})
		if (err != nil) != (wantErr != nil) || st != want {
			t.Errorf("%s: %+v, %v; want %+v, %v", status, st, err, want, wantErr)
		}
	}
}

// A buyer in 3-D Secure (requires_action, or requires_confirmation with a
// next_action) is a payment in progress: PENDING, asked again, never
// NOT_PAID, which would close the PaymentIntent under the buyer.
func TestThreeDSecureIsPending(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		id, status, next string
		want             payment.State
	}{
		{"pi_3ds", "requires_action", "use_stripe_sdk", payment.StatePending},
		{"pi_redirect", "requires_action", "redirect_to_url", payment.StatePending},
		{"pi_confirm_next", "requires_confirmation", "use_stripe_sdk", payment.StatePending},
		{"pi_confirm", "requires_confirmation", "", payment.StateNotPaid},
		{"pi_processing", "processing", "", payment.StatePending},
	} {
		fs.Set(stripetest.PaymentIntent{ID: c.id, Status: c.status, NextAction: c.next, Amount: 1299, Metadata: map[string]string{"order_id": "o-1"}})
		st, err := g.QueryAttempt(ctx, "o-1", c.id)
		if err != nil || st.State != c.want {
			t.Errorf("%s (%s, next_action %q): %+v, %v; want %s", c.id, c.status, c.next, st, err, c.want)
		}
	}
}

// The PaymentIntent's currency comes with its amount, in upper case: a
// JPY PaymentIntent cannot pay a USD order unnoticed.
func TestQueryAttemptCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	g := newGateway(t, fs.URL, stripe.Config{})
	for _, c := range []struct{ id, currency, want string }{{"pi_jpy", "jpy", "JPY"}, {"pi_usd", "usd", "USD"}, {"pi_eur", "eur", "EUR"}} {
		fs.Set(stripetest.PaymentIntent{ID: c.id, Status: "requires_payment_method", Amount: 1299, Currency: c.currency})
		fs.SetStatus(c.id, "succeeded")
		st, err := g.QueryAttempt(context.Background(), "o-1", c.id)
		if err != nil || st.State != payment.StatePaid || st.AmountCents != 1299 || st.Currency != c.want {
			t.Errorf("%s: %+v, %v; want PAID 1299 %s", c.id, st, err, c.want)
		}
	}
}

// A PaymentIntent Stripe does not have (404 resource_missing) or one whose
// metadata.order_id names another order is not this order's money: the
// error says so (payment.ErrUnknownPayment), so that the deadline's check
// stops waiting for it after --gateway-pending-max; an outage is not.
func TestQueryAttemptUnknownOrForeignPayment(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_other", Status: "requires_payment_method", Amount: 1299, Metadata: map[string]string{"order_id": "o-other"}})
	fs.SetStatus("pi_other", "succeeded")
	fs.Set(stripetest.PaymentIntent{ID: "pi_down", Status: "requires_payment_method"})
	fs.Fail("GET /v1/payment_intents/pi_down", 500)
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		pid     string
		unknown bool
	}{{"pi_missing", true}, {"pi_other", true}, {"pi_down", false}} {
		st, err := g.QueryAttempt(ctx, "o-1", c.pid)
		if err == nil || errors.Is(err, payment.ErrUnknownPayment) != c.unknown {
			t.Errorf("%s: %+v, %v; want an error, ErrUnknownPayment %v", c.pid, st, err, c.unknown)
		}
	}
	// Closing another order's PaymentIntent is refused, and leaves it be.
	if err := g.CloseAttempt(ctx, "o-1", "pi_other"); !errors.Is(err, payment.ErrUnknownPayment) {
		t.Errorf("close another order's PaymentIntent: %v, want ErrUnknownPayment", err)
	}
	if n := fs.Count("POST /v1/payment_intents/pi_other/cancel"); n != 0 || fs.Status("pi_other") != "succeeded" {
		t.Errorf("another order's PaymentIntent touched: %d cancels, %s", n, fs.Status("pi_other"))
	}
}

func TestQueryAttemptErrorsAreNeverNotPaid(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_other", Status: "requires_payment_method", Metadata: map[string]string{"order_id": "o-other"}})
	fs.Set(stripetest.PaymentIntent{ID: "pi_down", Status: "requires_payment_method"})
	fs.Fail("GET /v1/payment_intents/pi_down", 500)
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	for _, c := range []struct{ pid, want string }{
		{"pi_missing", "404 invalid_request_error/resource_missing"}, // a live key asked about a test id, a typo: never "not paid"
		{"pi_down", "500 api_error"},
		{"pi_other", `is for order "o-other"`},
		{"ch_123", "not a PaymentIntent id"},
		{"pi_", "not a PaymentIntent id"},
		{"pi_a/../b", "not a PaymentIntent id"},
	} {
		st, err := g.QueryAttempt(ctx, "o-1", c.pid)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v, %v; want an error with %q", c.pid, st, err, c.want)
		}
	}
	for _, c := range fs.Calls() {
		if strings.Contains(c, "ch_123") || strings.Contains(c, "/b") {
			t.Errorf("a request for an id that is not a PaymentIntent's: %s", c)
		}
	}
	if _, err := g.Query(ctx, "o-1"); !errors.Is(err, stripe.ErrNeedsAttempt) {
		t.Errorf("Query: %v, want ErrNeedsAttempt", err)
	}
	if err := g.Close(ctx, "o-1"); !errors.Is(err, stripe.ErrNeedsAttempt) {
		t.Errorf("Close: %v, want ErrNeedsAttempt", err)
	}
}

func TestCloseAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("cancels an open PaymentIntent", func(t *testing.T) {
		t.Parallel()
		fs := stripetest.New(t, testKey)
		fs.Set(stripetest.PaymentIntent{ID: "pi_open", Status: "requires_payment_method", Amount: 100})
		g := newGateway(t, fs.URL, stripe.Config{})
		if err := g.CloseAttempt(ctx, "o-1", "pi_open"); err != nil {
			t.Fatal(err)
		}
		if s := fs.Status("pi_open"); s != "canceled" {
			t.Fatalf("after close: %s", s)
		}
		// Again: already cancelled is nil, and nothing is posted.
		if err := g.CloseAttempt(ctx, "o-1", "pi_open"); err != nil {
			t.Fatal(err)
		}
		if n := fs.Count("POST /v1/payment_intents/pi_open/cancel"); n != 1 {
			t.Fatalf("%d cancels, want 1", n)
		}
	})
	t.Run("expires the open Checkout Session it belongs to", func(t *testing.T) {
		t.Parallel()
		fs := stripetest.New(t, testKey)
		fs.Set(stripetest.PaymentIntent{ID: "pi_cs", Status: "requires_action", Amount: 100})
		fs.AddSession("cs_test_1", "pi_cs")
		fs.AddSession("cs_test_2", "pi_someone_else")
		g := newGateway(t, fs.URL, stripe.Config{})
		if err := g.CloseAttempt(ctx, "o-1", "pi_cs"); err != nil {
			t.Fatal(err)
		}
		if s := fs.SessionStatus("cs_test_1"); s != "expired" {
			t.Fatalf("session: %s", s)
		}
		if s := fs.SessionStatus("cs_test_2"); s != "open" {
			t.Fatalf("another PaymentIntent's session: %s", s)
		}
		if s := fs.Status("pi_cs"); s != "canceled" {
			t.Fatalf("PaymentIntent: %s", s)
		}
		if n := fs.Count("POST /v1/payment_intents/pi_cs/cancel"); n != 0 {
			t.Fatalf("cancelled directly %d times", n)
		}
	})
	t.Run("paid is ErrAlreadyPaid", func(t *testing.T) {
		t.Parallel()
		fs := stripetest.New(t, testKey)
		fs.Set(stripetest.PaymentIntent{ID: "pi_paid", Status: "requires_payment_method", Amount: 100})
		fs.SetStatus("pi_paid", "succeeded")
		g := newGateway(t, fs.URL, stripe.Config{})
		if err := g.CloseAttempt(ctx, "o-1", "pi_paid"); !errors.Is(err, payment.ErrAlreadyPaid) {
			t.Fatalf("%v, want ErrAlreadyPaid", err)
		}
		if slices.ContainsFunc(fs.Calls(), func(c string) bool { return strings.HasPrefix(c, "POST") }) {
			t.Fatalf("posted: %v", fs.Calls())
		}
	})
	for _, withSession := range []bool{false, true} {
		name := "paid between the retrieve and the cancel"
		if withSession {
			name += " (Checkout)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := stripetest.New(t, testKey)
			fs.Set(stripetest.PaymentIntent{ID: "pi_race", Status: "requires_action", Amount: 100})
			if withSession {
				fs.AddSession("cs_race", "pi_race")
			}
			fs.BeforeCancel = func(id string) { fs.SetStatus(id, "succeeded") }
			g := newGateway(t, fs.URL, stripe.Config{})
			if err := g.CloseAttempt(ctx, "o-1", "pi_race"); !errors.Is(err, payment.ErrAlreadyPaid) {
				t.Fatalf("%v, want ErrAlreadyPaid", err)
			}
		})
	}
	t.Run("refusals and failures are errors", func(t *testing.T) {
		t.Parallel()
		fs := stripetest.New(t, testKey)
		fs.Set(stripetest.PaymentIntent{ID: "pi_proc", Status: "processing", Amount: 100})
		fs.Set(stripetest.PaymentIntent{ID: "pi_cap", Status: "requires_capture", Amount: 100})
		fs.Set(stripetest.PaymentIntent{ID: "pi_other", Status: "requires_action", Metadata: map[string]string{"order_id": "o-2"}})
		fs.Set(stripetest.PaymentIntent{ID: "pi_down", Status: "requires_action"})
		fs.Fail("POST /v1/payment_intents/pi_down/cancel", 503)
		g := newGateway(t, fs.URL, stripe.Config{})
		for _, c := range []struct{ pid, want string }{
			{"pi_proc", "payment_intent_unexpected_state"},
			{"pi_cap", `status "requires_capture": not closed`},
			{"pi_other", `is for order "o-2"`},
			{"pi_down", "503 api_error"},
			{"pi_none", "resource_missing"},
			{"o-1-1", "not a PaymentIntent id"},
		} {
			err := g.CloseAttempt(ctx, "o-1", c.pid)
			if err == nil || errors.Is(err, payment.ErrAlreadyPaid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v; want an error with %q", c.pid, err, c.want)
			}
		}
		for _, id := range []string{"pi_cap", "pi_other"} {
			if n := fs.Count("POST /v1/payment_intents/" + id + "/cancel"); n != 0 {
				t.Errorf("%s cancelled", id)
			}
		}
	})
}

// The key never shows in an error, even when the server echoes it.
func TestKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, "sk_test_the_right_one")
	g := newGateway(t, fs.URL, stripe.Config{Key: testKey})
	_, err := g.QueryAttempt(context.Background(), "o-1", "pi_1")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("%v, want a 401", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(err.Error(), "lapse0123456789secret") {
		t.Fatalf("the key in an error: %v", err)
	}
	if err := g.CloseAttempt(context.Background(), "o-1", "pi_1"); err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("close: %v", err)
	}
	for _, bad := range []string{testKey + " ", "pk_test_" + testKey[8:], "whsec_" + testKey[8:]} {
		_, err := stripe.New(stripe.Config{Key: bad})
		if err == nil || strings.Contains(err.Error(), testKey[8:]) {
			t.Errorf("New with a bad key: %v", err)
		}
	}
}

func TestCheckAPIBase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want, err string }{
		{"https://api.stripe.com", "https://api.stripe.com", ""},
		{"https://stripe-proxy.internal:8443/stripe/", "https://stripe-proxy.internal:8443/stripe", ""},
		{"http://127.0.0.1:12111", "http://127.0.0.1:12111", ""},
		{"http://localhost:12111/", "http://localhost:12111", ""},
		{"http://[::1]:12111", "http://[::1]:12111", ""},
		{"http://stripe.example.com", "", "plain http only to a loopback host"},
		{"ftp://127.0.0.1", "", "want https://"},
		{"127.0.0.1:12111", "", ""},
		{"https://user:hunter2@api.stripe.com", "", "no user or password"},
		{"https://api.stripe.com?x=1", "", "no query"},
		{"", "", "want https://"},
	} {
		got, err := stripe.CheckAPIBase(c.in)
		switch {
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		case c.want == "" && err == nil:
			t.Errorf("%q: accepted as %q", c.in, got)
		case c.want == "" && !strings.Contains(err.Error(), c.err):
			t.Errorf("%q: %v; want %q", c.in, err, c.err)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%q: the password in %v", c.in, err)
		}
	}
}

// One request is bounded by Timeout, and retried after a timeout.
func TestTimeoutAndRetries(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_slow", Status: "requires_action"})
	fs.Set(stripetest.PaymentIntent{ID: "pi_flaky", Status: "requires_action"})
	fs.Hang("GET /v1/payment_intents/pi_slow")
	fs.Fail("GET /v1/payment_intents/pi_flaky", 500)
	g := newGateway(t, fs.URL, stripe.Config{Timeout: 100 * time.Millisecond})
	began := time.Now()
	if _, err := g.QueryAttempt(context.Background(), "o-1", "pi_slow"); err == nil {
		t.Fatal("a hanging Stripe answered")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("a hanging request took %s with a 100 ms timeout", d)
	}
	// A caller's deadline bounds the call too.
	g2 := newGateway(t, fs.URL, stripe.Config{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := g2.QueryAttempt(ctx, "o-1", "pi_slow"); err == nil {
		t.Fatal("a hanging Stripe answered")
	}
	// A request that timed out is sent again (a Stripe error answer is
	// not, unless Stripe says Stripe-Should-Retry: lapse asks again later).
	// Counted as sent by the client: a loaded server may not have begun
	// the second one before its 100 ms are up.
	var sent atomic.Int64
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	g3 := newGateway(t, fs.URL, stripe.Config{Timeout: 100 * time.Millisecond, Retries: 1, HTTPClient: counting})
	if _, err := g3.QueryAttempt(context.Background(), "o-1", "pi_slow"); err == nil {
		t.Fatal("a hanging Stripe answered")
	}
	if n := sent.Load(); n != 2 {
		t.Fatalf("%d requests with Retries 1, want 2", n)
	}
	if _, err := g.QueryAttempt(context.Background(), "o-1", "pi_flaky"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("a failing Stripe: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
