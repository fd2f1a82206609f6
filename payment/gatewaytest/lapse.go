package gatewaytest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// LapseConfig configures NewLapse.
type LapseConfig struct {
	// Gateway is asked before an order that had a payment attempt is
	// cancelled (lapse.Config.Gateway); nil for none.
	Gateway payment.Gateway
	// Notifiers are served at POST /v1/payments/notify/{Name}.
	Notifiers []payment.Notifier
	// Logger receives the service's and the API's logs. Defaults to none.
	Logger *slog.Logger
}

// Lapse is a real lapse service on SQLite, its cancel loop running, and its
// HTTP API served on loopback, for an adapter's end-to-end tests: the gateway
// check against the adapter's fake gateway, and the gateway's notifications
// through POST /v1/payments/notify/{Name}. The store's audit is checked when
// the test ends.
type Lapse struct {
	Service *lapse.Service
	URL     string
}

// SKU is the SKU NewLapse stocks; Paying orders take one of it.
const SKU = "sku"

// NewLapse starts a Lapse for the test.
func NewLapse(t *testing.T, cfg LapseConfig) *Lapse {
	t.Helper()
	ctx := context.Background()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	storetest.Stock(t, st, 1000, SKU)
	svc, err := lapse.New(lapse.Config{Store: st, Gateway: cfg.Gateway, Logger: logger, DefaultCurrency: "CNY",
		GatewayTimeout: 5 * time.Second, ConfirmAfter: 200 * time.Millisecond, GatewayPendingMax: time.Second})
	if err != nil {
		t.Fatalf("lapse.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	srv := httptest.NewServer(httpapi.New(svc, httpapi.Options{Notifiers: cfg.Notifiers, Logger: logger}))
	t.Cleanup(func() {
		srv.Close()
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Service.Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Service.Run did not return within 10s of its context ending")
		}
		storetest.AuditOK(t, st)
	})
	return &Lapse{Service: svc, URL: srv.URL}
}

// Paying creates an order of amountCents due after timeout and starts its
// payment attempt paymentID: the order is PAYING.
func (l *Lapse) Paying(t *testing.T, orderID, paymentID string, amountCents int64, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Service.CreateOrder(ctx, lapse.CreateOrderRequest{ID: orderID, Items: []order.Item{{SKU: SKU, Qty: 1}},
		AmountCents: amountCents, Currency: "CNY", Timeout: timeout}); err != nil {
		t.Fatalf("create %s: %v", orderID, err)
	}
	if _, err := l.Service.PayAttempt(ctx, orderID, paymentID); err != nil {
		t.Fatalf("pay %s with %s: %v", orderID, paymentID, err)
	}
}

// Order returns an order.
func (l *Lapse) Order(t *testing.T, id string) order.Order {
	t.Helper()
	o, err := l.Service.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return o
}

// WaitStatus polls an order until it has status, within d, and returns it.
func (l *Lapse) WaitStatus(t *testing.T, id string, status order.Status, d time.Duration) order.Order {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		o := l.Order(t, id)
		if o.Status == status {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s is %s after %s, want %s", id, o.Status, d, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Response is an answer of lapse's API.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Notify posts a gateway's notification to POST /v1/payments/notify/{name}.
func (l *Lapse) Notify(t *testing.T, name string, header http.Header, body []byte) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, l.URL+"/v1/payments/notify/"+name, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("notify %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("notify %s: reading the answer: %v", name, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}
