package ordersvc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox/webhook"
)

// newSecret returns a fresh whsec_ secret of 32 random bytes.
func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// newSigner is lapse's signer: what its HTTP sender signs with.
func newSigner(t testing.TB, secrets ...string) *webhook.Signer {
	t.Helper()
	s, err := webhook.NewSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testNow is the receivers' clock in these tests: timestamps are checked
// against it, never against the machine's.
var testNow = time.Date(2030, 5, 17, 10, 30, 0, 0, time.UTC)

// command returns a valid command for orderID and its id.
func command(orderID string) (ordersvc.Command, string) {
	deadline := testNow.Add(-10 * time.Second)
	cancelAfter := deadline.Add(5 * time.Second)
	c := ordersvc.Command{
		Type: ordersvc.Type, OrderID: orderID,
		Deadline: ordersvc.FormatTime(deadline), CancelAfter: ordersvc.FormatTime(cancelAfter),
		AmountCents: 1299, Currency: "EUR", Attempts: []ordersvc.Attempt{}, SchemaVersion: ordersvc.SchemaVersion,
	}
	return c, ordersvc.CommandID(orderID, cancelAfter)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signedPost is the request lapse sends: body signed by s as id at ts.
func signedPost(t testing.TB, s *webhook.Signer, id string, ts time.Time, body []byte) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/lapse", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ordersvc.HeaderAttempt, "1")
	if err := s.SetHeaders(req.Header, id, ts, body); err != nil {
		t.Fatal(err)
	}
	return req
}

// applier is an ApplyFunc that answers what it is told and counts its
// calls per command id.
type applier struct {
	mu     sync.Mutex
	answer ordersvc.Answer
	err    error
	calls  map[string]int
	got    []ordersvc.Command
}

func newApplier(a ordersvc.Answer) *applier { return &applier{answer: a, calls: map[string]int{}} }

func (ap *applier) apply(_ context.Context, c ordersvc.Command, id string) (ordersvc.Answer, error) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.calls[id]++
	ap.got = append(ap.got, c)
	return ap.answer, ap.err
}

func (ap *applier) total() int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	n := 0
	for _, c := range ap.calls {
		n += c
	}
	return n
}

func newReceiver(t testing.TB, cfg ordersvc.ReceiverConfig) *ordersvc.Receiver {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return testNow }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := ordersvc.NewReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs req through h and returns the status and the body.
func serve(h http.Handler, req *http.Request) (int, []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// errorCode is the code of an {"error": {"code"}} body, or "".
func errorCode(body []byte) string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &b)
	return b.Error.Code
}

func decodeAnswer(t testing.TB, body []byte) ordersvc.Answer {
	t.Helper()
	var a ordersvc.Answer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return a
}

// A command verifies with the current and with the previous secret; one
// that does not verify is 401 with a stable code, and Apply is not called.
func TestReceiverVerifiesTheSignature(t *testing.T) {
	current, previous, other := newSecret(t), newSecret(t), newSecret(t)
	c, id := command("o-1")
	body := mustJSON(t, c)
	cases := []struct {
		name string
		req  func() *http.Request
		code string // "": accepted
	}{
		{"signed with the current secret", func() *http.Request { return signedPost(t, newSigner(t, current), id, testNow, body) }, ""},
		{"signed with the previous secret", func() *http.Request { return signedPost(t, newSigner(t, previous), id, testNow, body) }, ""},
		{"signed with both, the new one first", func() *http.Request { return signedPost(t, newSigner(t, current, previous), id, testNow, body) }, ""},
		{"4 minutes old", func() *http.Request {
			return signedPost(t, newSigner(t, current), id, testNow.Add(-4*time.Minute), body)
		}, ""},
		{"signed with another secret", func() *http.Request { return signedPost(t, newSigner(t, other), id, testNow, body) }, ordersvc.CodeInvalidSignature},
		{"body changed after signing", func() *http.Request {
			r := signedPost(t, newSigner(t, current), id, testNow, body)
			r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("o-1"), []byte("o-2"), 1)))
			return r
		}, ordersvc.CodeInvalidSignature},
		{"another command's id", func() *http.Request {
			r := signedPost(t, newSigner(t, current), id, testNow, body)
			r.Header.Set("webhook-id", "cmd_other")
			return r
		}, ordersvc.CodeInvalidSignature},
		{"no signature", func() *http.Request {
			r := signedPost(t, newSigner(t, current), id, testNow, body)
			r.Header.Del("webhook-signature")
			return r
		}, ordersvc.CodeMissingSignature},
		{"no webhook-id", func() *http.Request {
			r := signedPost(t, newSigner(t, current), id, testNow, body)
			r.Header.Del("webhook-id")
			return r
		}, ordersvc.CodeMissingSignature},
		{"unsigned", func() *http.Request { return httptest.NewRequest(http.MethodPost, "/lapse", bytes.NewReader(body)) }, ordersvc.CodeMissingSignature},
		{"expired: 6 minutes old", func() *http.Request {
			return signedPost(t, newSigner(t, current), id, testNow.Add(-6*time.Minute), body)
		}, ordersvc.CodeStaleTimestamp},
		{"6 minutes ahead", func() *http.Request {
			return signedPost(t, newSigner(t, current), id, testNow.Add(6*time.Minute), body)
		}, ordersvc.CodeStaleTimestamp},
		{"timestamp not a number", func() *http.Request {
			r := signedPost(t, newSigner(t, current), id, testNow, body)
			r.Header.Set("webhook-timestamp", "now")
			return r
		}, ordersvc.CodeInvalidSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ap := newApplier(ordersvc.Answer{Result: ordersvc.Cancelled})
			rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{current, previous}, Apply: ap.apply})
			status, got := serve(rc, tc.req())
			if tc.code == "" {
				if status != http.StatusOK || ap.total() != 1 {
					t.Fatalf("%d %s, Apply called %d times; want 200 and one call", status, got, ap.total())
				}
				return
			}
			if status != http.StatusUnauthorized || errorCode(got) != tc.code {
				t.Errorf("%d %s, want 401 %s", status, got, tc.code)
			}
			if ap.total() != 0 {
				t.Errorf("Apply called %d times for a request that does not verify", ap.total())
			}
		})
	}

	t.Run("a tolerance of one minute", func(t *testing.T) {
		ap := newApplier(ordersvc.Answer{Result: ordersvc.Cancelled})
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{current}, Apply: ap.apply, Tolerance: time.Minute})
		if status, got := serve(rc, signedPost(t, newSigner(t, current), id, testNow.Add(-2*time.Minute), body)); status != http.StatusUnauthorized || errorCode(got) != ordersvc.CodeStaleTimestamp {
			t.Errorf("2 minutes old: %d %s, want 401 %s", status, got, ordersvc.CodeStaleTimestamp)
		}
		if status, _ := serve(rc, signedPost(t, newSigner(t, current), id, testNow.Add(-50*time.Second), body)); status != http.StatusOK {
			t.Errorf("50 s old: %d, want 200", status)
		}
	})
}

// Each of Apply's five results is the 200's result, with the command's id
// echoed; retry_after_seconds goes with paying.
func TestReceiverAnswersWhatApplyDecided(t *testing.T) {
	secret := newSecret(t)
	for _, want := range []ordersvc.Answer{
		{Result: ordersvc.Cancelled},
		{Result: ordersvc.AlreadyCancelled},
		{Result: ordersvc.AlreadyPaid},
		{Result: ordersvc.Paying},
		{Result: ordersvc.Paying, RetryAfterSeconds: 30},
		{Result: ordersvc.NotFound},
	} {
		t.Run(string(want.Result), func(t *testing.T) {
			ap := newApplier(want)
			rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply})
			c, id := command("o-" + string(want.Result))
			status, body := serve(rc, signedPost(t, newSigner(t, secret), id, testNow, mustJSON(t, c)))
			if status != http.StatusOK {
				t.Fatalf("%d %s, want 200", status, body)
			}
			got := decodeAnswer(t, body)
			want.CommandID = id
			if got != want {
				t.Errorf("answer %+v, want %+v", got, want)
			}
			if len(ap.got) != 1 || ap.got[0].OrderID != c.OrderID || ap.got[0].AmountCents != 1299 || ap.calls[id] != 1 {
				t.Errorf("Apply got %+v with ids %v, want the command once under its id", ap.got, ap.calls)
			}
		})
	}
}

// A body that is not a valid command is 400 (lapse parks it DEAD rather
// than retrying), and Apply is not called; unknown fields are allowed.
func TestReceiverRefusesInvalidCommands(t *testing.T) {
	secret := newSecret(t)
	valid, id := command("o-1")
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(mustJSON(t, valid), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		return mustJSON(t, m)
	}
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"not JSON", []byte("order o-1, cancel it"), 400, ordersvc.CodeInvalidJSON},
		{"empty", nil, 400, ordersvc.CodeInvalidJSON},
		{"trailing garbage", append(mustJSON(t, valid), []byte("}")...), 400, ordersvc.CodeInvalidJSON},
		{"a JSON array", []byte(`[1]`), 400, ordersvc.CodeInvalidJSON},
		{"amount as a string", edit(func(m map[string]any) { m["amount_cents"] = "1299" }), 400, ordersvc.CodeInvalidJSON},
		{"another type", edit(func(m map[string]any) { m["type"] = "order.cancel" }), 400, ordersvc.CodeInvalidCommand},
		{"unknown schema_version", edit(func(m map[string]any) { m["schema_version"] = 2 }), 400, ordersvc.CodeInvalidCommand},
		{"no schema_version", edit(func(m map[string]any) { delete(m, "schema_version") }), 400, ordersvc.CodeInvalidCommand},
		{"no order_id", edit(func(m map[string]any) { delete(m, "order_id") }), 400, ordersvc.CodeInvalidCommand},
		{"deadline not RFC 3339", edit(func(m map[string]any) { m["deadline"] = "tomorrow" }), 400, ordersvc.CodeInvalidCommand},
		{"no cancel_after", edit(func(m map[string]any) { delete(m, "cancel_after") }), 400, ordersvc.CodeInvalidCommand},
		{"over the size limit", edit(func(m map[string]any) { m["note"] = strings.Repeat("x", 2048) }), 413, ordersvc.CodeBodyTooLarge},
		{"unknown fields", edit(func(m map[string]any) {
			m["shop_note"] = "added by a later lapse"
			m["items"] = []any{map[string]any{"sku": "A"}}
		}), 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ap := newApplier(ordersvc.Answer{Result: ordersvc.Cancelled})
			rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply, MaxBodyBytes: 1024})
			status, got := serve(rc, signedPost(t, newSigner(t, secret), id, testNow, tc.body))
			if status != tc.status || errorCode(got) != tc.code {
				t.Fatalf("%d %s, want %d %q", status, got, tc.status, tc.code)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.status == 200]; ap.total() != want {
				t.Errorf("Apply called %d times, want %d", ap.total(), want)
			}
		})
	}
}

// Apply's error is 503 (lapse retries); an answer outside the contract is
// 500; neither is remembered by Dedupe.
func TestReceiverFailures(t *testing.T) {
	secret := newSecret(t)
	cases := []struct {
		name   string
		answer ordersvc.Answer
		err    error
		status int
		code   string
	}{
		{"Apply fails", ordersvc.Answer{}, errors.New("database is down"), 503, ordersvc.CodeUnavailable},
		{"Apply fails with an answer", ordersvc.Answer{Result: ordersvc.Cancelled}, context.DeadlineExceeded, 503, ordersvc.CodeUnavailable},
		{"no result", ordersvc.Answer{}, nil, 500, ordersvc.CodeInvalidAnswer},
		{"a sixth result", ordersvc.Answer{Result: "refunded"}, nil, 500, ordersvc.CodeInvalidAnswer},
		{"negative retry_after_seconds", ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: -1}, nil, 500, ordersvc.CodeInvalidAnswer},
		{"retry_after_seconds with a final result", ordersvc.Answer{Result: ordersvc.Cancelled, RetryAfterSeconds: 5}, nil, 500, ordersvc.CodeInvalidAnswer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ap := newApplier(tc.answer)
			ap.err = tc.err
			dd := ordersvc.NewMemoryDeduper()
			rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply, Dedupe: dd})
			c, id := command("o-1")
			for range 2 {
				status, got := serve(rc, signedPost(t, newSigner(t, secret), id, testNow, mustJSON(t, c)))
				if status != tc.status || errorCode(got) != tc.code {
					t.Fatalf("%d %s, want %d %s", status, got, tc.status, tc.code)
				}
			}
			if ap.total() != 2 {
				t.Errorf("Apply called %d times for two deliveries, want 2 (a failure is not remembered)", ap.total())
			}
			if _, found, _ := dd.Get(context.Background(), id); found {
				t.Error("Dedupe holds an answer for a command that failed")
			}
		})
	}
}

// With Dedupe, a redelivered command gets the answer of its first delivery
// and Apply runs once; paying is not final and is applied again.
func TestReceiverDedupe(t *testing.T) {
	secret := newSecret(t)
	signer := newSigner(t, secret)

	t.Run("the same command id gets the same answer once applied", func(t *testing.T) {
		ap := newApplier(ordersvc.Answer{Result: ordersvc.Cancelled})
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply, Dedupe: ordersvc.NewMemoryDeduper()})
		c, id := command("o-1")
		var answers []ordersvc.Answer
		for i := range 3 {
			// A later attempt is signed anew, at its own time.
			status, body := serve(rc, signedPost(t, signer, id, testNow.Add(time.Duration(i)*time.Second), mustJSON(t, c)))
			if status != http.StatusOK {
				t.Fatalf("delivery %d: %d %s", i+1, status, body)
			}
			answers = append(answers, decodeAnswer(t, body))
			// What Apply would answer now: the order is cancelled.
			ap.mu.Lock()
			ap.answer = ordersvc.Answer{Result: ordersvc.AlreadyCancelled}
			ap.mu.Unlock()
		}
		want := ordersvc.Answer{Result: ordersvc.Cancelled, CommandID: id}
		for i, a := range answers {
			if a != want {
				t.Errorf("delivery %d: %+v, want %+v", i+1, a, want)
			}
		}
		if ap.calls[id] != 1 {
			t.Errorf("Apply called %d times for three deliveries of one command, want 1", ap.calls[id])
		}

		// Another command (another order, or a moved deadline) is applied.
		c2, id2 := command("o-2")
		if status, body := serve(rc, signedPost(t, signer, id2, testNow, mustJSON(t, c2))); status != 200 || decodeAnswer(t, body).Result != ordersvc.AlreadyCancelled {
			t.Errorf("another command: %d %s, want Apply's answer", status, body)
		}
		if ap.total() != 2 {
			t.Errorf("Apply called %d times in all, want 2", ap.total())
		}
	})

	t.Run("paying is asked again", func(t *testing.T) {
		ap := newApplier(ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 10})
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply, Dedupe: ordersvc.NewMemoryDeduper()})
		c, id := command("o-3")
		for _, want := range []ordersvc.Result{ordersvc.Paying, ordersvc.AlreadyPaid, ordersvc.AlreadyPaid} {
			status, body := serve(rc, signedPost(t, signer, id, testNow, mustJSON(t, c)))
			if got := decodeAnswer(t, body); status != 200 || got.Result != want {
				t.Fatalf("%d %s, want %s", status, body, want)
			}
			ap.mu.Lock()
			ap.answer = ordersvc.Answer{Result: ordersvc.AlreadyPaid}
			ap.mu.Unlock()
		}
		if ap.calls[id] != 2 {
			t.Errorf("Apply called %d times, want 2 (paying, then paid; the third delivery is deduped)", ap.calls[id])
		}
	})

	t.Run("a failing store", func(t *testing.T) {
		ap := newApplier(ordersvc.Answer{Result: ordersvc.Cancelled})
		dd := &failingDeduper{getErr: errors.New("answers table unreachable")}
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: ap.apply, Dedupe: dd})
		c, id := command("o-4")
		if status, body := serve(rc, signedPost(t, signer, id, testNow, mustJSON(t, c))); status != 503 || errorCode(body) != ordersvc.CodeUnavailable {
			t.Errorf("Get fails: %d %s, want 503 (cannot tell whether it was answered)", status, body)
		}
		if ap.total() != 0 {
			t.Errorf("Apply called %d times although the lookup failed", ap.total())
		}
		dd.getErr, dd.putErr = nil, errors.New("disk full")
		if status, body := serve(rc, signedPost(t, signer, id, testNow, mustJSON(t, c))); status != 200 || decodeAnswer(t, body).Result != ordersvc.Cancelled {
			t.Errorf("Put fails: %d %s, want the applied answer (it is committed)", status, body)
		}
	})
}

type failingDeduper struct{ getErr, putErr error }

func (d *failingDeduper) Get(context.Context, string) (ordersvc.Answer, bool, error) {
	return ordersvc.Answer{}, false, d.getErr
}

func (d *failingDeduper) Put(context.Context, string, ordersvc.Answer) error { return d.putErr }

// The status route answers a signed GET ?order_id= whose webhook-id names
// that order.
func TestReceiverStatus(t *testing.T) {
	secret := newSecret(t)
	signer := newSigner(t, secret)
	statuses := map[string]ordersvc.OrderStatus{"o-1": ordersvc.StatusPending, "o-2": ordersvc.StatusPaid, "o_3_x": ordersvc.StatusCancelled, "o-bad": "shipped"}
	statusFunc := func(_ context.Context, orderID string) (ordersvc.OrderStatus, error) {
		if orderID == "o-down" {
			return "", errors.New("replica lagging")
		}
		if s, ok := statuses[orderID]; ok {
			return s, nil
		}
		return ordersvc.StatusNotFound, nil
	}
	rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: newApplier(ordersvc.Answer{}).apply, Status: statusFunc})
	get := func(t *testing.T, orderID string) *http.Request {
		t.Helper()
		req, err := ordersvc.NewStatusRequest(context.Background(), "https://shop.example/lapse?tenant=eu", signer, orderID, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if got := req.URL.Query(); got.Get("tenant") != "eu" || got.Get("order_id") != orderID {
			t.Fatalf("status request URL %s: want the URL's query kept and order_id added", req.URL)
		}
		return req
	}

	for _, tc := range []struct {
		orderID string
		want    ordersvc.OrderStatus
	}{{"o-1", ordersvc.StatusPending}, {"o-2", ordersvc.StatusPaid}, {"o_3_x", ordersvc.StatusCancelled}, {"o-9", ordersvc.StatusNotFound}} {
		status, body := serve(rc, get(t, tc.orderID))
		var got ordersvc.StatusAnswer
		if err := json.Unmarshal(body, &got); status != 200 || err != nil || got != (ordersvc.StatusAnswer{OrderID: tc.orderID, Status: tc.want}) {
			t.Errorf("status of %s: %d %s, want 200 %s", tc.orderID, status, body, tc.want)
		}
	}

	t.Run("refused", func(t *testing.T) {
		retarget := func(orderID string) *http.Request {
			// A captured request for o-1, its query changed to ask about
			// orderID: the signature still verifies, the id does not match.
			r := get(t, "o-1")
			q := r.URL.Query()
			q.Set("order_id", orderID)
			r.URL.RawQuery = q.Encode()
			return r
		}
		unsigned := get(t, "o-1")
		unsigned.Header.Del("webhook-signature")
		noOrder := get(t, "o-1")
		noOrder.URL.RawQuery = ""
		for _, tc := range []struct {
			name   string
			req    *http.Request
			status int
			code   string
		}{
			{"asked about another order", retarget("o-2"), 401, ordersvc.CodeStatusIDMismatch},
			{"an order whose id the first one's starts", retarget("o"), 401, ordersvc.CodeStatusIDMismatch},
			{"unsigned", unsigned, 401, ordersvc.CodeMissingSignature},
			{"no order_id", noOrder, 400, ordersvc.CodeInvalidOrderID},
			{"Status fails", get(t, "o-down"), 503, ordersvc.CodeUnavailable},
			{"Status answers a sixth status", get(t, "o-bad"), 500, ordersvc.CodeInvalidAnswer},
		} {
			if status, body := serve(rc, tc.req); status != tc.status || errorCode(body) != tc.code {
				t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
			}
		}
	})

	t.Run("no Status", func(t *testing.T) {
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: newApplier(ordersvc.Answer{}).apply})
		if status, body := serve(rc, get(t, "o-1")); status != 404 || errorCode(body) != ordersvc.CodeNotFound {
			t.Errorf("%d %s, want 404 %s", status, body, ordersvc.CodeNotFound)
		}
	})
}

// Over real HTTP, a command signed with lapse's helpers (Signer and Sign)
// verifies, and a method other than POST and GET is 405.
func TestReceiverOverHTTP(t *testing.T) {
	current, previous := newSecret(t), newSecret(t)
	ap := newApplier(ordersvc.Answer{Result: ordersvc.AlreadyPaid})
	// The real clock: this is what a shop's service runs.
	rc, err := ordersvc.NewReceiver(ordersvc.ReceiverConfig{Secrets: []string{previous}, Apply: ap.apply, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	c, id := command("o-http")
	body := mustJSON(t, c)
	now := time.Now()
	sig, err := ordersvc.Sign([]string{current, previous}, id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/lapse", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || decodeAnswer(t, got) != (ordersvc.Answer{Result: ordersvc.AlreadyPaid, CommandID: id}) {
		t.Fatalf("%d %s, want 200 already_paid", resp.StatusCode, got)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}

	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/lapse", nil)
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, POST" {
		t.Errorf("PUT: %d, Allow %q; want 405 and GET, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestNewReceiverChecksItsConfig(t *testing.T) {
	apply := newApplier(ordersvc.Answer{}).apply
	secret := newSecret(t)
	for _, tc := range []struct {
		name string
		cfg  ordersvc.ReceiverConfig
		want string
	}{
		{"no secret", ordersvc.ReceiverConfig{Apply: apply}, "no signing secret"},
		{"a malformed secret", ordersvc.ReceiverConfig{Secrets: []string{secret, "whsec_short"}, Apply: apply}, "secret 2 of 2"},
		{"no Apply", ordersvc.ReceiverConfig{Secrets: []string{secret}}, "without Apply"},
		{"negative tolerance", ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: apply, Tolerance: -time.Second}, "Tolerance"},
		{"negative body limit", ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: apply, MaxBodyBytes: -1}, "MaxBodyBytes"},
	} {
		_, err := ordersvc.NewReceiver(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReceiver signs arbitrary bodies: the receiver answers every one 200
// (Apply called with a valid command), 400 or 413 (Apply not called), and
// never anything else.
func FuzzReceiver(f *testing.F) {
	c, _ := command("o-1")
	valid := mustJSON(f, c)
	f.Add(valid)
	f.Add([]byte(`{"type":"order.cancel_if_pending","order_id":"o","deadline":"2030-01-01T00:00:00Z","cancel_after":"2030-01-01T00:00:05.000Z","schema_version":1,"attempts":[{"payment_id":"p","status":"PENDING","amount_cents":1}],"extra":{"a":[1,2]}}`))
	f.Add([]byte(`{"type":"order.cancel_if_pending","schema_version":2}`))
	f.Add([]byte(`{"order_id":null,"amount_cents":1e400}`))
	f.Add([]byte(`{"schema_version":"1"}`))
	f.Add([]byte("\xff\xfe{"))
	f.Add([]byte(""))
	secret := newSecret(f)
	signer := newSigner(f, secret)
	f.Fuzz(func(t *testing.T, body []byte) {
		var applied *ordersvc.Command
		apply := func(_ context.Context, c ordersvc.Command, _ string) (ordersvc.Answer, error) {
			applied = &c
			return ordersvc.Answer{Result: ordersvc.Cancelled}, nil
		}
		rc := newReceiver(t, ordersvc.ReceiverConfig{Secrets: []string{secret}, Apply: apply, MaxBodyBytes: 4096})
		status, got := serve(rc, signedPost(t, signer, "cmd_fuzz", testNow, body))
		switch status {
		case http.StatusOK:
			if applied == nil || applied.Validate() != nil {
				t.Fatalf("200 %s without a valid command applied", got)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if applied != nil {
				t.Fatalf("%d, yet Apply got %+v", status, *applied)
			}
		default:
			t.Fatalf("%d %s for body %q", status, got, body)
		}
	})
}

// lapse's own sender (ordersvc.HTTP, what the dispatcher sends with) and
// the Receiver agree on the wire: every result comes back as the answer, a
// receiver holding only the previous secret verifies, and the Receiver's
// refusals are classified as the contract says — 401 and 400 are DEAD at
// once, 503 and 500 are sent again.
func TestReceiverAnswersLapsesSender(t *testing.T) {
	current, previous := newSecret(t), newSecret(t)
	ap := newApplier(ordersvc.Answer{})
	rc, err := ordersvc.NewReceiver(ordersvc.ReceiverConfig{Secrets: []string{previous}, Apply: ap.apply, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	sender := func(secrets ...string) *ordersvc.HTTP {
		h, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL + "/lapse", Secrets: secrets})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	lapse := sender(current, previous)
	c, id := command("o-1")
	d := ordersvc.Delivery{ID: id, Attempt: 1, Command: c}
	for _, want := range []ordersvc.Answer{
		{Result: ordersvc.Cancelled}, {Result: ordersvc.AlreadyCancelled}, {Result: ordersvc.AlreadyPaid},
		{Result: ordersvc.Paying, RetryAfterSeconds: 30}, {Result: ordersvc.NotFound},
	} {
		ap.mu.Lock()
		ap.answer, ap.err = want, nil
		ap.mu.Unlock()
		got, err := lapse.Send(context.Background(), d)
		want.CommandID = id
		if err != nil || got != want {
			t.Errorf("Send: %+v, %v; want %+v", got, err, want)
		}
	}

	for _, tc := range []struct {
		name     string
		h        *ordersvc.HTTP
		d        ordersvc.Delivery
		applyErr error
		answer   ordersvc.Answer
		code     int
		refused  bool
	}{
		{"signed with another secret", sender(newSecret(t)), d, nil, ordersvc.Answer{Result: ordersvc.Cancelled}, 401, true},
		{"an unknown schema_version", lapse, func() ordersvc.Delivery { d := d; d.Command.SchemaVersion = 2; return d }(), nil, ordersvc.Answer{Result: ordersvc.Cancelled}, 400, true},
		{"Apply fails", lapse, d, errors.New("db down"), ordersvc.Answer{}, 503, false},
		{"Apply answers outside the contract", lapse, d, nil, ordersvc.Answer{Result: "maybe"}, 500, false},
	} {
		ap.mu.Lock()
		ap.answer, ap.err = tc.answer, tc.applyErr
		ap.mu.Unlock()
		_, err := tc.h.Send(context.Background(), tc.d)
		var serr *ordersvc.StatusError
		if !errors.As(err, &serr) || serr.Code != tc.code || ordersvc.IsRefusal(err) != tc.refused {
			t.Errorf("%s: %v; want status %d, refused for good: %v", tc.name, err, tc.code, tc.refused)
		}
	}
}
