package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/timer/memory"
)

var (
	discard = slog.New(slog.NewTextHandler(io.Discard, nil))
	secret  = []byte("whsec_client_test")
)

type env struct {
	url string
	st  store.Store
}

type envConfig struct {
	token     string
	inventory inventory.Client
	// wrap, when set, wraps the API's handler (outside the request check).
	wrap func(http.Handler) http.Handler
	// postgres runs the service on PostgreSQL (LAPSE_TEST_POSTGRES, a
	// schema of its own) instead of SQLite.
	postgres bool
	// orderService, when set, owns the orders (lapse.Config.OrderService).
	orderService ordersvc.Client
}

// newEnv serves a real Service on a SQLite store over HTTP, as lapse serve
// does. Every request that reaches it is checked against openapi.yaml: what
// the client sends must be what the document describes.
func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	if cfg.postgres {
		st, err = postgres.Open(ctx, postgres.Config{URL: testdb.PostgresSchema(t)})
	} else {
		st, err = sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: memory.New(memory.Config{}), Logger: discard, Inventory: cfg.inventory,
		Tasks:        inventory.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond},
		OrderService: cfg.orderService,
		Commands:     ordersvc.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)
	h := checkRequests(t, httpapi.New(svc, httpapi.Options{APIToken: cfg.token, CallbackSecrets: [][]byte{secret}, Logger: discard}))
	if cfg.wrap != nil {
		h = cfg.wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, st: st}
}

// checkRequests fails the test on a request that openapi.yaml refuses and
// lapse does not.
// (httpapi's tests check the answers against it, and the server's
// strictness; here what matters is that the client asks as documented.)
func checkRequests(t *testing.T, h http.Handler) http.Handler {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		route, params, err := router.FindRoute(r)
		if err != nil {
			t.Errorf("%s %s: not an operation of openapi.yaml: %v", r.Method, r.URL, err)
		} else {
			vr := r.Clone(r.Context())
			vr.Body = io.NopCloser(bytes.NewReader(body))
			in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
			err = openapi3filter.ValidateRequest(r.Context(), in)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		// A test may send what the document refuses on purpose; the
		// server must then refuse it too.
		if err != nil && (sw.status < 400 || sw.status > 499) {
			t.Errorf("%s %s: the request does not conform to openapi.yaml (%v), and lapse answered %d", r.Method, r.URL, err, sw.status)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithRetry(3, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v, want a *client.Error %d %s", what, err, status, code)
	}
	if e.Status != status || e.Code != code || e.Message == "" {
		t.Fatalf("%s: %+v, want %d %s with a message", what, e, status, code)
	}
}

func TestOrders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	c := newClient(t, e.url)
	ctx := context.Background()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := c.SetStock(ctx, "tee", 5); err != nil || s != (client.SKU{SKU: "tee", Available: 5}) {
		t.Fatalf("SetStock: %+v, %v", s, err)
	}
	o, err := c.CreateOrder(ctx, client.CreateOrder{ID: "o1", Items: []order.Item{{SKU: "tee", Qty: 2}}, AmountCents: 1999,
		Currency: "EUR", Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID != "o1" || o.Status != order.Pending || o.Currency != "EUR" || o.AmountCents != 1999 || len(o.Items) != 1 ||
		o.ExpiresAt.Sub(o.CreatedAt) != 90*time.Second || o.ExpiresAt.Location() != time.UTC {
		t.Fatalf("created %+v", o)
	}
	anon, err := c.CreateOrder(ctx, client.CreateOrder{Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 500})
	if err != nil || anon.ID == "" || anon.Currency != "USD" {
		t.Fatalf("created without an id: %+v, %v", anon, err)
	}
	_, err = c.CreateOrder(ctx, client.CreateOrder{ID: "o2", Items: []order.Item{{SKU: "tee", Qty: 9}}, AmountCents: 1})
	wantCode(t, "create beyond the stock", err, 409, client.CodeInsufficientStock)
	if !errors.Is(err, client.ErrInsufficientStock) || errors.Is(err, client.ErrNotFound) {
		t.Fatalf("errors.Is: %v", err)
	}
	_, err = c.CreateOrder(ctx, client.CreateOrder{ID: "o1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1})
	if !errors.Is(err, client.ErrOrderExists) {
		t.Fatalf("create o1 again: %v", err)
	}
	_, err = c.CreateOrder(ctx, client.CreateOrder{ID: "bad id", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1})
	wantCode(t, "create with a bad id", err, 400, client.CodeInvalidField)

	// An Idempotency-Key of the caller's: the same order again, then 422 for another body.
	req := client.CreateOrder{ID: "o3", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, IdempotencyKey: "k-o3"}
	first, err := c.CreateOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.CreateOrder(ctx, req); err != nil || again.ID != first.ID || again.Version != first.Version {
		t.Fatalf("the same create again: %+v, %v", again, err)
	}
	req.AmountCents = 101
	if _, err := c.CreateOrder(ctx, req); !errors.Is(err, client.ErrIdempotencyKeyReused) {
		t.Fatalf("another body under the key: %v", err)
	}

	got, err := c.GetOrder(ctx, "o1")
	if err != nil || got.ID != "o1" || got.Payments == nil || len(got.Payments) != 0 {
		t.Fatalf("GetOrder: %+v, %v", got, err)
	}
	_, err = c.GetOrder(ctx, "nope")
	wantCode(t, "GetOrder nope", err, 404, client.CodeOrderNotFound)
	if !errors.Is(err, client.ErrNotFound) || client.Code(err) != client.CodeOrderNotFound {
		t.Fatalf("GetOrder nope: %v", err)
	}

	paying, err := c.Pay(ctx, "o1", "")
	if err != nil || paying.Status != order.Paying || paying.PaymentID != "o1-1" {
		t.Fatalf("Pay: %+v, %v", paying, err)
	}
	if p, err := c.Pay(ctx, "o3", "pi_123"); err != nil || p.PaymentID != "pi_123" {
		t.Fatalf("Pay with an id: %+v, %v", p, err)
	}
	res, err := c.NotifyPayment(ctx, client.Notification{OrderID: "o1", PaymentID: "o1-1", Succeeded: true, AmountCents: 1999}, secret)
	if err != nil || res.Result != "paid" || res.Order.Status != order.Paid {
		t.Fatalf("NotifyPayment: %+v, %v", res, err)
	}
	// A success in another currency cannot pay: money to give back, o3 PENDING again.
	if res, err := c.NotifyPayment(ctx, client.Notification{OrderID: "o3", PaymentID: "pi_123", Succeeded: true, AmountCents: 100, Currency: "JPY"}, secret); err != nil ||
		res.Result != "refund_required" || res.Order.Status != order.Pending {
		t.Fatalf("NotifyPayment in JPY: %+v, %v", res, err)
	}
	_, err = c.NotifyPayment(ctx, client.Notification{OrderID: "o1", PaymentID: "o1-1", Succeeded: true, AmountCents: 1999}, []byte("wrong"))
	wantCode(t, "a callback signed with another secret", err, 401, client.CodeInvalidSignature)
	_, err = c.Pay(ctx, "o1", "")
	wantCode(t, "Pay a PAID order", err, 409, client.CodeOrderNotPending)
	if !errors.Is(err, client.ErrOrderNotPending) || !errors.Is(err, &client.Error{Status: 409, Code: client.CodeOrderNotPending}) ||
		errors.Is(err, &client.Error{Status: 404, Code: client.CodeOrderNotPending}) {
		t.Fatalf("errors.Is on Pay: %v", err)
	}

	cancelled, err := c.Cancel(ctx, anon.ID)
	if err != nil || cancelled.Status != order.Cancelled || cancelled.CancelReason != order.ReasonBuyer || cancelled.CancelledAt.IsZero() {
		t.Fatalf("Cancel: %+v, %v", cancelled, err)
	}
	_, err = c.Cancel(ctx, anon.ID)
	wantCode(t, "Cancel twice", err, 409, client.CodeOrderNotPending)

	if s, err := c.GetSKU(ctx, "tee"); err != nil || s != (client.SKU{SKU: "tee", Available: 2, Locked: 1, Sold: 2}) {
		t.Fatalf("GetSKU: %+v, %v", s, err)
	}
	_, err = c.GetSKU(ctx, "nope")
	wantCode(t, "GetSKU nope", err, 404, client.CodeSKUNotFound)
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("GetSKU nope: %v", err)
	}
	if m, err := c.Metrics(ctx); err != nil || !bytes.Contains(m, []byte("lapse_")) {
		t.Fatalf("Metrics: %d bytes, %v", len(m), err)
	}
}

func TestListOrdersPagesAndIterates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	c := newClient(t, e.url)
	ctx := context.Background()
	if _, err := c.SetStock(ctx, "tee", 100); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: fmt.Sprintf("o%d", i), Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"o1", "o4"} {
		if _, err := c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.ListOrders(ctx, client.ListOrders{Limit: 3})
	if err != nil || len(page.Orders) != 3 || page.NextCursor == "" || page.Orders[0].ID != "o6" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	next, err := c.ListOrders(ctx, client.ListOrders{Limit: 3, Cursor: page.NextCursor})
	if err != nil || len(next.Orders) != 3 || next.Orders[0].ID != "o3" {
		t.Fatalf("second page: %+v, %v", next, err)
	}
	var ids []string
	for o, err := range c.Orders(ctx, client.ListOrders{Status: order.Cancelled, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if strings.Join(ids, ",") != "o4,o1" {
		t.Fatalf("every CANCELLED order, a page of one at a time: %v", ids)
	}
	n := 0
	for _, err := range c.Orders(ctx, client.ListOrders{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break // an iteration stopped early reads no further page
		}
	}
	for _, err := range c.Orders(ctx, client.ListOrders{Cursor: "garbage"}) {
		wantCode(t, "a bad cursor", err, 400, client.CodeInvalidCursor)
	}
	_, err = c.ListOrders(ctx, client.ListOrders{Limit: 501})
	wantCode(t, "limit 501", err, 400, client.CodeInvalidField)
}

func TestToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token-of-the-test"
	e := newEnv(t, envConfig{token: token})
	ctx := context.Background()
	_, err := newClient(t, e.url).GetSKU(ctx, "tee")
	wantCode(t, "without the token", err, 401, client.CodeUnauthorized)
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("without the token: %v", err)
	}
	_, err = newClient(t, e.url, client.WithToken("zz-not-the-token")).GetSKU(ctx, "tee")
	if !errors.Is(err, client.ErrUnauthorized) || strings.Contains(err.Error(), "zz-not-the-token") {
		t.Fatalf("a wrong token: %v", err)
	}
	c := newClient(t, e.url, client.WithToken(token))
	if _, err := c.SetStock(ctx, "tee", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New("ftp://x"); err == nil {
		t.Fatal("New accepted ftp://x")
	}
	if _, err := client.New("http://user:pw@127.0.0.1:1"); err == nil {
		// fine: a URL with credentials is a URL
	} else if strings.Contains(err.Error(), "pw") {
		t.Fatalf("New's error shows the password: %v", err)
	}
	if _, err := client.New(e.url, client.WithToken("a\nb")); err == nil {
		t.Fatal("New took a token with a line break")
	}
}

// dropFirstCreate lets the first POST /v1/orders through to the service —
// the order is committed — then drops the connection without an answer, as
// a crash of a proxy or a network cut would. It counts the creates and
// records their Idempotency-Keys.
type dropFirstCreate struct {
	next    http.Handler
	creates atomic.Int32
	mu      sync.Mutex
	keys    []string
}

func (d *dropFirstCreate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/orders" {
		d.next.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	d.keys = append(d.keys, r.Header.Get("Idempotency-Key"))
	d.mu.Unlock()
	if d.creates.Add(1) > 1 {
		d.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	d.next.ServeHTTP(rec, r)
	if rec.Code != http.StatusCreated {
		panic(fmt.Sprintf("the first create: %d %s", rec.Code, rec.Body))
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

func TestCreateIsRetriedWithOneKeyAfterALostAnswer(t *testing.T) {
	t.Parallel()
	var drop *dropFirstCreate
	e := newEnv(t, envConfig{wrap: func(h http.Handler) http.Handler { drop = &dropFirstCreate{next: h}; return drop }})
	c := newClient(t, e.url)
	ctx := context.Background()
	if _, err := c.SetStock(ctx, "tee", 10); err != nil {
		t.Fatal(err)
	}
	o, err := c.CreateOrder(ctx, client.CreateOrder{Items: []order.Item{{SKU: "tee", Qty: 3}}, AmountCents: 100})
	if err != nil {
		t.Fatalf("CreateOrder through a lost answer: %v", err)
	}
	if n := drop.creates.Load(); n != 2 {
		t.Fatalf("%d creates reached the server, want 2", n)
	}
	if drop.keys[0] == "" || drop.keys[0] != drop.keys[1] {
		t.Fatalf("Idempotency-Keys %q: want one generated key, the same on the retry", drop.keys)
	}
	page, err := c.ListOrders(ctx, client.ListOrders{})
	if err != nil || len(page.Orders) != 1 || page.Orders[0].ID != o.ID {
		t.Fatalf("orders after the retried create: %+v, %v; want just %s", page.Orders, err, o.ID)
	}
	if s, err := c.GetSKU(ctx, "tee"); err != nil || s.Locked != 3 {
		t.Fatalf("stock after the retried create: %+v, %v; want 3 locked once", s, err)
	}
}

// unavailableFirst answers the first request of each path 503 timeout after
// the service has handled it.
func TestCreateIsRetriedOn503(t *testing.T) {
	t.Parallel()
	var seen sync.Map
	var attempts atomic.Int32
	e := newEnv(t, envConfig{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/orders" {
				attempts.Add(1)
			}
			if _, again := seen.LoadOrStore(r.Method+r.URL.Path, true); again {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"timeout","message":"the request did not finish in time"}}`)
		})
	}})
	ctx := context.Background()
	c := newClient(t, e.url)
	if _, err := c.SetStock(ctx, "tee", 10); err != nil {
		t.Fatal(err)
	}
	o, err := c.CreateOrder(ctx, client.CreateOrder{ID: "o1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100})
	if err != nil || o.ID != "o1" || attempts.Load() != 2 {
		t.Fatalf("CreateOrder after a 503: %+v, %v, %d attempts", o, err, attempts.Load())
	}
	// Without retries, the 503 is the caller's.
	once := newClient(t, e.url, client.WithRetry(1, 0))
	_, err = once.Cancel(ctx, "o1") // the first cancel: 503 (it did cancel)
	wantCode(t, "a cancel answered 503", err, 503, client.CodeTimeout)
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("errors.Is(ErrUnavailable): %v", err)
	}
	// A context that ends during the backoff ends the retries.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.GetOrder(cctx, "o1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetOrder with a cancelled context: %v", err)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	c := newClient(t, e.url)
	if err := e.st.RegisterSinks(ctx, []string{"hook"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetStock(ctx, "tee", 10); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: fmt.Sprintf("ev-%d", i), Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The events reach the sink's list as the relay fans them out.
	var page client.EventPage
	for deadline := time.Now().Add(10 * time.Second); len(page.Events) < 3; time.Sleep(5 * time.Millisecond) {
		var err error
		if page, err = c.ListEvents(ctx, client.ListEvents{Sink: "hook"}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListEvents: %d events for hook after 10 s, want 3", len(page.Events))
		}
	}
	if len(page.Events) != 3 || page.NextAfter != 0 {
		t.Fatalf("ListEvents: %d events, next_after %d", len(page.Events), page.NextAfter)
	}
	ev := page.Events[0]
	if ev.Type != order.EventCreated || ev.OrderID != "ev-0" || ev.Sink != "hook" || ev.Dead || ev.CreatedAt.IsZero() || !bytes.Contains(ev.Payload, []byte(`"ev-0"`)) {
		t.Fatalf("event %+v", ev)
	}
	// The sink refuses the first two for good.
	ds, err := e.st.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "hook", Limit: 2, Lease: time.Minute})
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %d, %v", len(ds), err)
	}
	var outs []store.Outcome
	for _, d := range ds {
		outs = append(outs, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "422: no", Refused: true, Dead: true})
	}
	if err := e.st.SettleEvents(ctx, "hook", outs); err != nil {
		t.Fatal(err)
	}
	dead, err := c.ListEvents(ctx, client.ListEvents{Dead: true, Limit: 1})
	if err != nil || len(dead.Events) != 1 || !dead.Events[0].Dead || dead.Events[0].DeadAt.IsZero() || dead.Events[0].LastError != "422: no" || dead.NextAfter == 0 {
		t.Fatalf("dead page: %+v, %v", dead, err)
	}
	rest, err := c.ListEvents(ctx, client.ListEvents{Dead: true, After: dead.NextAfter})
	if err != nil || len(rest.Events) != 1 || rest.Events[0].ID == dead.Events[0].ID {
		t.Fatalf("the next dead page: %+v, %v", rest, err)
	}
	if n, err := c.RetryEvents(ctx, client.RetryEvents{IDs: []string{dead.Events[0].ID, "no-such-event"}}); err != nil || n != 1 {
		t.Fatalf("RetryEvents ids: %d, %v", n, err)
	}
	if n, err := c.RetryEvents(ctx, client.RetryEvents{AllDead: true, Sink: "hook"}); err != nil || n != 1 {
		t.Fatalf("RetryEvents dead: %d, %v", n, err)
	}
	_, err = c.RetryEvents(ctx, client.RetryEvents{})
	wantCode(t, "RetryEvents of nothing", err, 400, client.CodeInvalidField)
	_, err = c.ListEvents(ctx, client.ListEvents{Limit: 501})
	wantCode(t, "ListEvents limit 501", err, 400, client.CodeInvalidField)
}

func TestTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ist := inventorytest.SQLite(t)
	if _, err := ist.SetAvailable(ctx, "tee", 10); err != nil {
		t.Fatal(err)
	}
	inv := reference.NewServer(ist, reference.Config{Logger: discard})
	if err := inv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Stop() })
	ic := inventory.NewHTTPClient(inv.URL(), inventory.WithTimeout(2*time.Second))
	e := newEnv(t, envConfig{inventory: ic})
	c := newClient(t, e.url)

	_, err := c.SetStock(ctx, "tee", 1)
	wantCode(t, "SetStock with remote stock", err, 409, client.CodeStockRemote)
	_, err = c.CreateOrder(ctx, client.CreateOrder{ID: "h0", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1})
	wantCode(t, "a create without a reservation", err, 400, client.CodeReservationRequired)
	for _, id := range []string{"h1", "h2"} {
		a, err := ic.Send(ctx, inventory.Command{TaskID: "caller-" + id, Action: inventory.Reserve, ReservationID: "res-" + id, Items: []inventory.Item{{SKU: "tee", Qty: 1}}})
		if err != nil || !a.Done() {
			t.Fatalf("reserve: %+v, %v", a, err)
		}
		if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1, ReservationID: "res-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	inv.Applier().SetFaults(reference.Faults{Reject: true})
	for _, id := range []string{"h1", "h2"} {
		if _, err := c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var dead client.TaskPage
	for deadline := time.Now().Add(20 * time.Second); len(dead.Tasks) < 2; {
		if dead, err = c.ListTasks(ctx, client.ListTasks{Dead: true}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("DEAD tasks %+v: want the two releases", dead.Tasks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tk := dead.Tasks[0]; tk.Action != order.TaskRelease || tk.Status != order.TaskDead || tk.Result != "REJECTED" || tk.DeadAt.IsZero() {
		t.Fatalf("task %+v", tk)
	}
	first, err := c.ListTasks(ctx, client.ListTasks{Limit: 1})
	if err != nil || len(first.Tasks) != 1 || first.NextAfter == "" {
		t.Fatalf("a page of one: %+v, %v", first, err)
	}
	if p, err := c.ListTasks(ctx, client.ListTasks{OrderID: "h1"}); err != nil || len(p.Tasks) != 1 || p.Tasks[0].OrderID != "h1" {
		t.Fatalf("h1's tasks: %+v, %v", p, err)
	}
	if o, err := c.GetOrder(ctx, "h1"); err != nil || len(o.Tasks) != 1 {
		t.Fatalf("h1 with its tasks: %+v, %v", o, err)
	}
	inv.Applier().SetFaults(reference.Faults{})
	if n, err := c.RetryTasks(ctx, client.RetryTasks{IDs: []string{dead.Tasks[0].ID}}); err != nil || n != 1 {
		t.Fatalf("RetryTasks ids: %d, %v", n, err)
	}
	if n, err := c.RetryTasks(ctx, client.RetryTasks{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("RetryTasks dead: %d, %v", n, err)
	}
	_, err = c.RetryTasks(ctx, client.RetryTasks{IDs: []string{"a"}, AllDead: true})
	wantCode(t, "RetryTasks of both", err, 400, client.CodeInvalidField)
}

// Ready reports a server that is not ready, after its retries.
func TestReadyNotReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"not_ready","message":"the store does not answer"}}`)
	}))
	t.Cleanup(srv.Close)
	err := newClient(t, srv.URL).Ready(context.Background())
	wantCode(t, "Ready", err, 503, client.CodeNotReady)
	if calls.Load() != 3 {
		t.Fatalf("%d calls, want 3 (WithRetry(3, …))", calls.Load())
	}
	// An answer without the envelope keeps its status and text.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	t.Cleanup(plain.Close)
	err = newClient(t, plain.URL).Healthz(context.Background())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 502 || ce.Code != "" || !strings.Contains(ce.Message, "bad gateway from a proxy") {
		t.Fatalf("a proxy's 502: %v", err)
	}
}
