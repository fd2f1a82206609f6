package payment_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

var mockSecret = []byte("mock-secret")

// receiver is a stand-in for lapse's callback endpoint: it verifies each
// callback's signature and records it.
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	got      []received
	failNext int // answer 503 to this many callbacks first
	failAll  bool
}

type received struct {
	at        time.Time
	body      map[string]any
	verifyErr error // payment.Verify with the right secret
	wrongErr  error // payment.Verify with another secret (must fail)
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments/notify", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		sig := r.Header.Get(payment.SignatureHeader)
		rec := received{
			at:        time.Now(),
			verifyErr: payment.Verify(sig, raw, [][]byte{mockSecret}, time.Now(), payment.DefaultTolerance),
			wrongErr:  payment.Verify(sig, raw, [][]byte{[]byte("another secret")}, time.Now(), payment.DefaultTolerance),
		}
		if err := json.Unmarshal(raw, &rec.body); err != nil {
			rec.body = map[string]any{"unparsable": string(raw)}
		}
		rc.mu.Lock()
		rc.got = append(rc.got, rec)
		fail := rc.failAll || rc.failNext > 0
		if rc.failNext > 0 {
			rc.failNext--
		}
		rc.mu.Unlock()
		if fail {
			http.Error(w, `{"error":{"code":"unavailable"}}`, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"result":"paid"}`)
	})
	rc.srv = httptest.NewServer(mux)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// mockEnv is a Mock served over HTTP, a gateway client of it, and a receiver.
type mockEnv struct {
	mock *payment.Mock
	srv  *httptest.Server
	gw   *payment.HTTPGateway
	rc   *receiver
}

func newMockEnv(t *testing.T, cfg payment.MockConfig) *mockEnv {
	t.Helper()
	e := &mockEnv{rc: newReceiver(t)}
	if cfg.CallbackURL == "" {
		cfg.CallbackURL = e.rc.srv.URL
	}
	if cfg.CallbackSecret == nil {
		cfg.CallbackSecret = mockSecret
	}
	if cfg.CallbackBackoff == 0 {
		cfg.CallbackBackoff = 5 * time.Millisecond
	}
	e.mock = payment.NewMock(cfg)
	e.srv = httptest.NewServer(e.mock)
	t.Cleanup(func() { e.srv.Close(); e.mock.Close() })
	e.gw = newGateway(t, e.srv.URL, fast(payment.HTTPConfig{}))
	return e
}

// do sends a JSON request to the mock and decodes a JSON answer into out.
func (e *mockEnv) do(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

// pay has the buyer pay over HTTP and returns the status code and the trade.
func (e *mockEnv) pay(t *testing.T, id string, amount int64, outcome string) (int, payment.MockTrade) {
	t.Helper()
	var tr payment.MockTrade
	code := e.do(t, "POST", "/payments/"+url.PathEscape(id)+"/pay", map[string]any{"amount_cents": amount, "outcome": outcome}, &tr)
	return code, tr
}

func (e *mockEnv) stats(t *testing.T, orderID string) payment.MockStats {
	t.Helper()
	var s payment.MockStats
	path := "/_stats"
	if orderID != "" {
		path += "?order_id=" + url.QueryEscape(orderID)
	}
	if code := e.do(t, "GET", path, nil, &s); code != 200 {
		t.Fatalf("GET %s: %d", path, code)
	}
	return s
}

func (e *mockEnv) control(t *testing.T, body map[string]any) payment.MockControl {
	t.Helper()
	var c payment.MockControl
	if code := e.do(t, "POST", "/_control", body, &c); code != 200 {
		t.Fatalf("POST /_control %v: %d", body, code)
	}
	return c
}

func wantState(t *testing.T, gw payment.Gateway, id string, want payment.Status) {
	t.Helper()
	got, err := gw.Query(context.Background(), id)
	if err != nil {
		t.Fatalf("Query(%s): %v", id, err)
	}
	if got != want {
		t.Fatalf("Query(%s) = %+v, want %+v", id, got, want)
	}
}

func TestMockProtocolRoundTrips(t *testing.T) {
	t.Parallel()
	e := newMockEnv(t, payment.MockConfig{DropCallbacks: true})
	ctx := context.Background()

	t.Run("an order the gateway never saw is NOT_PAID", func(t *testing.T) {
		wantState(t, e.gw, "never", payment.Status{State: payment.StateNotPaid})
	})
	t.Run("a successful payment is PAID and cannot be closed", func(t *testing.T) {
		code, tr := e.pay(t, "paid", 1500, "SUCCEEDED")
		if code != 200 || tr.Status != payment.StatePaid || tr.PaymentID == "" || tr.AmountCents != 1500 {
			t.Fatalf("pay: %d %+v", code, tr)
		}
		wantState(t, e.gw, "paid", payment.Status{State: payment.StatePaid, PaymentID: tr.PaymentID, AmountCents: 1500})
		if err := e.gw.Close(ctx, "paid"); !errors.Is(err, payment.ErrAlreadyPaid) {
			t.Fatalf("Close: %v, want ErrAlreadyPaid", err)
		}
		if code, _ := e.pay(t, "paid", 1500, "SUCCEEDED"); code != http.StatusConflict {
			t.Errorf("paying twice: %d, want 409", code)
		}
		wantState(t, e.gw, "paid", payment.Status{State: payment.StatePaid, PaymentID: tr.PaymentID, AmountCents: 1500})
	})
	t.Run("a payment in progress is PENDING; closing it refuses the payment", func(t *testing.T) {
		if code, _ := e.pay(t, "pend", 700, "PENDING"); code != 200 {
			t.Fatalf("pay: %d", code)
		}
		got, err := e.gw.Query(ctx, "pend")
		if err != nil || got.State != payment.StatePending {
			t.Fatalf("Query = %+v, %v; want PENDING", got, err)
		}
		if err := e.gw.Close(ctx, "pend"); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := e.gw.Close(ctx, "pend"); err != nil {
			t.Fatalf("second Close: %v, want nil (idempotent)", err)
		}
		var body map[string]string
		if code := e.do(t, "POST", "/payments/pend/pay", map[string]any{"amount_cents": 700, "outcome": "SUCCEEDED"}, &body); code != http.StatusConflict || body["status"] != "CLOSED" {
			t.Fatalf("paying a closed trade: %d %v, want 409 CLOSED", code, body)
		}
		if got, _ := e.gw.Query(ctx, "pend"); got.State != payment.StateClosed {
			t.Errorf("Query = %+v, want CLOSED", got)
		}
	})
	t.Run("closing an order the gateway never saw keeps it from being paid", func(t *testing.T) {
		if err := e.gw.Close(ctx, "unseen"); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wantState(t, e.gw, "unseen", payment.Status{State: payment.StateClosed})
		if code, _ := e.pay(t, "unseen", 100, "SUCCEEDED"); code != http.StatusConflict {
			t.Errorf("paying after close: %d, want 409", code)
		}
	})
	t.Run("a failed payment is NOT_PAID and may be tried again", func(t *testing.T) {
		if code, tr := e.pay(t, "retry", 300, "FAILED"); code != 200 || tr.Status != payment.StateNotPaid {
			t.Fatalf("pay FAILED: %d %+v", code, tr)
		}
		if got, _ := e.gw.Query(ctx, "retry"); got.State != payment.StateNotPaid {
			t.Fatalf("Query = %+v, want NOT_PAID", got)
		}
		code, tr := e.pay(t, "retry", 300, "SUCCEEDED")
		if code != 200 {
			t.Fatalf("second pay: %d", code)
		}
		wantState(t, e.gw, "retry", payment.Status{State: payment.StatePaid, PaymentID: tr.PaymentID, AmountCents: 300})
	})
	t.Run("order ids travel path-escaped", func(t *testing.T) {
		const id = "shop/42 #7"
		code, tr := e.pay(t, id, 42, "SUCCEEDED")
		if code != 200 || tr.OrderID != id {
			t.Fatalf("pay: %d %+v", code, tr)
		}
		wantState(t, e.gw, id, payment.Status{State: payment.StatePaid, PaymentID: tr.PaymentID, AmountCents: 42})
	})
	t.Run("a malformed pay request is refused", func(t *testing.T) {
		for _, body := range []any{
			map[string]any{"outcome": "SUCCEEDED"},
			map[string]any{"amount_cents": 1, "outcome": "MAYBE"},
			map[string]any{"amount_cents": 1, "outcom": "SUCCEEDED"},
			map[string]any{"amount_cents": -1},
		} {
			if code := e.do(t, "POST", "/payments/bad/pay", body, nil); code != http.StatusBadRequest {
				t.Errorf("pay %v: %d, want 400", body, code)
			}
		}
		if _, ok := e.mock.Trade("bad"); ok {
			t.Error("a refused pay created a trade")
		}
	})
	t.Run("the statement lists every trade", func(t *testing.T) {
		resp, err := http.Get(e.srv.URL + "/_statement")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rows, err := csv.NewReader(resp.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 || !slices.Equal(rows[0], []string{"order_id", "payment_id", "status", "amount_cents"}) {
			t.Fatalf("statement header %v", rows)
		}
		got := map[string]string{}
		for _, r := range rows[1:] {
			got[r[0]] = r[2] + " " + r[3]
		}
		want := map[string]string{"paid": "PAID 1500", "pend": "CLOSED 700", "unseen": "CLOSED 0", "retry": "PAID 300", "shop/42 #7": "PAID 42"}
		if len(got) != len(want) {
			t.Errorf("statement %v, want %v", got, want)
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("statement line of %s: %q, want %q", id, got[id], w)
			}
		}
	})
}

func TestMockCallbackIsSigned(t *testing.T) {
	t.Parallel()
	e := newMockEnv(t, payment.MockConfig{})
	_, paid := e.pay(t, "o-ok", 1999, "SUCCEEDED")
	_, failed := e.pay(t, "o-ko", 500, "FAILED")
	eventually(t, 5*time.Second, "two callbacks delivered", func() bool { return e.mock.Stats().CallbacksDelivered == 2 })

	want := map[string]map[string]any{
		"o-ok": {"order_id": "o-ok", "payment_id": paid.PaymentID, "status": "SUCCEEDED", "amount_cents": 1999.0},
		"o-ko": {"order_id": "o-ko", "payment_id": failed.PaymentID, "status": "FAILED", "amount_cents": 500.0},
	}
	got := e.rc.received()
	if len(got) != 2 {
		t.Fatalf("%d callbacks received, want 2", len(got))
	}
	for _, r := range got {
		if r.verifyErr != nil {
			t.Errorf("callback %v: signature does not verify: %v", r.body, r.verifyErr)
		}
		if !errors.Is(r.wrongErr, payment.ErrMismatch) {
			t.Errorf("callback %v verified with another secret: %v", r.body, r.wrongErr)
		}
		id, _ := r.body["order_id"].(string)
		w, ok := want[id]
		if !ok {
			t.Errorf("unexpected callback %v", r.body)
			continue
		}
		if len(r.body) != len(w) {
			t.Errorf("callback keys %v, want exactly %v", r.body, w)
		}
		for k, v := range w {
			if r.body[k] != v {
				t.Errorf("callback of %s: %s = %v, want %v", id, k, r.body[k], v)
			}
		}
		delete(want, id)
	}
	if s := e.stats(t, ""); s.CallbacksSent != 2 || s.CallbacksPending != 0 || s.CallbacksFailed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestMockRetriesFailedCallbacks(t *testing.T) {
	t.Parallel()
	t.Run("a callback refused twice is delivered on the third attempt", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{})
		e.rc.mu.Lock()
		e.rc.failNext = 2
		e.rc.mu.Unlock()
		e.pay(t, "o", 100, "SUCCEEDED")
		eventually(t, 5*time.Second, "the callback delivered", func() bool { return e.mock.Stats().CallbacksDelivered == 1 })
		if n := len(e.rc.received()); n != 3 {
			t.Errorf("%d deliveries, want 3", n)
		}
		if s := e.mock.OrderStats("o"); s.CallbacksSent != 3 || s.CallbacksFailed != 0 {
			t.Errorf("stats %+v, want 3 sent, none failed", s)
		}
	})
	t.Run("a callback is given up after CallbackAttempts", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{CallbackAttempts: 3})
		e.rc.mu.Lock()
		e.rc.failAll = true
		e.rc.mu.Unlock()
		e.pay(t, "o", 100, "SUCCEEDED")
		eventually(t, 5*time.Second, "the callback given up", func() bool { return e.mock.Stats().CallbacksFailed == 1 })
		if n := len(e.rc.received()); n != 3 {
			t.Errorf("%d deliveries, want 3", n)
		}
		if tr, _ := e.mock.Trade("o"); tr.Status != payment.StatePaid {
			t.Errorf("trade %+v, want PAID all the same", tr)
		}
	})
	t.Run("a callback to nowhere is retried too", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		e := newMockEnv(t, payment.MockConfig{CallbackURL: "http://" + addr, CallbackAttempts: 2})
		e.pay(t, "o", 100, "FAILED")
		eventually(t, 5*time.Second, "the callback given up", func() bool { return e.mock.Stats().CallbacksFailed == 1 })
		if s := e.mock.Stats(); s.CallbacksSent != 2 {
			t.Errorf("stats %+v, want 2 sent", s)
		}
	})
}

func TestMockSwitches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("drop_callbacks: paid, and lapse is never told", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{})
		e.control(t, map[string]any{"drop_callbacks": true})
		e.pay(t, "ok", 100, "SUCCEEDED")
		e.pay(t, "ko", 100, "FAILED")
		if s := e.stats(t, ""); s.CallbacksDropped != 2 || s.CallbacksPending != 0 {
			t.Fatalf("stats %+v, want 2 dropped, none pending", s)
		}
		e.mock.Close() // waits for any callback goroutine
		if n := len(e.rc.received()); n != 0 {
			t.Errorf("%d callbacks reached lapse, want 0", n)
		}
		wantState(t, e.gw, "ok", payment.Status{State: payment.StatePaid, PaymentID: mustTrade(t, e.mock, "ok").PaymentID, AmountCents: 100})
	})
	t.Run("silent_paid: success is not called back, failure is", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{SilentPaid: true})
		e.pay(t, "ok", 100, "SUCCEEDED")
		e.pay(t, "ko", 100, "FAILED")
		eventually(t, 5*time.Second, "the FAILED callback", func() bool { return e.mock.Stats().CallbacksDelivered == 1 })
		e.mock.Close()
		got := e.rc.received()
		if len(got) != 1 || got[0].body["order_id"] != "ko" || got[0].body["status"] != "FAILED" {
			t.Errorf("callbacks %v, want only ko's FAILED", got)
		}
		if s := e.mock.OrderStats("ok"); s.CallbacksDropped != 1 {
			t.Errorf("ok's stats %+v, want 1 dropped", s)
		}
	})
	t.Run("callback_delay_ms holds the callback back", func(t *testing.T) {
		t.Parallel()
		const delay = 300 * time.Millisecond
		e := newMockEnv(t, payment.MockConfig{})
		e.control(t, map[string]any{"callback_delay_ms": delay.Milliseconds()})
		start := time.Now()
		e.pay(t, "o", 100, "SUCCEEDED")
		if s := e.mock.Stats(); s.CallbacksPending != 1 {
			t.Errorf("stats right after paying %+v, want 1 pending", s)
		}
		eventually(t, 5*time.Second, "the delayed callback", func() bool { return len(e.rc.received()) == 1 })
		if took := e.rc.received()[0].at.Sub(start); took < delay {
			t.Errorf("callback after %s, want at least %s", took, delay)
		}
	})
	t.Run("fail_queries answers 503 until turned off", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{FailQueries: true})
		if _, err := e.gw.Query(ctx, "o"); err == nil {
			t.Fatal("Query succeeded with fail_queries")
		}
		if s := e.mock.OrderStats("o"); s.Queries != 3 {
			t.Errorf("%d queries counted, want 3 (the client retries a 503)", s.Queries)
		}
		e.control(t, map[string]any{"fail_queries": false})
		wantState(t, e.gw, "o", payment.Status{State: payment.StateNotPaid})
	})
	t.Run("fail_closes answers 503 and closes nothing", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{})
		e.control(t, map[string]any{"fail_closes": true})
		if err := e.gw.Close(ctx, "o"); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
			t.Fatalf("Close: %v, want a failure", err)
		}
		if _, ok := e.mock.Trade("o"); ok {
			t.Error("a failed close recorded a trade")
		}
		if code, _ := e.pay(t, "o", 100, "SUCCEEDED"); code != 200 {
			t.Errorf("pay after a failed close: %d, want 200", code)
		}
	})
	t.Run("control reads back, and a POST changes only what it names", func(t *testing.T) {
		t.Parallel()
		e := newMockEnv(t, payment.MockConfig{CallbackDelay: 1500 * time.Millisecond, FailCloses: true})
		var c payment.MockControl
		e.do(t, "GET", "/_control", nil, &c)
		if want := (payment.MockControl{CallbackDelayMS: 1500, FailCloses: true}); c != want {
			t.Errorf("GET /_control = %+v, want %+v", c, want)
		}
		c = e.control(t, map[string]any{"silent_paid": true, "fail_closes": false})
		if want := (payment.MockControl{CallbackDelayMS: 1500, SilentPaid: true}); c != want || e.mock.Control() != want {
			t.Errorf("after POST: %+v / %+v, want %+v", c, e.mock.Control(), want)
		}
		for _, bad := range []any{map[string]any{"drop_callback": true}, map[string]any{"callback_delay_ms": -1}, "nope"} {
			if code := e.do(t, "POST", "/_control", bad, nil); code != http.StatusBadRequest {
				t.Errorf("POST /_control %v: %d, want 400", bad, code)
			}
		}
	})
}

func mustTrade(t *testing.T, m *payment.Mock, id string) payment.MockTrade {
	t.Helper()
	tr, ok := m.Trade(id)
	if !ok {
		t.Fatalf("no trade %s", id)
	}
	return tr
}

func TestMockStatsCountEachKindPerOrder(t *testing.T) {
	t.Parallel()
	e := newMockEnv(t, payment.MockConfig{})
	ctx := context.Background()
	e.gw.Query(ctx, "a")
	e.gw.Query(ctx, "a")
	e.gw.Close(ctx, "a")
	e.pay(t, "b", 100, "SUCCEEDED")
	e.gw.Query(ctx, "b")
	eventually(t, 5*time.Second, "b's callback", func() bool { return e.mock.Stats().CallbacksDelivered == 1 })

	if got, want := e.stats(t, ""), (payment.MockStats{Queries: 3, Closes: 1, Pays: 1, CallbacksSent: 1, CallbacksDelivered: 1}); got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	if got, want := e.stats(t, "a"), (payment.MockStats{Queries: 2, Closes: 1}); got != want {
		t.Errorf("a's %+v, want %+v", got, want)
	}
	if got, want := e.stats(t, "b"), (payment.MockStats{Queries: 1, Pays: 1, CallbacksSent: 1, CallbacksDelivered: 1}); got != want {
		t.Errorf("b's %+v, want %+v", got, want)
	}
	if got := e.stats(t, "never-named"); got != (payment.MockStats{}) {
		t.Errorf("an order never named: %+v, want zeros", got)
	}
	// Reading a trade or the statement is not a gateway call.
	e.mock.Trade("a")
	http.Get(e.srv.URL + "/_statement")
	if got := e.mock.Stats().Queries; got != 3 {
		t.Errorf("queries %d after reading trades, want still 3", got)
	}
}

func TestMockAuthToken(t *testing.T) {
	t.Parallel()
	e := newMockEnv(t, payment.MockConfig{AuthToken: "tok"})
	if _, err := e.gw.Query(context.Background(), "o"); err == nil {
		t.Error("Query without the token succeeded")
	}
	if code, _ := e.pay(t, "o", 1, "SUCCEEDED"); code != http.StatusUnauthorized {
		t.Errorf("pay without the token: %d, want 401", code)
	}
	g := newGateway(t, e.srv.URL, fast(payment.HTTPConfig{BearerToken: "tok"}))
	wantState(t, g, "o", payment.Status{State: payment.StateNotPaid})
	if s := e.stats(t, ""); s.Queries != 1 {
		t.Errorf("stats %+v: want the authorised query only (the test routes stay open)", s)
	}
}

func TestMockServeStopsWithItsContext(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	m := payment.NewMock(payment.MockConfig{CallbackURL: rc.srv.URL, CallbackSecret: mockSecret, CallbackDelay: time.Hour})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()

	g := newGateway(t, "http://"+ln.Addr().String(), fast(payment.HTTPConfig{}))
	wantState(t, g, "o", payment.Status{State: payment.StateNotPaid})
	if _, err := m.Pay("o", 100, payment.OutcomeSucceeded, "pay-1"); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	// Serve closed the mock: the callback waiting out its hour is abandoned.
	if s := m.Stats(); s.CallbacksPending != 0 || s.CallbacksFailed != 1 {
		t.Errorf("stats %+v, want the delayed callback failed", s)
	}
	if _, err := g.Query(context.Background(), "o"); err == nil {
		t.Error("the server still answers after Serve returned")
	}
}

// Asked about one payment attempt (?payment_id=), the gateway answers for
// that attempt's trade: the mock's trade is the last attempt paid into it,
// so an earlier attempt is NOT_PAID and closing it leaves the trade alone.
func TestAttemptsQueriedAndClosedOneByOne(t *testing.T) {
	t.Parallel()
	e := newMockEnv(t, payment.MockConfig{DropCallbacks: true})
	ctx := context.Background()
	gw := e.gw.PerAttempt()
	if _, err := e.mock.Pay("o", 900, payment.OutcomeSucceeded, "card-2"); err != nil {
		t.Fatal(err)
	}
	if st, err := gw.QueryAttempt(ctx, "o", "card-2"); err != nil || st.State != payment.StatePaid || st.PaymentID != "card-2" || st.AmountCents != 900 {
		t.Fatalf("the paying attempt: %+v %v", st, err)
	}
	if st, err := gw.QueryAttempt(ctx, "o", "card-1"); err != nil || st.State != payment.StateNotPaid {
		t.Fatalf("an attempt the trade does not hold: %+v %v, want NOT_PAID", st, err)
	}
	if err := gw.CloseAttempt(ctx, "o", "card-1"); err != nil {
		t.Fatalf("close an attempt the trade does not hold: %v", err)
	}
	if err := gw.CloseAttempt(ctx, "o", "card-2"); !errors.Is(err, payment.ErrAlreadyPaid) {
		t.Fatalf("close the paying attempt: %v, want ErrAlreadyPaid", err)
	}
	wantState(t, e.gw, "o", payment.Status{State: payment.StatePaid, PaymentID: "card-2", AmountCents: 900})
}

// The mock's refunds: fail_refunds answers the next refunds 500 and refunds
// nothing; a refund sent again with its key is the same refund; GET
// /_refunds lists one refund; the stats count every request.
func TestMockRefunds(t *testing.T) {
	t.Parallel()
	m := payment.NewMock(payment.MockConfig{})
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Timeout: time.Second, Retries: -1, BreakerFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pay("o-r", 990, payment.OutcomeSucceeded, "pay-r"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/_control", "application/json", bytes.NewReader([]byte(`{"fail_refunds": 2}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || m.Control().FailRefunds != 2 {
		t.Fatalf("POST /_control fail_refunds: %d, control %+v", resp.StatusCode, m.Control())
	}
	ctx := context.Background()
	r := payment.Refund{OrderID: "o-r", PaymentID: "pay-r", AmountCents: 990, Currency: "EUR", Key: payment.RefundKey("pay-r")}
	for i := range 2 {
		if res, err := gw.Refund(ctx, r); err == nil || errors.Is(err, payment.ErrNotRefundable) {
			t.Fatalf("refund %d while fail_refunds: %+v, %v; want a plain error", i+1, res, err)
		}
	}
	if n := len(m.Refunds("")); n != 0 {
		t.Fatalf("%d refunds made while failing", n)
	}
	first, err := gw.Refund(ctx, r)
	if err != nil || first.State != payment.RefundSucceeded || first.AmountCents != 990 || first.Currency != "EUR" {
		t.Fatalf("refund after the failures: %+v, %v", first, err)
	}
	again, err := gw.Refund(ctx, r)
	if err != nil || again != first {
		t.Fatalf("the refund sent again: %+v, %v; want %+v", again, err, first)
	}
	// Another key for the same payment: its money is back already.
	r2 := r
	r2.Key = "another-key"
	if _, err := gw.Refund(ctx, r2); !errors.Is(err, payment.ErrNotRefundable) {
		t.Fatalf("a second refund of the payment under another key: %v, want ErrNotRefundable", err)
	}
	resp, err = http.Get(srv.URL + "/_refunds?order_id=o-r")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var listed []payment.MockRefund
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil {
		t.Fatal(err)
	}
	want := payment.MockRefund{RefundID: first.RefundID, RefundKey: r.Key, OrderID: "o-r", PaymentID: "pay-r", AmountCents: 990, Currency: "EUR"}
	if len(listed) != 1 || listed[0] != want {
		t.Fatalf("GET /_refunds: %+v, want [%+v]", listed, want)
	}
	if s := m.OrderStats("o-r"); s.Refunds != 5 {
		t.Fatalf("stats: %d refunds, want 5 requests", s.Refunds)
	}
}
