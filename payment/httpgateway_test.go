package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// fast keeps retries quick in tests; the breaker is off unless a test turns it on.
func fast(cfg payment.HTTPConfig) payment.HTTPConfig {
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = time.Millisecond
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = -1
	}
	return cfg
}

func newGateway(t *testing.T, url string, cfg payment.HTTPConfig) *payment.HTTPGateway {
	t.Helper()
	g, err := payment.NewHTTPGateway(url, cfg)
	if err != nil {
		t.Fatalf("NewHTTPGateway(%q): %v", url, err)
	}
	return g
}

// hits counts requests per order id.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) add(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[id]++
}

func (h *hits) get(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueryParsesEveryAnswer(t *testing.T) {
	t.Parallel()
	type answer struct {
		code int
		body string
	}
	cases := []struct {
		name string
		id   string
		answer
		want    payment.Status
		wantErr bool
	}{
		{name: "PAID carries the payment id and amount", id: "paid",
			answer: answer{200, `{"order_id":"paid","status":"PAID","amount_cents":1234,"payment_id":"pay-1"}`},
			want:   payment.Status{State: payment.StatePaid, PaymentID: "pay-1", AmountCents: 1234}},
		{name: "NOT_PAID", id: "not-paid", answer: answer{200, `{"order_id":"not-paid","status":"NOT_PAID"}`},
			want: payment.Status{State: payment.StateNotPaid}},
		{name: "PENDING", id: "pending", answer: answer{200, `{"order_id":"pending","status":"PENDING","amount_cents":5,"payment_id":"p"}`},
			want: payment.Status{State: payment.StatePending, AmountCents: 5, PaymentID: "p"}},
		{name: "CLOSED", id: "closed", answer: answer{200, `{"order_id":"closed","status":"CLOSED","amount_cents":0,"payment_id":""}`},
			want: payment.Status{State: payment.StateClosed}},
		{name: "unknown fields are ignored", id: "extra",
			answer: answer{200, `{"order_id":"extra","status":"PAID","amount_cents":1,"payment_id":"x","method":"card"}`},
			want:   payment.Status{State: payment.StatePaid, PaymentID: "x", AmountCents: 1}},
		{name: "PAID carries its currency", id: "paid-jpy",
			answer: answer{200, `{"order_id":"paid-jpy","status":"PAID","amount_cents":1299,"payment_id":"pay-1","currency":"JPY"}`},
			want:   payment.Status{State: payment.StatePaid, PaymentID: "pay-1", AmountCents: 1299, Currency: "JPY"}},
		{name: "a lower-case currency is read in upper case", id: "paid-usd",
			answer: answer{200, `{"order_id":"paid-usd","status":"PAID","amount_cents":1299,"payment_id":"pay-1","currency":"usd"}`},
			want:   payment.Status{State: payment.StatePaid, PaymentID: "pay-1", AmountCents: 1299, Currency: "USD"}},
		{name: "a currency that is not ISO 4217 is an error", id: "paid-yen",
			answer: answer{200, `{"order_id":"paid-yen","status":"PAID","amount_cents":1299,"payment_id":"pay-1","currency":"¥"}`}, wantErr: true},
		{name: "a currency that is not a string is an error", id: "paid-num",
			answer: answer{200, `{"order_id":"paid-num","status":"PAID","amount_cents":1299,"payment_id":"pay-1","currency":392}`}, wantErr: true},
		{name: "404 naming the order is NOT_PAID", id: "never-seen", answer: answer{404, `{"order_id":"never-seen","status":"NOT_PAID"}`},
			want: payment.Status{State: payment.StateNotPaid}},
		{name: "404 naming the order without a status is NOT_PAID", id: "never-seen-2", answer: answer{404, `{"order_id":"never-seen-2"}`},
			want: payment.Status{State: payment.StateNotPaid}},
		{name: "a bare 404 page is an error", id: "bare-404", answer: answer{404, `404 page not found`}, wantErr: true},
		{name: "a 404 about another order is an error", id: "404-other", answer: answer{404, `{"order_id":"x"}`}, wantErr: true},
		{name: "a 404 with another status is an error", id: "404-paid", answer: answer{404, `{"order_id":"404-paid","status":"PAID"}`}, wantErr: true},
		{name: "an unknown status is an error", id: "refunded", answer: answer{200, `{"order_id":"refunded","status":"REFUNDED"}`}, wantErr: true},
		{name: "a lowercase status is an error", id: "lower", answer: answer{200, `{"order_id":"lower","status":"paid","amount_cents":1,"payment_id":"x"}`}, wantErr: true},
		{name: "another order's record is an error", id: "mine", answer: answer{200, `{"order_id":"theirs","status":"NOT_PAID"}`}, wantErr: true},
		{name: "a record without order_id is an error", id: "no-id", answer: answer{200, `{"status":"NOT_PAID"}`}, wantErr: true},
		{name: "a record without status is an error", id: "no-status", answer: answer{200, `{"order_id":"no-status"}`}, wantErr: true},
		{name: "malformed JSON is an error", id: "malformed", answer: answer{200, `{"order_id":"malformed","status":`}, wantErr: true},
		{name: "an empty body is an error", id: "empty", answer: answer{200, ``}, wantErr: true},
		{name: "PAID without payment_id is an error", id: "paid-no-id", answer: answer{200, `{"order_id":"paid-no-id","status":"PAID","amount_cents":1}`}, wantErr: true},
		{name: "PAID without amount_cents is an error", id: "paid-no-amount", answer: answer{200, `{"order_id":"paid-no-amount","status":"PAID","payment_id":"x"}`}, wantErr: true},
		{name: "a 400 is an error", id: "bad-request", answer: answer{400, `{"error":"bad"}`}, wantErr: true},
		{name: "a 401 is an error", id: "unauthorized", answer: answer{401, `{"error":"no"}`}, wantErr: true},
	}
	answers := map[string]answer{}
	for _, c := range cases {
		answers[c.id] = c.answer
	}
	var h hits
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/payments/")
		h.add(id)
		a, ok := answers[id]
		if r.Method != http.MethodGet || !ok {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusTeapot)
			return
		}
		w.WriteHeader(a.code)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL, fast(payment.HTTPConfig{}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := g.Query(context.Background(), c.id)
			if c.wantErr {
				if err == nil {
					t.Fatalf("Query = %+v, want an error", got)
				}
				if !errors.Is(err, payment.ErrBadResponse) {
					t.Errorf("error %v, want ErrBadResponse", err)
				}
			} else if err != nil {
				t.Fatalf("Query: %v", err)
			} else if got != c.want {
				t.Errorf("Query = %+v, want %+v", got, c.want)
			}
			// None of these answers is transient: exactly one request.
			if n := h.get(c.id); n != 1 {
				t.Errorf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestQueryRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	// Each order fails with these codes in turn, then answers NOT_PAID.
	var mu sync.Mutex
	script := map[string][]int{
		"two-5xx":   {500, 503},
		"three-5xx": {502, 503, 504},
		"one-500":   {500},
	}
	var h hits
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/payments/")
		h.add(id)
		mu.Lock()
		codes := script[id]
		if len(codes) > 0 {
			script[id] = codes[1:]
		}
		mu.Unlock()
		if len(codes) > 0 {
			http.Error(w, "try again", codes[0])
			return
		}
		fmt.Fprintf(w, `{"order_id":%q,"status":"NOT_PAID"}`, id)
	}))
	t.Cleanup(srv.Close)

	t.Run("two 5xx then success succeeds on the third attempt", func(t *testing.T) {
		g := newGateway(t, srv.URL, fast(payment.HTTPConfig{}))
		st, err := g.Query(context.Background(), "two-5xx")
		if err != nil || st.State != payment.StateNotPaid {
			t.Fatalf("Query = %+v, %v; want NOT_PAID", st, err)
		}
		if n := h.get("two-5xx"); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}
	})
	t.Run("three 5xx exhaust the default two retries", func(t *testing.T) {
		g := newGateway(t, srv.URL, fast(payment.HTTPConfig{}))
		_, err := g.Query(context.Background(), "three-5xx")
		if err == nil || !strings.Contains(err.Error(), "after 3 attempts") {
			t.Fatalf("Query error %v, want one after 3 attempts", err)
		}
		if n := h.get("three-5xx"); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}
	})
	t.Run("negative Retries disables retries", func(t *testing.T) {
		g := newGateway(t, srv.URL, fast(payment.HTTPConfig{Retries: -1}))
		if _, err := g.Query(context.Background(), "one-500"); err == nil {
			t.Fatal("Query succeeded, want the 500's error")
		}
		if n := h.get("one-500"); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

func TestClientErrorsAreNeverRetried(t *testing.T) {
	t.Parallel()
	var h hits
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.add(r.Method + " " + r.URL.Path)
		var code int
		fmt.Sscanf(strings.Split(r.URL.Path, "/")[2], "%d", &code)
		http.Error(w, `{"error":"no"}`, code)
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL, fast(payment.HTTPConfig{Retries: 5}))
	for _, code := range []int{400, 401, 403, 405, 422, 429} {
		id := fmt.Sprint(code)
		if _, err := g.Query(context.Background(), id); err == nil {
			t.Errorf("Query answered %d: no error", code)
		}
		if err := g.Close(context.Background(), id); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
			t.Errorf("Close answered %d: error %v, want a plain error", code, err)
		}
		if n := h.get("GET /payments/" + id); n != 1 {
			t.Errorf("query answered %d: %d attempts, want 1", code, n)
		}
		if n := h.get("POST /payments/" + id + "/close"); n != 1 {
			t.Errorf("close answered %d: %d attempts, want 1", code, n)
		}
	}
}

func TestTimeoutBoundsEveryAttempt(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	const timeout = 100 * time.Millisecond
	g := newGateway(t, srv.URL, fast(payment.HTTPConfig{Timeout: timeout, BackoffBase: 10 * time.Millisecond}))
	start := time.Now()
	_, err := g.Query(context.Background(), "slow")
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Query error %v, want a deadline exceeded", err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("%d attempts, want 3 (a timeout is retried)", got)
	}
	// Three attempts of Timeout each, two backoffs under 10+20 ms, and slack.
	if min, max := 3*timeout, 3*timeout+30*time.Millisecond+700*time.Millisecond; took < min || took > max {
		t.Errorf("took %s, want between %s and %s", took, min, max)
	}
}

func TestConnectionErrorsAreRetried(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close() // a connection reset before any answer
		}
	}()
	t.Cleanup(func() { ln.Close() })
	g := newGateway(t, "http://"+ln.Addr().String(), fast(payment.HTTPConfig{}))
	if err := g.Close(context.Background(), "o"); err == nil {
		t.Fatal("Close succeeded against a server that resets every connection")
	}
	if got := accepted.Load(); got != 3 {
		t.Errorf("%d connections, want 3 (a connection error is retried)", got)
	}

	// Nothing listening at all: an error, fast.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	g = newGateway(t, "http://"+addr, fast(payment.HTTPConfig{}))
	if _, err := g.Query(context.Background(), "o"); err == nil {
		t.Fatal("Query succeeded with nothing listening")
	}
}

func TestCallerContextEndsTheCallWithoutCountingAFailure(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	g := newGateway(t, srv.URL, payment.HTTPConfig{Timeout: 5 * time.Second, BreakerFailures: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := g.Query(ctx, "o"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Query error %v, want the caller's deadline", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s after the caller's 50 ms deadline", took)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d attempts, want 1 (the caller gave up)", got)
	}
	if s := g.BreakerState(); s != "closed" {
		t.Errorf("breaker %s after a call the caller abandoned, want closed", s)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	flaky := 1 // the "flaky" order fails once with 502
	var h hits
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/payments/"), "/close")
		if r.Method != http.MethodPost || !ok {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		h.add(id)
		switch id {
		case "open", "closed":
			io.WriteString(w, `{"status":"CLOSED"}`)
		case "paid":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"status":"PAID"}`)
		case "conflict-other":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"status":"CLOSED"}`)
		case "ok-but-paid":
			io.WriteString(w, `{"status":"PAID"}`)
		case "malformed":
			io.WriteString(w, `{"status":`)
		case "flaky":
			mu.Lock()
			fail := flaky > 0
			flaky--
			mu.Unlock()
			if fail {
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			io.WriteString(w, `{"status":"CLOSED"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL, fast(payment.HTTPConfig{}))
	ctx := context.Background()
	for _, id := range []string{"open", "closed"} {
		if err := g.Close(ctx, id); err != nil {
			t.Errorf("Close(%s): %v, want nil", id, err)
		}
	}
	if err := g.Close(ctx, "paid"); !errors.Is(err, payment.ErrAlreadyPaid) {
		t.Errorf("Close(paid): %v, want ErrAlreadyPaid", err)
	}
	for _, id := range []string{"conflict-other", "ok-but-paid", "malformed", "unknown"} {
		err := g.Close(ctx, id)
		if err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
			t.Errorf("Close(%s): %v, want an error other than ErrAlreadyPaid", id, err)
		}
		if n := h.get(id); n != 1 {
			t.Errorf("Close(%s): %d attempts, want 1", id, n)
		}
	}
	if err := g.Close(ctx, "flaky"); err != nil {
		t.Errorf("Close(flaky): %v, want nil after a retry", err)
	}
	if n := h.get("flaky"); n != 2 {
		t.Errorf("Close(flaky): %d attempts, want 2", n)
	}
}

func TestOrderIDsArePathEscapedAndTheBasePathKept(t *testing.T) {
	t.Parallel()
	const id = "a/b c?d#e%f"
	var mu sync.Mutex
	var paths []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /gw/payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		fmt.Fprintf(w, `{"order_id":%q,"status":"NOT_PAID"}`, r.PathValue("id"))
	})
	mux.HandleFunc("POST /gw/payments/{id}/close", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != id {
			http.Error(w, "wrong id "+r.PathValue("id"), http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"status":"CLOSED"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL+"/gw/", fast(payment.HTTPConfig{}))
	st, err := g.Query(context.Background(), id)
	if err != nil || st.State != payment.StateNotPaid {
		t.Fatalf("Query = %+v, %v", st, err)
	}
	if err := g.Close(context.Background(), id); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if want := "/gw/payments/a%2Fb%20c%3Fd%23e%25f"; len(paths) != 1 || paths[0] != want {
		t.Errorf("paths %q, want [%q]", paths, want)
	}
	if _, err := g.Query(context.Background(), ""); err == nil {
		t.Error("Query of an empty id: no error")
	}
}

func TestAuthHeadersAreSent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Merchant") != "m-1" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, `{"order_id":%q,"status":"NOT_PAID"}`, strings.TrimPrefix(r.URL.Path, "/payments/"))
	}))
	t.Cleanup(srv.Close)
	with := newGateway(t, srv.URL, fast(payment.HTTPConfig{BearerToken: "s3cret", Header: http.Header{"X-Merchant": {"m-1"}}}))
	if _, err := with.Query(context.Background(), "o"); err != nil {
		t.Errorf("with the token and header: %v", err)
	}
	without := newGateway(t, srv.URL, fast(payment.HTTPConfig{BearerToken: "s3cret"}))
	if _, err := without.Query(context.Background(), "o"); err == nil {
		t.Error("without the header: no error")
	}
}

func TestHTTPClientOverride(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"order_id":"o","status":"CLOSED"}`)
	}))
	t.Cleanup(srv.Close)
	// The default client does not trust the test certificate; the server's own client does.
	if _, err := newGateway(t, srv.URL, fast(payment.HTTPConfig{})).Query(context.Background(), "o"); err == nil {
		t.Error("the default client accepted an untrusted certificate")
	}
	g := newGateway(t, srv.URL, fast(payment.HTTPConfig{HTTPClient: srv.Client()}))
	if st, err := g.Query(context.Background(), "o"); err != nil || st.State != payment.StateClosed {
		t.Errorf("with HTTPClient: %+v, %v", st, err)
	}
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/payments/o/close", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
		io.WriteString(w, `{"status":"CLOSED"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := newGateway(t, srv.URL, fast(payment.HTTPConfig{})).Close(context.Background(), "o"); err == nil {
		t.Error("Close through a redirect succeeded")
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

func TestNewHTTPGatewayValidates(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8080", "ftp://pay.example.com", "http://", "http://pay.example.com?x=1", "http://pay.example.com/#f", "http://%zz"} {
		if _, err := payment.NewHTTPGateway(u, payment.HTTPConfig{}); err == nil {
			t.Errorf("NewHTTPGateway(%q): no error", u)
		}
	}
	for _, cfg := range []payment.HTTPConfig{
		{Timeout: -time.Second},
		{BackoffBase: -time.Second},
		{BackoffBase: time.Second, BackoffMax: time.Millisecond},
		{BreakerOpenFor: -time.Second},
	} {
		if _, err := payment.NewHTTPGateway("http://pay.example.com", cfg); err == nil {
			t.Errorf("NewHTTPGateway with %+v: no error", cfg)
		}
	}
	g, err := payment.NewHTTPGateway("https://pay.example.com/lapse/", payment.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.BreakerState(); s != "closed" {
		t.Errorf("a new gateway's breaker is %s, want closed", s)
	}
}

func TestBreakerStopsRetriesOnceOpen(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL, payment.HTTPConfig{Retries: 5, BackoffBase: time.Millisecond, BreakerFailures: 2, BreakerOpenFor: time.Minute})
	if _, err := g.Query(context.Background(), "o"); !errors.Is(err, payment.ErrCircuitOpen) {
		t.Fatalf("Query error %v, want ErrCircuitOpen once the breaker opened mid-retries", err)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("%d requests, want 2 (the breaker opened after 2 failures)", got)
	}
}

func TestBreakerOpensFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	const openFor = 400 * time.Millisecond
	var (
		healthy atomic.Bool
		n       atomic.Int32
		hold    = make(chan struct{}) // a healthy answer waits for it
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if !healthy.Load() {
			time.Sleep(50 * time.Millisecond) // a gateway that is down is slow too
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		<-hold
		fmt.Fprintf(w, `{"order_id":"o","status":"NOT_PAID"}`)
	}))
	t.Cleanup(srv.Close)
	g := newGateway(t, srv.URL, payment.HTTPConfig{
		Timeout: 2 * time.Second, Retries: -1, BreakerFailures: 3, BreakerOpenFor: openFor,
	})
	ctx := context.Background()

	// Three failures in a row open the breaker.
	var lastFailureStarted time.Time
	for i := range 3 {
		if s := g.BreakerState(); s != "closed" {
			t.Fatalf("breaker %s after %d failures, want closed", s, i)
		}
		lastFailureStarted = time.Now()
		if _, err := g.Query(ctx, "o"); err == nil || errors.Is(err, payment.ErrCircuitOpen) {
			t.Fatalf("failure %d: %v, want the gateway's error", i+1, err)
		}
	}
	if s := g.BreakerState(); s != "open" {
		t.Fatalf("breaker %s after 3 failures, want open", s)
	}

	// While open, calls fail at once and no request reaches the gateway.
	start := time.Now()
	for range 20 {
		if _, err := g.Query(ctx, "o"); !errors.Is(err, payment.ErrCircuitOpen) {
			t.Fatalf("Query while open: %v, want ErrCircuitOpen", err)
		}
		if err := g.Close(ctx, "o"); !errors.Is(err, payment.ErrCircuitOpen) {
			t.Fatalf("Close while open: %v, want ErrCircuitOpen", err)
		}
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("40 calls while open took %s; each sent request would take 50 ms", took)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d requests reached the gateway, want 3 (none while open)", got)
	}

	// After openFor, one probe goes through; it fails, and the breaker opens again.
	eventually(t, 5*time.Second, "a half-open probe", func() bool {
		_, _ = g.Query(ctx, "o")
		return n.Load() == 4
	})
	if since := time.Since(lastFailureStarted); since < openFor {
		t.Errorf("probe %s after the breaker opened, want at least %s", since, openFor)
	}
	if s := g.BreakerState(); s != "open" {
		t.Fatalf("breaker %s after a failed probe, want open again", s)
	}
	reopened := time.Now()

	// The gateway recovers. The next probe is held at the gateway: meanwhile
	// other calls fail fast rather than pile up behind it.
	healthy.Store(true)
	var probe chan error
	eventually(t, 5*time.Second, "a second probe", func() bool {
		c := make(chan error, 1)
		go func() { _, err := g.Query(ctx, "o"); c <- err }()
		select {
		case err := <-c:
			if !errors.Is(err, payment.ErrCircuitOpen) {
				t.Errorf("before the probe: %v, want ErrCircuitOpen", err)
			}
			return false
		case <-time.After(50 * time.Millisecond):
			probe = c // it went through and waits at the gateway
			return true
		}
	})
	eventually(t, 5*time.Second, "the probe reaching the gateway", func() bool { return n.Load() == 5 })
	if since := time.Since(reopened); since < openFor-60*time.Millisecond {
		t.Errorf("second probe %s after reopening, want about %s", since, openFor)
	}
	if s := g.BreakerState(); s != "half-open" {
		t.Errorf("breaker %s while the probe is in flight, want half-open", s)
	}
	if _, err := g.Query(ctx, "o"); !errors.Is(err, payment.ErrCircuitOpen) {
		t.Errorf("Query beside the probe: %v, want ErrCircuitOpen", err)
	}
	close(hold)
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v, want success", err)
	}
	if s := g.BreakerState(); s != "closed" {
		t.Fatalf("breaker %s after a successful probe, want closed", s)
	}
	if st, err := g.Query(ctx, "o"); err != nil || st.State != payment.StateNotPaid {
		t.Errorf("Query after recovery = %+v, %v", st, err)
	}
	if got := n.Load(); got != 6 {
		t.Errorf("%d requests, want 6", got)
	}
}

// A gateway URL may carry credentials (http://user:pw@host): an error about
// the URL shows it without the password.
func TestGatewayURLErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://lapse:pw-0451@bad host", "ftp://lapse:pw-0451@gateway", "http://lapse:pw-0451@gateway/x?y=1"} {
		_, err := payment.NewHTTPGateway(u, payment.HTTPConfig{})
		if err == nil {
			t.Fatalf("%s: accepted", u)
		}
		if strings.Contains(err.Error(), "pw-0451") || !strings.Contains(err.Error(), "lapse:xxxxx@") {
			t.Errorf("NewHTTPGateway: %v", err)
		}
	}
}
