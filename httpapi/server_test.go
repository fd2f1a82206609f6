package httpapi_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/timer/memory"
)

// ---------------------------------------------------------------------------
// Test environment: a real Service on a real SQLite store, served over HTTP.
// ---------------------------------------------------------------------------

var testSecret = []byte("whsec_test_current")

// fakeEpoch is where fake clocks start: in the future, so that the memory
// scheduler (which waits on the wall clock) never fires a timer during a test
// that runs the store on a fake clock.
var fakeEpoch = time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)

type envConfig struct {
	Grace    time.Duration
	Clock    *clock.Fake // nil: the wall clock
	APIToken string
	// Secrets verify callbacks; nil means {testSecret}. NoSecrets configures none.
	Secrets   [][]byte
	NoSecrets bool
	// Postgres runs the service on PostgreSQL (LAPSE_TEST_POSTGRES, a
	// schema of its own) instead of SQLite; the test is skipped without it.
	Postgres bool
	// RequestTimeout is httpapi.Options.RequestTimeout (0: its default).
	RequestTimeout time.Duration
	// Inventory, when set, holds the stock (lapse.Config.Inventory).
	Inventory inventory.Client
	// Notifiers are httpapi.Options.Notifiers.
	Notifiers []payment.Notifier
	// AuthThrottle is httpapi.Options.AuthThrottle (nil: the API's own).
	AuthThrottle *httpapi.AuthThrottle
	// OrderService, when set, owns the orders (lapse.Config.OrderService),
	// its commands sent as Commands says.
	OrderService ordersvc.Client
	Commands     ordersvc.DispatcherConfig
	// Gateway, when set, is the payment gateway (lapse.Config.Gateway).
	Gateway payment.Gateway
	// AutoRefund and Refunds are lapse.Config's (with a Gateway that refunds).
	AutoRefund bool
	Refunds    refund.Config
}

type env struct {
	url    string
	client *http.Client
	st     store.Store
	clk    *clock.Fake
	token  string
	secret []byte // the secret notifySigned signs with
	signed atomic.Int64
	base   time.Time // signing timestamps count back from it, one second per message
	pgURL  string    // with envConfig.Postgres: the schema's URL
	// expected names the violations a scenario leaves on purpose, and how
	// many: the closing audit wants exactly those.
	expected map[string]int64
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEnv builds the service, runs its cancel loop and serves the API. When
// the test ends it checks the store's audit, then shuts everything down.
func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var pgURL string
	if cfg.Postgres {
		st, pgURL = openPostgresURL(t, cfg.Clock)
	} else {
		scfg := sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"}
		if cfg.Clock != nil {
			scfg.Clock = cfg.Clock
		}
		sst, err := sqlite.Open(ctx, scfg)
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		st = sst
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	svc, err := lapse.New(lapse.Config{
		Store: st, Scheduler: memory.New(memory.Config{}), Grace: cfg.Grace, Logger: discard, Inventory: cfg.Inventory,
		Tasks:        inventory.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond},
		OrderService: cfg.OrderService, Commands: cfg.Commands, Gateway: cfg.Gateway, AutoRefund: cfg.AutoRefund, Refunds: cfg.Refunds,
	})
	if err != nil {
		t.Fatalf("lapse.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Service.Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Service.Run did not return within 10s of its context ending")
		}
	})
	secrets := cfg.Secrets
	if secrets == nil {
		secrets = [][]byte{testSecret}
	}
	if cfg.NoSecrets {
		secrets = nil
	}
	srv := httptest.NewServer(conforming(t, httpapi.New(svc, httpapi.Options{
		APIToken: cfg.APIToken, CallbackSecrets: secrets, Logger: discard, RequestTimeout: cfg.RequestTimeout,
		Notifiers: cfg.Notifiers, AuthThrottle: cfg.AuthThrottle,
	})))
	t.Cleanup(srv.Close)
	e := &env{url: srv.URL, client: srv.Client(), st: st, clk: cfg.Clock, token: cfg.APIToken, base: time.Now(), pgURL: pgURL}
	if len(secrets) > 0 {
		e.secret = secrets[0]
	}
	// Registered last, so it runs first: every scenario ends with a clean audit.
	t.Cleanup(func() { e.audit(t) })
	return e
}

// audit runs the store's invariant checks and fails the test on any violation.
func (e *env) audit(t *testing.T) {
	t.Helper()
	rep, err := e.st.Audit(context.Background(), store.AuditParams{MaxExamples: 5})
	if err != nil {
		t.Errorf("Audit: %v", err)
		return
	}
	for _, c := range rep.Checks {
		if !c.Warning && c.Count != e.expected[c.Name] {
			t.Errorf("audit %s: %d violations (%d expected), e.g. %q", c.Name, c.Count, e.expected[c.Name], c.Examples)
		}
	}
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request. body is sent as is if it is a string or []byte, and as
// JSON otherwise (nil: no body); a body goes with Content-Type:
// application/json. hdr is header name, value pairs (an empty value removes
// the header; "Host" sets the request's Host).
func (e *env) do(t *testing.T, method, path string, body any, hdr ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal request body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1] // the Host header is the request's Host field
			continue
		}
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusNoContent && !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// wantError asserts the response is an error with this status and code, in
// exactly the shape {"error": {"code", "message"}} with a non-empty message.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d (body %s)", r.Status, status, r.Body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &top); err != nil {
		t.Fatalf("error body is not a JSON object: %v: %s", err, r.Body)
	}
	if len(top) != 1 || top["error"] == nil {
		t.Fatalf("error body has keys %v, want only \"error\": %s", slices.Sorted(mapKeys(top)), r.Body)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(top["error"], &inner); err != nil {
		t.Fatalf("\"error\" is not an object: %s", r.Body)
	}
	if len(inner) != 2 || inner["code"] == nil || inner["message"] == nil {
		t.Fatalf("\"error\" has keys %v, want code and message: %s", slices.Sorted(mapKeys(inner)), r.Body)
	}
	var gotCode, msg string
	if err := json.Unmarshal(inner["code"], &gotCode); err != nil {
		t.Fatalf("error.code is not a string: %s", r.Body)
	}
	if err := json.Unmarshal(inner["message"], &msg); err != nil {
		t.Fatalf("error.message is not a string: %s", r.Body)
	}
	if gotCode != code {
		t.Errorf("error code %q, want %q (message %q)", gotCode, code, msg)
	}
	if strings.TrimSpace(msg) == "" {
		t.Errorf("error %q has an empty message", gotCode)
	}
	if strings.Contains(msg, "goroutine ") || strings.Contains(msg, ".go:") {
		t.Errorf("error message leaks internals: %q", msg)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// checkOrder asserts raw is an order in the API's shape and returns it.
func checkOrder(t *testing.T, raw []byte) order.Order {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("order is not a JSON object: %v: %s", err, raw)
	}
	required := []string{"id", "status", "items", "amount_cents", "currency", "created_at", "expires_at",
		"cancel_after", "refund_required", "payment_attempts", "version"}
	optional := []string{"paid_at", "cancelled_at", "cancel_reason", "payment_id", "payments", "reservation_id", "tasks", "commands",
		"pay_before"} // the pay answer's: its expires_at, checked below
	for _, k := range required {
		if _, ok := m[k]; !ok {
			t.Errorf("order lacks %q: %s", k, raw)
		}
	}
	for k := range m {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			t.Errorf("order has unexpected field %q: %s", k, raw)
		}
	}
	if pb, ok := m["pay_before"]; ok && string(pb) != string(m["expires_at"]) {
		t.Errorf("pay_before %s is not expires_at %s", pb, m["expires_at"])
	}
	for _, k := range []string{"created_at", "expires_at", "cancel_after", "paid_at", "cancelled_at", "pay_before"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || !timeRE.MatchString(s) {
			t.Errorf("order %s = %s, want RFC 3339 UTC with milliseconds", k, v)
		}
	}
	if string(m["items"]) == "null" {
		t.Errorf("order items is null, want an array: %s", raw)
	}
	var o order.Order
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("decode order: %v: %s", err, raw)
	}
	_, hasPaid := m["paid_at"]
	_, hasCancelled := m["cancelled_at"]
	_, hasReason := m["cancel_reason"]
	if hasPaid != (o.Status == order.Paid) {
		t.Errorf("order %s: status %s, paid_at present %v", o.ID, o.Status, hasPaid)
	}
	if hasCancelled != (o.Status == order.Cancelled) || hasReason != (o.Status == order.Cancelled) {
		t.Errorf("order %s: status %s, cancelled_at present %v, cancel_reason present %v", o.ID, o.Status, hasCancelled, hasReason)
	}
	if hasReason && o.CancelReason != order.ReasonTimeout && o.CancelReason != order.ReasonBuyer && o.CancelReason != order.ReasonOperator {
		t.Errorf("order %s: cancel_reason %q, want timeout, buyer or operator", o.ID, o.CancelReason)
	}
	if !o.Status.Valid() {
		t.Errorf("order %s: status %q", o.ID, o.Status)
	}
	if o.ExpiresAt.Before(o.CreatedAt) || o.CancelAfter.Before(o.ExpiresAt) {
		t.Errorf("order %s: created_at %v, expires_at %v, cancel_after %v out of order", o.ID, o.CreatedAt, o.ExpiresAt, o.CancelAfter)
	}
	if o.Version < 1 {
		t.Errorf("order %s: version %d", o.ID, o.Version)
	}
	return o
}

// wantOrder asserts a 2xx order response and returns the order.
func wantOrder(t *testing.T, r response, status int) order.Order {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	return checkOrder(t, r.Body)
}

type item struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

type createReq struct {
	ID             string   `json:"id,omitempty"`
	Items          []item   `json:"items"`
	AmountCents    int64    `json:"amount_cents"`
	Currency       string   `json:"currency,omitempty"`
	TimeoutSeconds *float64 `json:"timeout_seconds,omitempty"`
	ReservationID  string   `json:"reservation_id,omitempty"`
}

func secs(f float64) *float64 { return &f }

func (e *env) create(t *testing.T, req createReq, hdr ...string) order.Order {
	t.Helper()
	return wantOrder(t, e.do(t, "POST", "/v1/orders", req, hdr...), http.StatusCreated)
}

func (e *env) get(t *testing.T, id string) order.Order {
	t.Helper()
	return wantOrder(t, e.do(t, "GET", "/v1/orders/"+id, nil), http.StatusOK)
}

func (e *env) setStock(t *testing.T, sku string, available int64) {
	t.Helper()
	r := e.do(t, "PUT", "/v1/skus/"+sku, map[string]int64{"available": available})
	if r.Status != http.StatusOK {
		t.Fatalf("PUT /v1/skus/%s: %d %s", sku, r.Status, r.Body)
	}
}

func (e *env) sku(t *testing.T, sku string) store.SKU {
	t.Helper()
	r := e.do(t, "GET", "/v1/skus/"+sku, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/skus/%s: %d %s", sku, r.Status, r.Body)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("decode sku: %v", err)
	}
	if got := slices.Sorted(mapKeys(m)); !slices.Equal(got, []string{"available", "locked", "sku", "sold"}) {
		t.Errorf("sku has fields %v, want available, locked, sku, sold", got)
	}
	var s store.SKU
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatalf("decode sku: %v", err)
	}
	if s.SKU != sku {
		t.Errorf("GET /v1/skus/%s answered sku %q", sku, s.SKU)
	}
	return s
}

func wantSKU(t *testing.T, got store.SKU, available, locked, sold int64) {
	t.Helper()
	if got.Available != available || got.Locked != locked || got.Sold != sold {
		t.Errorf("sku %s: available/locked/sold = %d/%d/%d, want %d/%d/%d",
			got.SKU, got.Available, got.Locked, got.Sold, available, locked, sold)
	}
}

// snapshot is the raw state of some orders and SKUs, for "nothing changed" checks.
func (e *env) snapshot(t *testing.T, orderIDs []string, skus []string) []string {
	t.Helper()
	var out []string
	for _, id := range orderIDs {
		r := e.do(t, "GET", "/v1/orders/"+id, nil)
		out = append(out, fmt.Sprintf("order %s: %d %s", id, r.Status, r.Body))
	}
	for _, s := range skus {
		r := e.do(t, "GET", "/v1/skus/"+s, nil)
		out = append(out, fmt.Sprintf("sku %s: %d %s", s, r.Status, r.Body))
	}
	return out
}

func wantUnchanged(t *testing.T, before, after []string) {
	t.Helper()
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("changed:\n before %s\n after  %s", before[i], after[i])
		}
	}
}

type notifyReq struct {
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	Status      string `json:"status"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency,omitempty"`
}

func (e *env) notify(t *testing.T, body []byte, signature string) response {
	t.Helper()
	return e.do(t, "POST", "/v1/payments/notify", body, payment.SignatureHeader, signature)
}

func (e *env) notifySigned(t *testing.T, n notifyReq) response {
	t.Helper()
	body, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	// Each call is a new message, as a gateway's retry is: a distinct
	// timestamp (inside the tolerance), so it is not taken for a replay.
	at := e.base.Add(-time.Duration(e.signed.Add(1)%240) * time.Second)
	return e.notify(t, body, payment.Sign(e.secret, at, body))
}

// wantNotify asserts a 200 callback answer with this result and returns its order.
func wantNotify(t *testing.T, r response, result string) order.Order {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("notify: status %d, want 200: %s", r.Status, r.Body)
	}
	var b struct {
		Result string          `json:"result"`
		Order  json.RawMessage `json:"order"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("decode notify answer: %v: %s", err, r.Body)
	}
	if b.Result != result {
		t.Errorf("notify result %q, want %q", b.Result, result)
	}
	return checkOrder(t, b.Order)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ids(os []order.Order) []string {
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = o.ID
	}
	return out
}

// ---------------------------------------------------------------------------
// POST /v1/orders
// ---------------------------------------------------------------------------

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(fakeEpoch)
	e := newEnv(t, envConfig{Clock: clk, Grace: 90 * time.Second})
	e.setStock(t, "apple", 10)
	e.setStock(t, "pear", 5)

	t.Run("a full request makes a PENDING order and reserves its stock", func(t *testing.T) {
		r := e.do(t, "POST", "/v1/orders", createReq{
			ID: "ord-1", Items: []item{{"apple", 3}, {"pear", 2}}, AmountCents: 1299, Currency: "EUR", TimeoutSeconds: secs(120),
		})
		o := wantOrder(t, r, http.StatusCreated)
		if loc := r.Header.Get("Location"); loc != "/v1/orders/ord-1" {
			t.Errorf("Location %q, want /v1/orders/ord-1", loc)
		}
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("a first request is marked Idempotent-Replayed")
		}
		if o.ID != "ord-1" || o.Status != order.Pending || o.AmountCents != 1299 || o.Currency != "EUR" ||
			o.PaymentAttempts != 0 || o.RefundRequired || o.Version != 1 {
			t.Errorf("created order = %+v", o)
		}
		if !slices.Equal(o.Items, []order.Item{{SKU: "apple", Qty: 3}, {SKU: "pear", Qty: 2}}) {
			t.Errorf("items = %v", o.Items)
		}
		var times struct {
			CreatedAt   string `json:"created_at"`
			ExpiresAt   string `json:"expires_at"`
			CancelAfter string `json:"cancel_after"`
		}
		if err := json.Unmarshal(r.Body, &times); err != nil {
			t.Fatal(err)
		}
		// The fake clock's time, plus 120 s of timeout, plus 90 s of grace.
		if times.CreatedAt != "2031-05-06T07:08:09.123Z" || times.ExpiresAt != "2031-05-06T07:10:09.123Z" ||
			times.CancelAfter != "2031-05-06T07:11:39.123Z" {
			t.Errorf("times = %+v", times)
		}
		wantSKU(t, e.sku(t, "apple"), 7, 3, 0)
		wantSKU(t, e.sku(t, "pear"), 3, 2, 0)
		if got := e.get(t, "ord-1"); got.Version != o.Version || got.Status != order.Pending {
			t.Errorf("GET after create = %+v", got)
		}
	})

	t.Run("defaults: generated id, USD, 15 minute timeout", func(t *testing.T) {
		o := e.create(t, createReq{Items: []item{{"apple", 1}}, AmountCents: 0})
		if o.ID == "" || o.Currency != "USD" {
			t.Errorf("defaults: id %q currency %q", o.ID, o.Currency)
		}
		if d := o.ExpiresAt.Sub(o.CreatedAt); d != 15*time.Minute {
			t.Errorf("default timeout %s, want 15m", d)
		}
		if d := o.CancelAfter.Sub(o.ExpiresAt); d != 90*time.Second {
			t.Errorf("grace %s, want 90s", d)
		}
		o2 := e.create(t, createReq{Items: []item{{"apple", 1}}, AmountCents: 0})
		if o2.ID == o.ID {
			t.Errorf("two orders got the same generated id %q", o.ID)
		}
	})

	t.Run("fractional timeout_seconds keep their milliseconds", func(t *testing.T) {
		o := e.create(t, createReq{Items: []item{{"apple", 1}}, AmountCents: 1, TimeoutSeconds: secs(0.25)})
		if d := o.ExpiresAt.Sub(o.CreatedAt); d != 250*time.Millisecond {
			t.Errorf("timeout %s, want 250ms", d)
		}
	})

	t.Run("a duplicate id is 409 order_exists and reserves nothing", func(t *testing.T) {
		before := e.sku(t, "apple")
		r := e.do(t, "POST", "/v1/orders", createReq{ID: "ord-1", Items: []item{{"apple", 1}}, AmountCents: 1})
		wantError(t, r, http.StatusConflict, "order_exists")
		if after := e.sku(t, "apple"); after != before {
			t.Errorf("sku changed by a refused order: %+v -> %+v", before, after)
		}
		if o := e.get(t, "ord-1"); o.AmountCents != 1299 {
			t.Errorf("the existing order changed: %+v", o)
		}
	})
}

func TestCreateOrderInsufficientStock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	e.setStock(t, "b", 2)
	cases := []struct {
		name  string
		items []item
	}{
		{"the second item is short", []item{{"a", 4}, {"b", 3}}},
		{"the first item is short", []item{{"b", 3}, {"a", 4}}},
		{"an unknown sku", []item{{"a", 4}, {"nope", 1}}},
		{"all stock but one unit too many", []item{{"a", 11}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "short-" + strconv.Itoa(i)
			r := e.do(t, "POST", "/v1/orders", createReq{ID: id, Items: c.items, AmountCents: 100})
			wantError(t, r, http.StatusConflict, "insufficient_stock")
			wantSKU(t, e.sku(t, "a"), 10, 0, 0)
			wantSKU(t, e.sku(t, "b"), 2, 0, 0)
			wantError(t, e.do(t, "GET", "/v1/orders/"+id, nil), http.StatusNotFound, "order_not_found")
			wantError(t, e.do(t, "GET", "/v1/skus/nope", nil), http.StatusNotFound, "sku_not_found")
		})
	}
	t.Run("exactly the stock left succeeds", func(t *testing.T) {
		e.create(t, createReq{Items: []item{{"a", 10}, {"b", 2}}, AmountCents: 1})
		wantSKU(t, e.sku(t, "a"), 0, 10, 0)
		wantSKU(t, e.sku(t, "b"), 0, 2, 0)
		wantError(t, e.do(t, "POST", "/v1/orders", createReq{Items: []item{{"a", 1}}, AmountCents: 1}),
			http.StatusConflict, "insufficient_stock")
	})
}

func TestCreateOrderInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 100)
	e.setStock(t, "b", 100)
	manyItems := make([]string, 101)
	for i := range manyItems {
		manyItems[i] = fmt.Sprintf(`{"sku":"s%d","qty":1}`, i)
	}
	const ok = `"items":[{"sku":"a","qty":1}],"amount_cents":100`
	cases := []struct {
		name string
		body string
		hdr  []string
		code string
	}{
		{"empty body", ``, nil, "invalid_json"},
		{"blank body", " \n\t", nil, "invalid_json"},
		{"malformed JSON", `{"items":[`, nil, "invalid_json"},
		{"not JSON at all", `items=a`, nil, "invalid_json"},
		{"a JSON array", `[]`, nil, "invalid_json"},
		{"a JSON string", `"order"`, nil, "invalid_json"},
		{"a second object after the first", `{` + ok + `}{}`, nil, "invalid_json"},
		{"garbage after the object", `{` + ok + `} x`, nil, "invalid_json"},
		{"null body", `null`, nil, "invalid_field"},
		{"an unknown field", `{` + ok + `,"colour":"red"}`, nil, "invalid_field"},
		{"an unknown item field", `{"items":[{"sku":"a","qty":1,"price":3}],"amount_cents":1}`, nil, "invalid_field"},
		{"items missing", `{"amount_cents":100}`, nil, "invalid_field"},
		{"items null", `{"items":null,"amount_cents":100}`, nil, "invalid_field"},
		{"items empty", `{"items":[],"amount_cents":100}`, nil, "invalid_field"},
		{"items an object", `{"items":{"sku":"a","qty":1},"amount_cents":100}`, nil, "invalid_field"},
		{"item not an object", `{"items":["a"],"amount_cents":100}`, nil, "invalid_field"},
		{"item null", `{"items":[null],"amount_cents":100}`, nil, "invalid_field"},
		{"sku missing", `{"items":[{"qty":1}],"amount_cents":100}`, nil, "invalid_field"},
		{"sku empty", `{"items":[{"sku":"","qty":1}],"amount_cents":100}`, nil, "invalid_field"},
		{"sku a number", `{"items":[{"sku":7,"qty":1}],"amount_cents":100}`, nil, "invalid_field"},
		{"sku with a space", `{"items":[{"sku":"a b","qty":1}],"amount_cents":100}`, nil, "invalid_field"},
		{"sku too long", `{"items":[{"sku":"` + strings.Repeat("a", 65) + `","qty":1}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty missing", `{"items":[{"sku":"a"}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty zero", `{"items":[{"sku":"a","qty":0}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty negative", `{"items":[{"sku":"a","qty":-1}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty fractional", `{"items":[{"sku":"a","qty":1.5}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty a string", `{"items":[{"sku":"a","qty":"1"}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty over the limit", `{"items":[{"sku":"a","qty":1000001}],"amount_cents":100}`, nil, "invalid_field"},
		{"qty overflowing int64", `{"items":[{"sku":"a","qty":99999999999999999999}],"amount_cents":100}`, nil, "invalid_field"},
		{"duplicate sku", `{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1},{"sku":"a","qty":2}],"amount_cents":100}`, nil, "invalid_field"},
		{"too many items", `{"items":[` + strings.Join(manyItems, ",") + `],"amount_cents":100}`, nil, "invalid_field"},
		{"amount missing", `{"items":[{"sku":"a","qty":1}]}`, nil, "invalid_field"},
		{"amount null", `{"items":[{"sku":"a","qty":1}],"amount_cents":null}`, nil, "invalid_field"},
		{"amount negative", `{"items":[{"sku":"a","qty":1}],"amount_cents":-1}`, nil, "invalid_field"},
		{"amount a string", `{"items":[{"sku":"a","qty":1}],"amount_cents":"100"}`, nil, "invalid_field"},
		{"amount fractional", `{"items":[{"sku":"a","qty":1}],"amount_cents":1.5}`, nil, "invalid_field"},
		{"amount beyond 2^53", `{"items":[{"sku":"a","qty":1}],"amount_cents":9007199254740993}`, nil, "invalid_field"},
		{"currency lowercase", `{` + ok + `,"currency":"usd"}`, nil, "invalid_field"},
		{"currency too long", `{` + ok + `,"currency":"EURO"}`, nil, "invalid_field"},
		{"currency empty", `{` + ok + `,"currency":""}`, nil, "invalid_field"},
		{"currency a number", `{` + ok + `,"currency":978}`, nil, "invalid_field"},
		{"timeout zero", `{` + ok + `,"timeout_seconds":0}`, nil, "invalid_field"},
		{"timeout negative", `{` + ok + `,"timeout_seconds":-5}`, nil, "invalid_field"},
		{"timeout under a millisecond", `{` + ok + `,"timeout_seconds":0.0004}`, nil, "invalid_field"},
		{"timeout a string", `{` + ok + `,"timeout_seconds":"60"}`, nil, "invalid_field"},
		{"timeout over the maximum", `{` + ok + `,"timeout_seconds":604801}`, nil, "invalid_field"},
		{"timeout beyond a Duration", `{` + ok + `,"timeout_seconds":1e300}`, nil, "invalid_field"},
		{"timeout out of float range", `{` + ok + `,"timeout_seconds":1e400}`, nil, "invalid_field"},
		{"id empty", `{"id":"",` + ok + `}`, nil, "invalid_field"},
		{"id with a slash", `{"id":"a/b",` + ok + `}`, nil, "invalid_field"},
		{"id starting with a dash", `{"id":"-a",` + ok + `}`, nil, "invalid_field"},
		{"id too long", `{"id":"` + strings.Repeat("x", 65) + `",` + ok + `}`, nil, "invalid_field"},
		{"id a number", `{"id":12,` + ok + `}`, nil, "invalid_field"},
		{"Idempotency-Key too long", `{` + ok + `}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, "invalid_field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantError(t, e.do(t, "POST", "/v1/orders", c.body, c.hdr...), http.StatusBadRequest, c.code)
		})
	}
	t.Cleanup(func() {
		// After every subtest: nothing was reserved and no order exists.
		wantSKU(t, e.sku(t, "a"), 100, 0, 0)
		wantSKU(t, e.sku(t, "b"), 100, 0, 0)
		r := e.do(t, "GET", "/v1/orders", nil)
		if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"orders":[]`)) {
			t.Errorf("refused requests left orders: %s", r.Body)
		}
	})
}

func TestCreateOrderBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	body := `{"items":[{"sku":"a","qty":1}],"amount_cents":100}`
	pad := func(n int) string { return body + strings.Repeat(" ", n-len(body)) }

	t.Run("a body of exactly 1 MiB is accepted", func(t *testing.T) {
		e.createRaw(t, pad(httpapi.MaxBodyBytes))
	})
	t.Run("one byte more is 413 body_too_large", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders", pad(httpapi.MaxBodyBytes+1)), http.StatusRequestEntityTooLarge, "body_too_large")
	})
	t.Run("a much larger body is 413 too", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders", pad(3*httpapi.MaxBodyBytes)), http.StatusRequestEntityTooLarge, "body_too_large")
	})
	t.Run("PUT /v1/skus refuses a large body", func(t *testing.T) {
		wantError(t, e.do(t, "PUT", "/v1/skus/a", `{"available":1}`+strings.Repeat(" ", httpapi.MaxBodyBytes)),
			http.StatusRequestEntityTooLarge, "body_too_large")
	})
	t.Run("the payment callback refuses a large body", func(t *testing.T) {
		big := []byte(`{"order_id":"x"}` + strings.Repeat(" ", httpapi.MaxBodyBytes))
		wantError(t, e.notify(t, big, payment.Sign(testSecret, time.Now(), big)), http.StatusRequestEntityTooLarge, "body_too_large")
	})
	wantSKU(t, e.sku(t, "a"), 9, 1, 0)
}

func (e *env) createRaw(t *testing.T, raw string) order.Order {
	t.Helper()
	return wantOrder(t, e.do(t, "POST", "/v1/orders", raw), http.StatusCreated)
}

func TestCreateOrderIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 100)
	e.setStock(t, "b", 100)

	t.Run("the same key returns the same order and reserves once", func(t *testing.T) {
		req := createReq{Items: []item{{"a", 3}, {"b", 1}}, AmountCents: 500}
		first := e.do(t, "POST", "/v1/orders", req, "Idempotency-Key", "key-1")
		o1 := wantOrder(t, first, http.StatusCreated)
		for range 3 {
			again := e.do(t, "POST", "/v1/orders", req, "Idempotency-Key", "key-1")
			o2 := wantOrder(t, again, http.StatusCreated)
			if o2.ID != o1.ID || !o2.CreatedAt.Equal(o1.CreatedAt) {
				t.Errorf("replay answered order %s created %v, want %s created %v", o2.ID, o2.CreatedAt, o1.ID, o1.CreatedAt)
			}
			if again.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("a replay lacks Idempotent-Replayed: true")
			}
		}
		wantSKU(t, e.sku(t, "a"), 97, 3, 0)
		wantSKU(t, e.sku(t, "b"), 99, 1, 0)
	})

	t.Run("a replay answers the order as it is now", func(t *testing.T) {
		req := createReq{Items: []item{{"a", 1}}, AmountCents: 10}
		o := e.create(t, req, "Idempotency-Key", "key-now")
		wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/cancel", nil), http.StatusOK)
		again := e.create(t, req, "Idempotency-Key", "key-now")
		if again.ID != o.ID || again.Status != order.Cancelled {
			t.Errorf("replay after cancel = %s %s, want %s CANCELLED", again.ID, again.Status, o.ID)
		}
	})

	t.Run("the same key with a different body is 422 and changes nothing", func(t *testing.T) {
		req := createReq{ID: "idem-2", Items: []item{{"a", 2}}, AmountCents: 200}
		e.create(t, req, "Idempotency-Key", "key-2")
		before := e.snapshot(t, []string{"idem-2"}, []string{"a", "b"})
		for _, other := range []createReq{
			{ID: "idem-2", Items: []item{{"a", 3}}, AmountCents: 200},
			{ID: "idem-2", Items: []item{{"a", 2}}, AmountCents: 201},
			{ID: "idem-2", Items: []item{{"b", 2}}, AmountCents: 200},
			{ID: "idem-2", Items: []item{{"a", 2}}, AmountCents: 200, Currency: "EUR"},
			{ID: "idem-2", Items: []item{{"a", 2}}, AmountCents: 200, TimeoutSeconds: secs(60)},
			{ID: "idem-other", Items: []item{{"a", 2}}, AmountCents: 200},
			{Items: []item{{"a", 2}}, AmountCents: 200},
		} {
			r := e.do(t, "POST", "/v1/orders", other, "Idempotency-Key", "key-2")
			wantError(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
		}
		wantUnchanged(t, before, e.snapshot(t, []string{"idem-2"}, []string{"a", "b"}))
		wantError(t, e.do(t, "GET", "/v1/orders/idem-other", nil), http.StatusNotFound, "order_not_found")
	})

	t.Run("different keys make different orders", func(t *testing.T) {
		req := createReq{Items: []item{{"b", 1}}, AmountCents: 1}
		before := e.sku(t, "b")
		o1 := e.create(t, req, "Idempotency-Key", "key-3a")
		o2 := e.create(t, req, "Idempotency-Key", "key-3b")
		if o1.ID == o2.ID {
			t.Errorf("two keys gave one order %s", o1.ID)
		}
		wantSKU(t, e.sku(t, "b"), before.Available-2, before.Locked+2, before.Sold)
	})

	t.Run("a refused request does not burn its key", func(t *testing.T) {
		req := createReq{ID: "idem-4", Items: []item{{"a", 1}, {"b", 1000}}, AmountCents: 1}
		wantError(t, e.do(t, "POST", "/v1/orders", req, "Idempotency-Key", "key-4"), http.StatusConflict, "insufficient_stock")
		e.setStock(t, "b", 2000)
		o := e.create(t, req, "Idempotency-Key", "key-4")
		if o.ID != "idem-4" {
			t.Errorf("retry after a refusal made %s", o.ID)
		}
	})

	t.Run("concurrent requests with one key make one order", func(t *testing.T) {
		before := e.sku(t, "a")
		req := createReq{Items: []item{{"a", 5}}, AmountCents: 55}
		const n = 8
		got := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := e.do(t, "POST", "/v1/orders", req, "Idempotency-Key", "key-race")
				if r.Status != http.StatusCreated {
					t.Errorf("concurrent create: %d %s", r.Status, r.Body)
					return
				}
				got[i] = checkOrder(t, r.Body).ID
			})
		}
		wg.Wait()
		for _, id := range got {
			if id != got[0] {
				t.Fatalf("one key made several orders: %v", got)
			}
		}
		wantSKU(t, e.sku(t, "a"), before.Available-5, before.Locked+5, before.Sold)
	})
}

// ---------------------------------------------------------------------------
// GET /v1/orders/{id}, GET /v1/orders
// ---------------------------------------------------------------------------

func TestGetOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 5)
	o := e.create(t, createReq{ID: "g-1", Items: []item{{"a", 2}}, AmountCents: 7})
	got := e.get(t, "g-1")
	if got.ID != o.ID || got.Version != o.Version || !slices.Equal(got.Items, o.Items) || !got.ExpiresAt.Equal(o.ExpiresAt) {
		t.Errorf("GET = %+v, want %+v", got, o)
	}
	wantError(t, e.do(t, "GET", "/v1/orders/nope", nil), http.StatusNotFound, "order_not_found")
}

func TestListOrders(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(fakeEpoch)
	e := newEnv(t, envConfig{Clock: clk, Grace: time.Hour})
	e.setStock(t, "a", 1000)
	var all []order.Order
	status := map[string]order.Status{}
	for i := range 23 {
		// Groups of orders share a millisecond, so the (created_at, id) tie-break is exercised.
		if i%4 == 0 {
			clk.Advance(time.Millisecond)
		}
		o := e.create(t, createReq{ID: fmt.Sprintf("L%02d", (i*7)%23), Items: []item{{"a", 1}}, AmountCents: 1})
		switch i % 3 {
		case 1:
			o = wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/cancel", nil), http.StatusOK)
		case 2:
			o = wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", nil), http.StatusOK)
		}
		status[o.ID] = o.Status
		all = append(all, o)
	}
	// Newest first: created_at descending, then id descending.
	slices.SortFunc(all, func(a, b order.Order) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})

	walk := func(t *testing.T, query string) []order.Order {
		t.Helper()
		var out []order.Order
		cursor := ""
		for page := 0; ; page++ {
			if page > 50 {
				t.Fatalf("pagination does not end")
			}
			q := query
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			r := e.do(t, "GET", "/v1/orders?"+q, nil)
			if r.Status != http.StatusOK {
				t.Fatalf("GET /v1/orders?%s: %d %s", q, r.Status, r.Body)
			}
			var b struct {
				Orders     []json.RawMessage `json:"orders"`
				NextCursor *string           `json:"next_cursor"`
			}
			if err := json.Unmarshal(r.Body, &b); err != nil {
				t.Fatalf("decode list: %v", err)
			}
			if b.Orders == nil || b.NextCursor == nil {
				t.Fatalf("list lacks orders or next_cursor: %s", r.Body)
			}
			for _, raw := range b.Orders {
				out = append(out, checkOrder(t, raw))
			}
			if *b.NextCursor == "" {
				return out
			}
			cursor = *b.NextCursor
		}
	}

	for _, limit := range []int{1, 5, 7, 22, 23, 24, 500} {
		t.Run(fmt.Sprintf("limit %d walks every order once, newest first", limit), func(t *testing.T) {
			t.Parallel()
			got := walk(t, "limit="+strconv.Itoa(limit))
			if !slices.Equal(ids(got), ids(all)) {
				t.Errorf("walk = %v\nwant %v", ids(got), ids(all))
			}
		})
	}
	t.Run("no limit returns everything on one page", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, "GET", "/v1/orders", nil)
		var b struct {
			Orders     []order.Order `json:"orders"`
			NextCursor string        `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil || r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if len(b.Orders) != 23 || b.NextCursor != "" {
			t.Errorf("default page: %d orders, cursor %q", len(b.Orders), b.NextCursor)
		}
	})
	for _, s := range order.Statuses {
		t.Run("status "+string(s)+" walks exactly those orders", func(t *testing.T) {
			t.Parallel()
			var want []string
			for _, o := range all {
				if status[o.ID] == s {
					want = append(want, o.ID)
				}
			}
			got := walk(t, "status="+string(s)+"&limit=3")
			if !slices.Equal(ids(got), want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("walk = %v\nwant %v", ids(got), want)
			}
			for _, o := range got {
				if o.Status != s {
					t.Errorf("status filter %s returned %s %s", s, o.ID, o.Status)
				}
			}
		})
	}
	bad := []struct{ query, code string }{
		{"status=pending", "invalid_field"},
		{"status=EXPIRED", "invalid_field"},
		{"limit=0", "invalid_field"},
		{"limit=-1", "invalid_field"},
		{"limit=501", "invalid_field"},
		{"limit=ten", "invalid_field"},
		{"limit=1.5", "invalid_field"},
		{"cursor=%21%21%21", "invalid_cursor"},
		{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("no-separator")), "invalid_cursor"},
		{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("notanumber|L01")), "invalid_cursor"},
	}
	for _, c := range bad {
		t.Run("bad query "+c.query, func(t *testing.T) {
			t.Parallel()
			wantError(t, e.do(t, "GET", "/v1/orders?"+c.query, nil), http.StatusBadRequest, c.code)
		})
	}
}

// ---------------------------------------------------------------------------
// POST /v1/orders/{id}/pay and /cancel
// ---------------------------------------------------------------------------

func TestPay(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(fakeEpoch)
	e := newEnv(t, envConfig{Clock: clk, Grace: time.Hour})
	e.setStock(t, "a", 100)
	mk := func(t *testing.T, id string) order.Order {
		return e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(60)})
	}

	t.Run("PENDING before expires_at moves to PAYING", func(t *testing.T) {
		o := mk(t, "p-1")
		r := e.do(t, "POST", "/v1/orders/p-1/pay", nil)
		p := wantOrder(t, r, http.StatusOK)
		if p.Status != order.Paying || p.Version != o.Version+1 {
			t.Errorf("after pay: %s v%d, want PAYING v%d", p.Status, p.Version, o.Version+1)
		}
		// pay_before: the expires_at to give the gateway as its own expiry,
		// in the API's time format (checkOrder: equal to expires_at).
		var answer struct {
			PayBefore string `json:"pay_before"`
		}
		if err := json.Unmarshal(r.Body, &answer); err != nil || answer.PayBefore != order.FormatTime(o.ExpiresAt) {
			t.Errorf("pay_before %q, want %q (%v): %s", answer.PayBefore, order.FormatTime(o.ExpiresAt), err, r.Body)
		}
		if g := e.do(t, "GET", "/v1/orders/p-1", nil); strings.Contains(string(g.Body), "pay_before") {
			t.Errorf("GET shows pay_before: %s", g.Body)
		}
		t.Run("a second pay answers 200 and changes nothing", func(t *testing.T) {
			again := wantOrder(t, e.do(t, "POST", "/v1/orders/p-1/pay", nil), http.StatusOK)
			if again.Status != order.Paying || again.Version != p.Version {
				t.Errorf("second pay: %s v%d, want PAYING v%d", again.Status, again.Version, p.Version)
			}
		})
		t.Run("a PAYING order cannot be cancelled by the buyer", func(t *testing.T) {
			wantError(t, e.do(t, "POST", "/v1/orders/p-1/cancel", nil), http.StatusConflict, "order_not_pending")
			wantSKU(t, e.sku(t, "a"), 99, 1, 0)
		})
	})

	t.Run("one millisecond before expires_at is still in time", func(t *testing.T) {
		o := mk(t, "p-edge")
		clk.Set(o.ExpiresAt.Add(-time.Millisecond))
		wantOrder(t, e.do(t, "POST", "/v1/orders/p-edge/pay", nil), http.StatusOK)
	})

	t.Run("at or after expires_at is 409 order_expired", func(t *testing.T) {
		o := mk(t, "p-late")
		clk.Set(o.ExpiresAt) // expires_at > now is the guard: equal is expired
		before := e.snapshot(t, []string{"p-late"}, []string{"a"})
		wantError(t, e.do(t, "POST", "/v1/orders/p-late/pay", nil), http.StatusConflict, "order_expired")
		clk.Advance(time.Minute)
		wantError(t, e.do(t, "POST", "/v1/orders/p-late/pay", nil), http.StatusConflict, "order_expired")
		wantUnchanged(t, before, e.snapshot(t, []string{"p-late"}, []string{"a"}))
		t.Run("a PAYING order past expires_at still answers 200", func(t *testing.T) {
			again := wantOrder(t, e.do(t, "POST", "/v1/orders/p-1/pay", nil), http.StatusOK)
			if again.Status != order.Paying {
				t.Errorf("status %s", again.Status)
			}
		})
		t.Run("the buyer may still cancel an expired PENDING order", func(t *testing.T) {
			c := wantOrder(t, e.do(t, "POST", "/v1/orders/p-late/cancel", nil), http.StatusOK)
			if c.Status != order.Cancelled || c.CancelReason != order.ReasonBuyer {
				t.Errorf("cancel: %s %s", c.Status, c.CancelReason)
			}
		})
	})

	t.Run("PAID and CANCELLED are 409 order_not_pending", func(t *testing.T) {
		paid := mk(t, "p-paid")
		wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "p-paid", PaymentID: "pay-1", Status: "SUCCEEDED", AmountCents: paid.AmountCents}), "paid")
		mk(t, "p-cancelled")
		wantOrder(t, e.do(t, "POST", "/v1/orders/p-cancelled/cancel", nil), http.StatusOK)
		before := e.snapshot(t, []string{"p-paid", "p-cancelled"}, []string{"a"})
		wantError(t, e.do(t, "POST", "/v1/orders/p-paid/pay", nil), http.StatusConflict, "order_not_pending")
		wantError(t, e.do(t, "POST", "/v1/orders/p-cancelled/pay", nil), http.StatusConflict, "order_not_pending")
		wantUnchanged(t, before, e.snapshot(t, []string{"p-paid", "p-cancelled"}, []string{"a"}))
	})

	t.Run("an unknown order is 404", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders/nope/pay", nil), http.StatusNotFound, "order_not_found")
	})
}

// TestPayExpiredWallClock is the expired case on the wall clock: a 50 ms
// payment window, a grace long enough that the timer does not cancel first.
func TestPayExpiredWallClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 3)
	o := e.create(t, createReq{ID: "w-1", Items: []item{{"a", 1}}, AmountCents: 42, TimeoutSeconds: secs(0.05)})
	if d := o.ExpiresAt.Sub(o.CreatedAt); d != 50*time.Millisecond {
		t.Fatalf("timeout %s, want 50ms", d)
	}
	waitFor(t, "expires_at to pass", 5*time.Second, func() bool { return time.Now().After(o.ExpiresAt.Add(time.Millisecond)) })
	wantError(t, e.do(t, "POST", "/v1/orders/w-1/pay", nil), http.StatusConflict, "order_expired")
	if got := e.get(t, "w-1"); got.Status != order.Pending || got.Version != o.Version {
		t.Errorf("after a refused pay: %s v%d", got.Status, got.Version)
	}
	// A payment that succeeded at the gateway and calls back within the grace still counts.
	p := wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "w-1", PaymentID: "late-1", Status: "SUCCEEDED", AmountCents: 42}), "paid")
	if p.Status != order.Paid {
		t.Errorf("late success within grace: %s", p.Status)
	}
	wantSKU(t, e.sku(t, "a"), 2, 0, 1)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	e.setStock(t, "b", 10)

	t.Run("the buyer cancels a PENDING order and the stock goes back", func(t *testing.T) {
		o := e.create(t, createReq{ID: "c-1", Items: []item{{"a", 4}, {"b", 1}}, AmountCents: 1})
		wantSKU(t, e.sku(t, "a"), 6, 4, 0)
		c := wantOrder(t, e.do(t, "POST", "/v1/orders/c-1/cancel", nil), http.StatusOK)
		if c.Status != order.Cancelled || c.CancelReason != order.ReasonBuyer || c.CancelledAt.IsZero() || c.Version != o.Version+1 {
			t.Errorf("after cancel: %+v", c)
		}
		wantSKU(t, e.sku(t, "a"), 10, 0, 0)
		wantSKU(t, e.sku(t, "b"), 10, 0, 0)
		if got := e.get(t, "c-1"); got.Status != order.Cancelled || got.CancelReason != order.ReasonBuyer {
			t.Errorf("GET after cancel: %s %s", got.Status, got.CancelReason)
		}
		t.Run("a second cancel is 409 and releases nothing twice", func(t *testing.T) {
			wantError(t, e.do(t, "POST", "/v1/orders/c-1/cancel", nil), http.StatusConflict, "order_not_pending")
			wantSKU(t, e.sku(t, "a"), 10, 0, 0)
		})
	})

	t.Run("a PAID order cannot be cancelled", func(t *testing.T) {
		e.create(t, createReq{ID: "c-paid", Items: []item{{"a", 1}}, AmountCents: 9})
		wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "c-paid", PaymentID: "x", Status: "SUCCEEDED", AmountCents: 9}), "paid")
		before := e.snapshot(t, []string{"c-paid"}, []string{"a"})
		wantError(t, e.do(t, "POST", "/v1/orders/c-paid/cancel", nil), http.StatusConflict, "order_not_pending")
		wantUnchanged(t, before, e.snapshot(t, []string{"c-paid"}, []string{"a"}))
	})

	t.Run("an unknown order is 404", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders/nope/cancel", nil), http.StatusNotFound, "order_not_found")
	})

	t.Run("racing pay and cancel: exactly one wins", func(t *testing.T) {
		for i := range 10 {
			id := fmt.Sprintf("race-%d", i)
			e.create(t, createReq{ID: id, Items: []item{{"b", 1}}, AmountCents: 1})
			var pay, cancel response
			var wg sync.WaitGroup
			wg.Go(func() { pay = e.do(t, "POST", "/v1/orders/"+id+"/pay", nil) })
			wg.Go(func() { cancel = e.do(t, "POST", "/v1/orders/"+id+"/cancel", nil) })
			wg.Wait()
			final := e.get(t, id)
			switch {
			case pay.Status == 200 && cancel.Status == 409:
				if final.Status != order.Paying {
					t.Errorf("%s: pay won but the order is %s", id, final.Status)
				}
			case cancel.Status == 200 && pay.Status == 409:
				if final.Status != order.Cancelled {
					t.Errorf("%s: cancel won but the order is %s", id, final.Status)
				}
				wantError(t, pay, http.StatusConflict, "order_not_pending")
			default:
				t.Errorf("%s: pay %d %s, cancel %d %s", id, pay.Status, pay.Body, cancel.Status, cancel.Body)
			}
		}
	})
}

// TestTimeoutCancel runs the cancel loop for real: an unpaid order is
// cancelled for timeout, its stock goes back, and the API reports it.
func TestTimeoutCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: 0})
	e.setStock(t, "a", 5)
	o := e.create(t, createReq{ID: "t-1", Items: []item{{"a", 2}}, AmountCents: 300, TimeoutSeconds: secs(0.05)})
	var got order.Order
	waitFor(t, "the timer to cancel t-1", 10*time.Second, func() bool {
		got = e.get(t, "t-1")
		return got.Status == order.Cancelled
	})
	if got.CancelReason != order.ReasonTimeout || got.CancelledAt.Before(got.CancelAfter) || got.Version != o.Version+1 {
		t.Errorf("timed out order: %+v", got)
	}
	wantSKU(t, e.sku(t, "a"), 5, 0, 0)
	wantError(t, e.do(t, "POST", "/v1/orders/t-1/pay", nil), http.StatusConflict, "order_not_pending")
	wantError(t, e.do(t, "POST", "/v1/orders/t-1/cancel", nil), http.StatusConflict, "order_not_pending")

	// Money arrives after the cancel: the order stays cancelled, flagged for a refund.
	r := wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "t-1", PaymentID: "late", Status: "SUCCEEDED", AmountCents: 300}), "refund_required")
	if r.Status != order.Cancelled || !r.RefundRequired || r.CancelReason != order.ReasonTimeout {
		t.Errorf("after a late success: %+v", r)
	}
	wantSKU(t, e.sku(t, "a"), 5, 0, 0)
}

// ---------------------------------------------------------------------------
// POST /v1/payments/notify
// ---------------------------------------------------------------------------

func TestNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 100)
	n := 0
	mk := func(t *testing.T) order.Order {
		n++
		return e.create(t, createReq{ID: fmt.Sprintf("n-%d", n), Items: []item{{"a", 2}}, AmountCents: 1500})
	}
	succeeded := func(o order.Order) notifyReq {
		return notifyReq{OrderID: o.ID, PaymentID: "pay-" + o.ID, Status: "SUCCEEDED", AmountCents: o.AmountCents}
	}

	t.Run("SUCCEEDED on PENDING: PAID, stock sold", func(t *testing.T) {
		o := mk(t)
		before := e.sku(t, "a")
		p := wantNotify(t, e.notifySigned(t, succeeded(o)), "paid")
		if p.Status != order.Paid || p.PaidAt.IsZero() || p.PaymentID != "pay-"+o.ID || p.Version != o.Version+1 {
			t.Errorf("paid order: %+v", p)
		}
		wantSKU(t, e.sku(t, "a"), before.Available, before.Locked-2, before.Sold+2)
		t.Run("a duplicate SUCCEEDED answers 200 and changes nothing", func(t *testing.T) {
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			d := wantNotify(t, e.notifySigned(t, succeeded(o)), "no_change")
			if d.Version != p.Version || d.Status != order.Paid {
				t.Errorf("duplicate: %s v%d", d.Status, d.Version)
			}
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
		t.Run("FAILED of the attempt that paid answers 200 conflict: counted on the attempt, nothing else changes", func(t *testing.T) {
			before, snap := e.get(t, o.ID), e.snapshot(t, nil, []string{"a"})
			f := succeeded(o)
			f.Status = "FAILED"
			wantNotify(t, e.notifySigned(t, f), "conflict")
			after := e.get(t, o.ID)
			if after.Status != order.Paid || after.Version != before.Version || len(after.Payments) != 1 ||
				after.Payments[0].Status != order.PaymentSucceeded || after.Payments[0].Conflicts != 1 {
				t.Errorf("after a FAILED of the paying attempt: %+v, want PAID, version %d, the attempt SUCCEEDED with 1 conflict", after, before.Version)
			}
			wantUnchanged(t, snap, e.snapshot(t, nil, []string{"a"}))
		})
		t.Run("a different amount on a PAID order is money to refund", func(t *testing.T) {
			m := succeeded(o)
			m.AmountCents++
			m.PaymentID = "other-" + o.ID
			r := wantNotify(t, e.notifySigned(t, m), "refund_required")
			if r.Status != order.Paid || !r.RefundRequired || r.PaymentID != p.PaymentID {
				t.Errorf("after a second payment of another amount: %+v", r)
			}
		})
	})

	t.Run("SUCCEEDED on PAYING: PAID, stock sold", func(t *testing.T) {
		o := mk(t)
		wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", nil), http.StatusOK)
		before := e.sku(t, "a")
		p := wantNotify(t, e.notifySigned(t, succeeded(o)), "paid")
		if p.Status != order.Paid {
			t.Errorf("status %s", p.Status)
		}
		wantSKU(t, e.sku(t, "a"), before.Available, before.Locked-2, before.Sold+2)
	})

	t.Run("a different amount is refund_required: recorded, flagged, the status kept", func(t *testing.T) {
		pending := mk(t)
		paying := mk(t)
		wantOrder(t, e.do(t, "POST", "/v1/orders/"+paying.ID+"/pay", nil), http.StatusOK)
		for _, o := range []order.Order{pending, paying} {
			before := e.get(t, o.ID)
			for i, amt := range []int64{o.AmountCents - 1, o.AmountCents + 1, 0} {
				m := succeeded(o)
				m.AmountCents, m.PaymentID = amt, fmt.Sprintf("odd-%d-%s", i, o.ID)
				r := wantNotify(t, e.notifySigned(t, m), "refund_required")
				if r.Status != before.Status || !r.RefundRequired {
					t.Errorf("%s after a payment of %d: %+v", o.ID, amt, r)
				}
			}
			if got := e.get(t, o.ID); len(got.Payments) < 3 {
				t.Errorf("%s: payments %+v, want the three to refund listed", o.ID, got.Payments)
			}
		}
	})

	t.Run("SUCCEEDED on CANCELLED: stays CANCELLED, refund_required", func(t *testing.T) {
		o := mk(t)
		c := wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/cancel", nil), http.StatusOK)
		before := e.sku(t, "a")
		r := wantNotify(t, e.notifySigned(t, succeeded(o)), "refund_required")
		if r.Status != order.Cancelled || !r.RefundRequired || r.CancelReason != order.ReasonBuyer || r.Version != c.Version+1 {
			t.Errorf("after success on cancelled: %+v", r)
		}
		if got := e.get(t, o.ID); !got.RefundRequired || got.Status != order.Cancelled {
			t.Errorf("GET: %+v", got)
		}
		wantSKU(t, e.sku(t, "a"), before.Available, before.Locked, before.Sold)
		t.Run("a duplicate changes nothing", func(t *testing.T) {
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			wantNotify(t, e.notifySigned(t, succeeded(o)), "no_change")
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
		t.Run("a different amount on a CANCELLED order is refund_required", func(t *testing.T) {
			o2 := mk(t)
			wantOrder(t, e.do(t, "POST", "/v1/orders/"+o2.ID+"/cancel", nil), http.StatusOK)
			m := succeeded(o2)
			m.AmountCents = 1
			if r := wantNotify(t, e.notifySigned(t, m), "refund_required"); r.Status != order.Cancelled || !r.RefundRequired {
				t.Errorf("after a payment of another amount: %+v", r)
			}
		})
	})

	t.Run("FAILED on PAYING: back to PENDING, attempt counted, payable again", func(t *testing.T) {
		o := mk(t)
		pay := func(paymentID string) order.Order {
			return wantOrder(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", map[string]string{"payment_id": paymentID}), http.StatusOK)
		}
		failed := func(paymentID string) notifyReq {
			f := succeeded(o)
			f.Status, f.PaymentID = "FAILED", paymentID
			return f
		}
		p := pay("try-1")
		before := e.sku(t, "a")
		got := wantNotify(t, e.notifySigned(t, failed("try-1")), "failed")
		if got.Status != order.Pending || got.PaymentAttempts != 1 || got.Version != p.Version+1 {
			t.Errorf("after FAILED: %s attempts %d v%d", got.Status, got.PaymentAttempts, got.Version)
		}
		wantSKU(t, e.sku(t, "a"), before.Available, before.Locked, before.Sold)
		wantError(t, e.do(t, "POST", "/v1/orders/"+o.ID+"/pay", map[string]string{"payment_id": "try-1"}), http.StatusConflict, "payment_id_used")
		pay("try-2")
		got = wantNotify(t, e.notifySigned(t, failed("try-2")), "failed")
		if got.PaymentAttempts != 2 {
			t.Errorf("second failure: attempts %d", got.PaymentAttempts)
		}
		t.Run("a FAILED of a superseded attempt changes nothing", func(t *testing.T) {
			pay("try-3")
			cur := pay("try-4") // the buyer switched cards: try-3 is superseded
			if cur.PaymentID != "try-4" || cur.Status != order.Paying {
				t.Fatalf("second attempt: %+v", cur)
			}
			if got := wantNotify(t, e.notifySigned(t, failed("try-3")), "no_change"); got.Status != order.Paying || got.PaymentID != "try-4" || got.Version != cur.Version {
				t.Errorf("attempt 1's FAILED re-delivered: %+v, want try-4 still PAYING, v%d", got, cur.Version)
			}
			g := e.get(t, o.ID)
			want := map[string]order.PaymentStatus{"try-1": order.PaymentFailed, "try-2": order.PaymentFailed, "try-3": order.PaymentFailed, "try-4": order.PaymentPending}
			if len(g.Payments) != len(want) {
				t.Fatalf("payments %+v, want %v", g.Payments, want)
			}
			for _, gp := range g.Payments {
				if want[gp.PaymentID] != gp.Status {
					t.Errorf("payment %s is %s, want %s", gp.PaymentID, gp.Status, want[gp.PaymentID])
				}
			}
			wantNotify(t, e.notifySigned(t, failed("try-4")), "failed")
		})
		t.Run("the same signed FAILED message replayed changes nothing", func(t *testing.T) {
			pay("try-5")
			body, _ := json.Marshal(failed("try-5"))
			sig := payment.Sign(e.secret, time.Now(), body)
			wantNotify(t, e.notify(t, body, sig), "failed")
			pay("try-6")
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			if got := wantNotify(t, e.notify(t, body, sig), "replayed"); got.Status != order.Paying {
				t.Errorf("replayed FAILED: the order is %s, want PAYING", got.Status)
			}
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
		t.Run("FAILED on PENDING changes nothing", func(t *testing.T) {
			f := failed("another-" + o.ID)
			if _, err := e.st.FailPayment(context.Background(), store.PaymentParams{OrderID: o.ID, PaymentID: "try-6"}); err != nil {
				t.Fatal(err) // PAYING → PENDING, so the callback below finds it PENDING
			}
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			wantNotify(t, e.notifySigned(t, f), "no_change")
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
	})

	t.Run("an unknown order is 404", func(t *testing.T) {
		for _, s := range []string{"SUCCEEDED", "FAILED"} {
			wantError(t, e.notifySigned(t, notifyReq{OrderID: "nope", PaymentID: "p", Status: s, AmountCents: 1}),
				http.StatusNotFound, "order_not_found")
		}
	})

	t.Run("a signed but invalid body is 400", func(t *testing.T) {
		o := mk(t)
		snap := e.snapshot(t, []string{o.ID}, []string{"a"})
		cases := map[string]string{
			"malformed":        `{"order_id":`,
			"empty":            ``,
			"unknown field":    `{"order_id":"` + o.ID + `","payment_id":"p","status":"SUCCEEDED","amount_cents":1500,"x":1}`,
			"no order_id":      `{"payment_id":"p","status":"SUCCEEDED","amount_cents":1500}`,
			"no payment_id":    `{"order_id":"` + o.ID + `","status":"SUCCEEDED","amount_cents":1500}`,
			"no status":        `{"order_id":"` + o.ID + `","payment_id":"p","amount_cents":1500}`,
			"no amount":        `{"order_id":"` + o.ID + `","payment_id":"p","status":"SUCCEEDED"}`,
			"unknown status":   `{"order_id":"` + o.ID + `","payment_id":"p","status":"MAYBE","amount_cents":1500}`,
			"lowercase status": `{"order_id":"` + o.ID + `","payment_id":"p","status":"succeeded","amount_cents":1500}`,
			"amount a string":  `{"order_id":"` + o.ID + `","payment_id":"p","status":"SUCCEEDED","amount_cents":"1500"}`,
			"payment_id too long": `{"order_id":"` + o.ID + `","payment_id":"` + strings.Repeat("p", 256) +
				`","status":"SUCCEEDED","amount_cents":1500}`,
		}
		for name, body := range cases {
			t.Run(name, func(t *testing.T) {
				b := []byte(body)
				r := e.notify(t, b, payment.Sign(e.secret, time.Now(), b))
				if r.Status != http.StatusBadRequest {
					t.Errorf("status %d, want 400: %s", r.Status, r.Body)
				}
				code := "invalid_field"
				if name == "malformed" || name == "empty" {
					code = "invalid_json"
				}
				wantError(t, r, http.StatusBadRequest, code)
			})
		}
		wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
	})
}

func TestNotifySignature(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "s-1", Items: []item{{"a", 3}}, AmountCents: 700})
	wantOrder(t, e.do(t, "POST", "/v1/orders/s-1/pay", nil), http.StatusOK)
	body, _ := json.Marshal(notifyReq{OrderID: o.ID, PaymentID: "pay-s", Status: "SUCCEEDED", AmountCents: 700})
	now := time.Now()
	good := payment.Sign(testSecret, now, body)
	ts, sig, _ := strings.Cut(strings.TrimPrefix(good, "t="), ",v1=")

	refused := []struct{ name, header string }{
		{"missing", ""},
		{"signed with another secret", payment.Sign([]byte("someone-else"), now, body)},
		{"signed over another body", payment.Sign(testSecret, now, append([]byte(" "), body...))},
		{"older than 5 minutes", payment.Sign(testSecret, now.Add(-10*time.Minute), body)},
		{"more than 5 minutes ahead", payment.Sign(testSecret, now.Add(10*time.Minute), body)},
		{"timestamp changed", "t=" + strconv.FormatInt(now.Unix()-1, 10) + ",v1=" + sig},
		{"signature flipped", "t=" + ts + ",v1=" + flipHex(sig)},
		{"no v1", "t=" + ts},
		{"no t", "v1=" + sig},
		{"v1 not hex", "t=" + ts + ",v1=" + strings.Repeat("zz", 32)},
		{"v1 truncated", "t=" + ts + ",v1=" + sig[:62]},
		{"t not a number", "t=now,v1=" + sig},
		{"garbage", "garbage"},
		{"only the hex", sig},
		{"another scheme", "t=" + ts + ",v0=" + sig},
	}
	for _, c := range refused {
		t.Run(c.name+" is 401 and changes nothing", func(t *testing.T) {
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			wantError(t, e.notify(t, body, c.header), http.StatusUnauthorized, "invalid_signature")
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
	}
	wantSKU(t, e.sku(t, "a"), 7, 3, 0)

	t.Run("a hand-built signature pins the format", func(t *testing.T) {
		// t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + raw body)>
		m := hmac.New(sha256.New, testSecret)
		stamp := strconv.FormatInt(time.Now().Unix(), 10)
		m.Write([]byte(stamp + "." + string(body)))
		header := "t=" + stamp + ",v1=" + hex.EncodeToString(m.Sum(nil))
		tsNow, _ := strconv.ParseInt(stamp, 10, 64)
		if want := payment.Sign(testSecret, time.Unix(tsNow, 0), body); header != want {
			t.Errorf("payment.Sign = %q, hand-built %q", want, header)
		}
		p := wantNotify(t, e.notify(t, body, header), "paid")
		if p.Status != order.Paid {
			t.Errorf("status %s", p.Status)
		}
		wantSKU(t, e.sku(t, "a"), 7, 0, 3)
	})
}

// A captured callback sent again is a replay however its signature header is
// spelled: every other spelling of the same signature is refused, and a
// valid one (one more v1 from the rotation's second secret, the v1s in
// another order) is recognised as the same message and changes nothing.
// Before, the replay key was the header's text and the parser took many
// spellings of one signature, so a FAILED callback re-sent with its hex
// upper-cased moved a PAYING order back to PENDING a second time.
func TestNotifyReplayRespelled(t *testing.T) {
	t.Parallel()
	current, previous := []byte("whsec_new"), []byte("whsec_old")
	e := newEnv(t, envConfig{Grace: time.Hour, Secrets: [][]byte{current, previous}})
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "rs-1", Items: []item{{"a", 1}}, AmountCents: 5})
	wantOrder(t, e.do(t, "POST", "/v1/orders/rs-1/pay", map[string]string{"payment_id": "p-rs"}), http.StatusOK)
	body, _ := json.Marshal(notifyReq{OrderID: o.ID, PaymentID: "p-rs", Status: "FAILED", AmountCents: 5})
	at := time.Now()
	captured := payment.Sign(current, at, body)
	ts, sig, _ := strings.Cut(captured, ",v1=")
	_, prevSig, _ := strings.Cut(payment.Sign(previous, at, body), ",v1=")
	if got := wantNotify(t, e.notify(t, body, captured), "failed"); got.PaymentAttempts != 1 {
		t.Fatalf("first FAILED: attempts %d", got.PaymentAttempts)
	}
	// The buyer pays again. A replayed FAILED taken for a new one would now
	// move the order back to PENDING and count a second attempt.
	paying := wantOrder(t, e.do(t, "POST", "/v1/orders/rs-1/pay", nil), http.StatusOK)

	for name, h := range map[string]string{
		"hex upper-case":           ts + ",v1=" + strings.ToUpper(sig),
		"the same v1 twice":        captured + ",v1=" + sig,
		"an unknown pair":          captured + ",x=1",
		"t twice":                  ts + "," + ts + ",v1=" + sig,
		"a space after the comma":  ts + ", v1=" + sig,
		"v1 before t":              "v1=" + sig + "," + ts,
		"t with a leading zero":    "t=0" + strings.TrimPrefix(ts, "t=") + ",v1=" + sig,
		"a v0 beside the v1":       ts + ",v0=" + sig + ",v1=" + sig,
		"a space before the comma": ts + " ,v1=" + sig,
	} {
		t.Run(name+" is 401 and changes nothing", func(t *testing.T) {
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			wantError(t, e.notify(t, body, h), http.StatusUnauthorized, "invalid_signature")
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
	}
	t.Run("two signature headers are 401 and change nothing", func(t *testing.T) {
		snap := e.snapshot(t, []string{o.ID}, []string{"a"})
		req, err := http.NewRequest("POST", e.url+"/v1/payments/notify", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add(payment.SignatureHeader, captured)
		req.Header.Add(payment.SignatureHeader, ts+",v1="+prevSig)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		wantError(t, response{Status: resp.StatusCode, Header: resp.Header, Body: b}, http.StatusUnauthorized, "invalid_signature")
		wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
	})
	for name, h := range map[string]string{
		"the captured header":                captured,
		"an extra v1 from the second secret": captured + ",v1=" + prevSig,
		"the two v1 the other way round":     ts + ",v1=" + prevSig + ",v1=" + sig,
		"signed with the second secret only": ts + ",v1=" + prevSig,
	} {
		t.Run(name+" is replayed and changes nothing", func(t *testing.T) {
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			got := wantNotify(t, e.notify(t, body, h), "replayed")
			if got.Status != order.Paying || got.PaymentAttempts != 1 || got.Version != paying.Version {
				t.Errorf("after a replay: %s, attempts %d, v%d; want PAYING, 1, v%d", got.Status, got.PaymentAttempts, got.Version, paying.Version)
			}
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
	}
	t.Run("the same body under a new timestamp is a new message", func(t *testing.T) {
		// Not a replay; and being a FAILED of p-rs, no longer the current
		// attempt, it moves nothing.
		got := wantNotify(t, e.notify(t, body, payment.Sign(current, at.Add(-time.Second), body)), "no_change")
		if got.Status != order.Paying || got.PaymentAttempts != 1 || got.PaymentID != paying.PaymentID {
			t.Errorf("a new FAILED of the old attempt: %s, attempts %d; want PAYING, 1", got.Status, got.PaymentAttempts)
		}
	})
}

func flipHex(s string) string {
	b := []byte(s)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}

func TestNotifySecretRotation(t *testing.T) {
	t.Parallel()
	current, previous := []byte("whsec_new"), []byte("whsec_old")
	e := newEnv(t, envConfig{Grace: time.Hour, Secrets: [][]byte{current, previous}})
	e.setStock(t, "a", 10)
	for i, secret := range [][]byte{current, previous} {
		id := fmt.Sprintf("r-%d", i)
		e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 5})
		body, _ := json.Marshal(notifyReq{OrderID: id, PaymentID: "p-" + id, Status: "SUCCEEDED", AmountCents: 5})
		wantError(t, e.notify(t, body, payment.Sign([]byte("whsec_older"), time.Now(), body)), http.StatusUnauthorized, "invalid_signature")
		wantNotify(t, e.notify(t, body, payment.Sign(secret, time.Now(), body)), "paid")
	}
	wantSKU(t, e.sku(t, "a"), 8, 0, 2)
}

func TestNotifyWithoutSecret(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]envConfig{
		"no secret configured":     {Grace: time.Hour, NoSecrets: true},
		"only empty secrets given": {Grace: time.Hour, Secrets: [][]byte{{}, nil}},
	} {
		t.Run(name+": every callback is 401 callbacks_disabled", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cfg)
			e.setStock(t, "a", 10)
			o := e.create(t, createReq{ID: "ns-1", Items: []item{{"a", 1}}, AmountCents: 5})
			body, _ := json.Marshal(notifyReq{OrderID: o.ID, PaymentID: "p", Status: "SUCCEEDED", AmountCents: 5})
			snap := e.snapshot(t, []string{o.ID}, []string{"a"})
			for _, header := range []string{"", payment.Sign(testSecret, time.Now(), body), payment.Sign(nil, time.Now(), body), "garbage"} {
				wantError(t, e.notify(t, body, header), http.StatusUnauthorized, "callbacks_disabled")
			}
			wantUnchanged(t, snap, e.snapshot(t, []string{o.ID}, []string{"a"}))
		})
	}
}

// ---------------------------------------------------------------------------
// SKUs, health, routing, auth
// ---------------------------------------------------------------------------

func TestSKUs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})

	t.Run("PUT creates and GET reads", func(t *testing.T) {
		r := e.do(t, "PUT", "/v1/skus/widget-1", `{"available": 12}`)
		if r.Status != http.StatusOK {
			t.Fatalf("PUT: %d %s", r.Status, r.Body)
		}
		var s store.SKU
		if err := json.Unmarshal(r.Body, &s); err != nil || s != (store.SKU{SKU: "widget-1", Available: 12}) {
			t.Errorf("PUT answered %s", r.Body)
		}
		wantSKU(t, e.sku(t, "widget-1"), 12, 0, 0)
	})

	t.Run("PUT adjusts available and keeps what orders hold", func(t *testing.T) {
		e.setStock(t, "w2", 10)
		e.create(t, createReq{ID: "k-1", Items: []item{{"w2", 4}}, AmountCents: 1})
		e.create(t, createReq{ID: "k-2", Items: []item{{"w2", 1}}, AmountCents: 1})
		wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "k-2", PaymentID: "p", Status: "SUCCEEDED", AmountCents: 1}), "paid")
		wantSKU(t, e.sku(t, "w2"), 5, 4, 1)
		e.setStock(t, "w2", 0)
		wantSKU(t, e.sku(t, "w2"), 0, 4, 1)
		wantError(t, e.do(t, "POST", "/v1/orders", createReq{Items: []item{{"w2", 1}}, AmountCents: 1}), http.StatusConflict, "insufficient_stock")
		wantOrder(t, e.do(t, "POST", "/v1/orders/k-1/cancel", nil), http.StatusOK)
		wantSKU(t, e.sku(t, "w2"), 4, 0, 1)
	})

	bad := []struct{ name, sku, body, code string }{
		{"negative available", "w3", `{"available":-1}`, "invalid_field"},
		{"missing available", "w3", `{}`, "invalid_field"},
		{"null available", "w3", `{"available":null}`, "invalid_field"},
		{"available a string", "w3", `{"available":"5"}`, "invalid_field"},
		{"available fractional", "w3", `{"available":1.5}`, "invalid_field"},
		{"unknown field", "w3", `{"available":1,"locked":2}`, "invalid_field"},
		{"malformed JSON", "w3", `{"available":`, "invalid_json"},
		{"empty body", "w3", ``, "invalid_json"},
		{"bad sku name", "bad%20sku", `{"available":1}`, "invalid_field"},
		{"sku too long", strings.Repeat("s", 65), `{"available":1}`, "invalid_field"},
	}
	for _, c := range bad {
		t.Run("PUT with "+c.name+" is 400", func(t *testing.T) {
			wantError(t, e.do(t, "PUT", "/v1/skus/"+c.sku, c.body), http.StatusBadRequest, c.code)
		})
	}
	t.Run("refused PUTs created nothing", func(t *testing.T) {
		wantError(t, e.do(t, "GET", "/v1/skus/w3", nil), http.StatusNotFound, "sku_not_found")
		wantError(t, e.do(t, "GET", "/v1/skus/bad%20sku", nil), http.StatusNotFound, "sku_not_found")
	})
}

func TestHealthAndRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	for _, p := range []string{"/healthz", "/readyz"} {
		r := e.do(t, "GET", p, nil)
		if r.Status != http.StatusOK || !json.Valid(r.Body) {
			t.Errorf("GET %s: %d %s", p, r.Status, r.Body)
		}
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/nope"},
		{"GET", "/v1/nope"},
		{"GET", "/v2/orders"},
		{"POST", "/v1/orders/x/refund"},
		{"GET", "/v1/orders/x/y"},
		{"DELETE", "/v1/nope"},
	} {
		t.Run(c.method+" "+c.path+" is 404 JSON", func(t *testing.T) {
			r := e.do(t, c.method, c.path, nil)
			wantError(t, r, http.StatusNotFound, "not_found")
			if a := r.Header.Get("Allow"); a != "" {
				t.Errorf("a 404 has Allow %q", a)
			}
		})
	}
}

// A known path with a method it does not take is a 405 that says which
// methods it does take, in the error envelope like every other error.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	for name, token := range map[string]string{"without a token": "", "with a token": "tok-405"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{Grace: time.Hour, APIToken: token})
			for _, c := range []struct{ method, path, allow string }{
				{"DELETE", "/v1/orders/x", "GET, HEAD"},
				{"PUT", "/v1/orders/x", "GET, HEAD"},
				{"PATCH", "/v1/orders", "GET, HEAD, POST"},
				{"OPTIONS", "/v1/orders", "GET, HEAD, POST"},
				{"GET", "/v1/orders/x/pay", "POST"},
				{"DELETE", "/v1/orders/x/cancel", "POST"},
				{"GET", "/v1/payments/notify", "POST"},
				{"PUT", "/v1/payments/notify", "POST"},
				{"DELETE", "/v1/skus/a", "GET, HEAD, PUT"},
				{"POST", "/v1/skus/a", "GET, HEAD, PUT"},
				{"POST", "/healthz", "GET, HEAD"},
				{"DELETE", "/readyz", "GET, HEAD"},
				{"PUT", "/metrics", "GET, HEAD"},
				{"POST", "/openapi.yaml", "GET, HEAD"},
			} {
				t.Run(c.method+" "+c.path, func(t *testing.T) {
					r := e.do(t, c.method, c.path, nil)
					wantError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
					if got := r.Header.Get("Allow"); got != c.allow {
						t.Errorf("Allow %q, want %q", got, c.allow)
					}
				})
			}
		})
	}
}

// An error message quotes at most a little of the request: a megabyte key,
// path, method or value is not reflected back.
func TestErrorMessagesEchoLittle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	long := strings.Repeat("Z", 5000)
	digits := strings.Repeat("9", 5000)
	const ok = `"items":[{"sku":"a","qty":1}],"amount_cents":1`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, run                string
	}{
		{"a long unknown path", "GET", "/v1/" + long, "", 404, "not_found", long},
		{"a long method", long, "/v1/orders", "", 405, "method_not_allowed", long},
		{"a long unknown key", "POST", "/v1/orders", `{` + ok + `,"` + long + `":1}`, 400, "invalid_field", long},
		{"a long unknown item key", "POST", "/v1/orders", `{"items":[{"sku":"a","qty":1,"` + long + `":1}],"amount_cents":1}`, 400, "invalid_field", long},
		{"a long duplicate key", "PUT", "/v1/skus/a", `{"` + long + `":1,"` + long + `":2}`, 400, "invalid_field", long},
		{"a long number", "POST", "/v1/orders", `{"items":[{"sku":"a","qty":` + digits + `}],"amount_cents":1}`, 400, "invalid_field", digits},
		{"a long currency", "POST", "/v1/orders", `{` + ok + `,"currency":"` + long + `"}`, 400, "invalid_field", long},
		{"a long status", "GET", "/v1/orders?status=" + long, "", 400, "invalid_field", long},
		{"a long order id", "POST", "/v1/orders", `{"id":"` + long + `",` + ok + `}`, 400, "invalid_field", long},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			r := e.do(t, c.method, c.path, body)
			wantError(t, r, c.status, c.code)
			var b struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal(r.Body, &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Error.Message) > 200 || strings.Contains(b.Error.Message, c.run[:201]) {
				t.Errorf("the message is %d bytes and repeats the input: %.300s", len(b.Error.Message), b.Error.Message)
			}
		})
	}
}

// A JSON type error names the field by its full path, array index included:
// "items.qty" would not say which item.
func TestTypeErrorsNameTheIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	e.setStock(t, "b", 10)
	for _, c := range []struct{ body, want string }{
		{`{"items":[{"sku":"a","qty":"1"}],"amount_cents":1}`, "items[0].qty: want an integer, got a string"},
		{`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1.5}],"amount_cents":1}`, "items[1].qty: want an integer, got the number 1.5"},
		{`{"items":[{"sku":"a","qty":1},{"sku":7,"qty":1}],"amount_cents":1}`, "items[1].sku: want a string, got the number 7"},
		{`{"items":[{"sku":"a","qty":1},["b"]],"amount_cents":1}`, "items[1]: want an object, got an array"},
		{`{"items":{"sku":"a","qty":1},"amount_cents":1}`, "items: want an array, got an object"},
		{`{"items":[{"sku":"a","qty":1}],"amount_cents":"1"}`, "amount_cents: want an integer, got a string"},
		{`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"timeout_seconds":true}`, "timeout_seconds: want a number, got true or false"},
	} {
		t.Run(c.want, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/orders", c.body)
			wantError(t, r, http.StatusBadRequest, "invalid_field")
			if !bytes.Contains(r.Body, []byte(`"message":"`+c.want)) {
				t.Errorf("message %s, want it to start %q", r.Body, c.want)
			}
		})
	}
}

// A request body must be declared JSON: a browser's cross-site form or
// fetch can send text/plain, form and multipart bodies without asking first,
// never application/json.
func TestContentType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "ct-1", Items: []item{{"a", 1}}, AmountCents: 5})
	create := `{"items":[{"sku":"a","qty":1}],"amount_cents":1}`
	notify, _ := json.Marshal(notifyReq{OrderID: o.ID, PaymentID: "p", Status: "SUCCEEDED", AmountCents: 5})
	before := e.snapshot(t, []string{o.ID}, []string{"a"})
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonx", "json", "application/*"} {
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/orders", create},
			{"PUT", "/v1/skus/a", `{"available":0}`},
			{"POST", "/v1/orders/ct-1/pay", `{}`},
			{"POST", "/v1/orders/ct-1/cancel", `x=1`},
		} {
			t.Run(c.method+" "+c.path+" with Content-Type "+ct, func(t *testing.T) {
				wantError(t, e.do(t, c.method, c.path, c.body, "Content-Type", ct), http.StatusUnsupportedMediaType, "unsupported_media_type")
			})
		}
		t.Run("a signed callback with Content-Type "+ct, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/payments/notify", notify, "Content-Type", ct,
				payment.SignatureHeader, payment.Sign(testSecret, time.Now(), notify))
			wantError(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
		})
	}
	t.Run("a route that takes a body needs the type even for an empty one", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders", nil), http.StatusUnsupportedMediaType, "unsupported_media_type")
	})
	wantUnchanged(t, before, e.snapshot(t, []string{o.ID}, []string{"a"}))

	t.Run("JSON in any spelling of its media type is accepted", func(t *testing.T) {
		for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8"} {
			e.create(t, createReq{ID: fmt.Sprintf("ct-ok-%d", i), Items: []item{{"a", 1}}, AmountCents: 1}, "Content-Type", ct)
		}
	})
	t.Run("a route without a body needs no Content-Type", func(t *testing.T) {
		wantOrder(t, e.do(t, "POST", "/v1/orders/ct-1/pay", nil), http.StatusOK)
	})
}

// Without an API token, lapse answers only requests addressed to it: a page
// of another site cannot drive it from the buyer's browser, by posting to it
// (a foreign Origin) or by re-pointing its own host name at 127.0.0.1 and
// reading the answers (DNS rebinding: a foreign Host).
func TestForeignOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "fo-1", Items: []item{{"a", 1}}, AmountCents: 5})
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	other := strconv.Itoa(func() int { p, _ := strconv.Atoi(port); return p%60000 + 1 }())
	routes := []struct{ method, path string }{
		{"GET", "/v1/orders"},
		{"GET", "/v1/orders/fo-1"},
		{"POST", "/v1/orders/fo-1/cancel"},
		{"GET", "/metrics"},
		{"GET", "/nope"},
	}
	before := e.snapshot(t, []string{o.ID}, []string{"a"})
	for _, h := range [][]string{
		{"Host", "evil.example:" + port},
		{"Host", "evil.example"},
		{"Host", "127.0.0.1:" + other},
		{"Host", "127.0.0.1"},
		{"Host", "localhost.:" + port},
		{"Host", "127.0.0.1.evil.example:" + port},
		{"Origin", "http://evil.example"},
		{"Origin", "http://evil.example:" + port},
		{"Origin", "null"},
		{"Origin", "https://127.0.0.1:" + port},
		{"Origin", "http://127.0.0.1:" + other},
		{"Origin", "http://127.0.0.1:" + port + "/path"},
		{"Origin", "garbage"},
	} {
		for _, rt := range routes {
			t.Run(rt.method+" "+rt.path+" with "+h[0]+" "+h[1], func(t *testing.T) {
				wantError(t, e.do(t, rt.method, rt.path, nil, h...), http.StatusForbidden, "foreign_origin")
			})
		}
	}
	wantUnchanged(t, before, e.snapshot(t, []string{o.ID}, []string{"a"}))

	t.Run("its own address, localhost and its own origin pass", func(t *testing.T) {
		for _, h := range [][]string{
			{"Host", "127.0.0.1:" + port},
			{"Host", "localhost:" + port},
			{"Host", "LocalHost:" + port},
			{"Origin", "http://127.0.0.1:" + port},
			{"Origin", "http://localhost:" + port},
		} {
			wantOrder(t, e.do(t, "GET", "/v1/orders/fo-1", nil, h...), http.StatusOK)
		}
	})
	t.Run("with an API token the token decides", func(t *testing.T) {
		e := newEnv(t, envConfig{Grace: time.Hour, APIToken: "tok-fo"})
		for _, h := range [][]string{{"Host", "lapse.internal:" + port}, {"Origin", "https://shop.example"}} {
			wantError(t, e.do(t, "GET", "/v1/orders/nope", nil, h...), http.StatusNotFound, "order_not_found")
		}
	})
}

// TestStoreDown checks that store failures are 503 on /readyz and a bare 500
// elsewhere, with no driver message leaking.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: memory.New(memory.Config{}), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conforming(t, httpapi.New(svc, httpapi.Options{Logger: discard})))
	t.Cleanup(srv.Close)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	e := &env{url: srv.URL, client: srv.Client()}
	wantError(t, e.do(t, "GET", "/readyz", nil), http.StatusServiceUnavailable, "not_ready")
	for _, r := range []response{
		e.do(t, "GET", "/v1/orders/x", nil),
		e.do(t, "GET", "/v1/orders", nil),
		e.do(t, "POST", "/v1/orders", createReq{Items: []item{{"a", 1}}, AmountCents: 1}),
		e.do(t, "GET", "/v1/skus/a", nil),
	} {
		wantError(t, r, http.StatusInternalServerError, "internal")
		if bytes.Contains(bytes.ToLower(r.Body), []byte("sql")) {
			t.Errorf("a 500 leaks the driver's message: %s", r.Body)
		}
	}
	r := e.do(t, "GET", "/healthz", nil)
	if r.Status != http.StatusOK {
		t.Errorf("/healthz with the store down: %d (liveness must not depend on the store)", r.Status)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-token"
	// Every wrong token below comes from this test's one address: a budget
	// that holds them all (TestWrongBearerTokensAreThrottled tests the
	// throttle).
	e := newEnv(t, envConfig{Grace: time.Hour, APIToken: token, AuthThrottle: httpapi.NewAuthThrottle(httpapi.AuthThrottleConfig{Burst: 1000})})
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "au-1", Items: []item{{"a", 1}}, AmountCents: 5})

	routes := []struct{ method, path, body string }{
		{"POST", "/v1/orders", `{"items":[{"sku":"a","qty":1}],"amount_cents":1}`},
		{"GET", "/v1/orders", ""},
		{"GET", "/v1/orders/au-1", ""},
		{"POST", "/v1/orders/au-1/pay", ""},
		{"POST", "/v1/orders/au-1/cancel", ""},
		{"PUT", "/v1/skus/a", `{"available":0}`},
		{"GET", "/v1/skus/a", ""},
		{"GET", "/v1/events?dead=true", ""},
		{"POST", "/v1/events/retry", `{"dead":true}`},
	}
	wrong := []struct{ name, header string }{
		{"no Authorization", ""},
		{"a wrong token", "Bearer nope"},
		{"a token prefix", "Bearer " + token[:5]},
		{"the token with a suffix", "Bearer " + token + "x"},
		{"the token without Bearer", token},
		{"Basic auth", "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+token))},
	}
	before := e.snapshot(t, []string{"au-1"}, []string{"a"})
	for _, rt := range routes {
		for _, w := range wrong {
			t.Run(rt.method+" "+rt.path+" with "+w.name+" is 401", func(t *testing.T) {
				var body any
				if rt.body != "" {
					body = rt.body
				}
				r := e.do(t, rt.method, rt.path, body, "Authorization", w.header)
				wantError(t, r, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
				}
			})
		}
	}
	wantUnchanged(t, before, e.snapshot(t, []string{"au-1"}, []string{"a"}))

	t.Run("the right token passes", func(t *testing.T) {
		wantError(t, e.do(t, "GET", "/v1/orders/nope", nil), http.StatusNotFound, "order_not_found")
		e.get(t, "au-1")
	})
	t.Run("the scheme is case-insensitive", func(t *testing.T) {
		// RFC 9110 §11.1: an auth-scheme is a case-insensitive token.
		for _, h := range []string{"bearer " + token, "BEARER " + token, "BeArEr " + token, "Bearer  " + token} {
			wantOrder(t, e.do(t, "GET", "/v1/orders/au-1", nil, "Authorization", h), http.StatusOK)
		}
		for _, h := range []string{"Bearer" + token, "bearer " + strings.ToUpper(token), "Bearer\t" + token, "Bear " + token} {
			wantError(t, e.do(t, "GET", "/v1/orders/au-1", nil, "Authorization", h), http.StatusUnauthorized, "unauthorized")
		}
	})
	t.Run("the payment callback needs no token", func(t *testing.T) {
		body, _ := json.Marshal(notifyReq{OrderID: o.ID, PaymentID: "p", Status: "SUCCEEDED", AmountCents: 5})
		r := e.do(t, "POST", "/v1/payments/notify", body,
			"Authorization", "", payment.SignatureHeader, payment.Sign(testSecret, time.Now(), body))
		wantNotify(t, r, "paid")
		wantError(t, e.do(t, "POST", "/v1/payments/notify", body, "Authorization", "", payment.SignatureHeader, ""),
			http.StatusUnauthorized, "invalid_signature")
	})
	t.Run("health checks need no token", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			if r := e.do(t, "GET", p, nil, "Authorization", ""); r.Status != http.StatusOK {
				t.Errorf("GET %s without a token: %d", p, r.Status)
			}
		}
	})
}

// Counters stay integers: an available quantity near int64's end once made
// SQLite turn the counters into REAL on the next release (GET then answered
// 500, and audit passed). A bound far from the end is refused at the edge.
func TestStockIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for _, huge := range []string{`{"available": 9223372036854775807}`, `{"available": 1000000000001}`} {
		wantError(t, e.do(t, "PUT", "/v1/skus/big", huge), http.StatusBadRequest, "invalid_field")
	}
	e.setStock(t, "big", lapse.MaxAvailable)
	e.create(t, createReq{ID: "b-1", Items: []item{{"big", 1}}, AmountCents: 5})
	wantOrder(t, e.do(t, "POST", "/v1/orders/b-1/cancel", nil), http.StatusOK)
	wantSKU(t, e.sku(t, "big"), lapse.MaxAvailable, 0, 0)
	rep, err := e.st.Audit(context.Background(), store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

// A request stuck behind a row another transaction holds is answered 503
// timeout before the server's write timeout, never left to have its
// connection dropped unanswered (a create waited 29.7 s behind a held SKU
// row, and the 30 s write timeout closed its connection).
func TestStuckRequestIsAnsweredTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Postgres: true, RequestTimeout: 300 * time.Millisecond})
	e.setStock(t, "held", 5)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT sku FROM lapse_skus WHERE sku = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := e.do(t, "POST", "/v1/orders", createReq{ID: "stuck", Items: []item{{"held", 1}}, AmountCents: 5}, "Idempotency-Key", "k-stuck")
	wantError(t, r, http.StatusServiceUnavailable, "timeout")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("answered after %v", took)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The retry the answer asks for creates the order once.
	if got := e.create(t, createReq{ID: "stuck", Items: []item{{"held", 1}}, AmountCents: 5}, "Idempotency-Key", "k-stuck"); got.ID != "stuck" {
		t.Fatalf("retry: %+v", got)
	}
	wantSKU(t, e.sku(t, "held"), 4, 1, 0)
}
