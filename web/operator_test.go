package web_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/web"
)

// stubGateway answers queries from its map (an order not in it: the
// gateway is down, an error) and closes unless closeErr is set.
type stubGateway struct {
	mu       sync.Mutex
	state    map[string]payment.Status
	closeErr error
}

func (g *stubGateway) Query(_ context.Context, id string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.state[id]; ok {
		return st, nil
	}
	return payment.Status{}, errors.New("the gateway is down")
}

func (g *stubGateway) Close(_ context.Context, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeErr
}

func (g *stubGateway) set(id string, st payment.Status) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state[id] = st
}

// opFixture is a service with a gateway and a webhook sink that can be
// made to refuse, its dashboard served (behind tok, when set).
type opFixture struct {
	svc      *lapse.Service
	gw       *stubGateway
	url      string
	killSink atomic.Bool
}

func newOpFixture(t *testing.T, ctx context.Context, tok string) *opFixture {
	t.Helper()
	f := &opFixture{gw: &stubGateway{state: map[string]payment.Status{}, closeErr: errors.New("the gateway is down")}}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if f.killSink.Load() {
			w.WriteHeader(http.StatusBadRequest) // a 400 makes the event dead at once
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	sink, err := webhook.New(webhook.Config{URL: hook.URL, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		t.Fatal(err)
	}
	st := openSQLite(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lapse.New(lapse.Config{Store: st, Sinks: []outbox.Sink{sink}, Logger: logger, Gateway: f.gw,
		Outbox: outbox.Config{Interval: 20 * time.Millisecond}, GatewayPendingMax: time.Hour, ConfirmAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	dash, err := web.New(svc, web.Options{APIToken: tok, Logger: logger, SampleEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go dash.Run(runCtx)
	f.url = serve(t, ctx, web.Mount(httpapi.New(svc, httpapi.Options{APIToken: tok, Logger: logger}), dash))
	if _, err := svc.SetStock(ctx, "tee", 100); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *opFixture) create(t *testing.T, id string, timeout time.Duration, pay bool) order.Order {
	t.Helper()
	ctx := context.Background()
	res, err := f.svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1999, Timeout: timeout})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	if !pay {
		return res.Order
	}
	o, err := f.svc.PayAttempt(ctx, id, id+"-card")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// settled waits until every event written so far has gone out.
func (f *opFixture) settled(t *testing.T) {
	t.Helper()
	eventually(t, "every event delivered", func() (bool, error) {
		evs, err := f.svc.Store().UnpublishedEvents(context.Background(), 10)
		return len(evs) == 0, err
	})
}

// deadEvents is how many deliveries are dead.
func (f *opFixture) deadEvents(t *testing.T) int64 {
	t.Helper()
	st, err := f.svc.Store().OutboxStats(context.Background())
	if err != nil || len(st.Sinks) != 1 {
		t.Fatalf("outbox stats: %+v, %v", st, err)
	}
	return st.Sinks[0].Dead
}

// Each operator's action of the dashboard is a POST behind the session's
// CSRF token: without it, or with another, 403 and nothing changes.
func TestOperatorActionsRefuseAFormWithoutItsCSRFToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newOpFixture(t, ctx, token)
	f.create(t, "x-pending", time.Hour, false)
	f.create(t, "x-paying", time.Hour, true)
	f.settled(t)
	f.killSink.Store(true)
	f.create(t, "x-dead", time.Hour, false)
	eventually(t, "a dead event", func() (bool, error) { return f.deadEvents(t) == 1, nil })
	pending, _ := f.svc.Get(ctx, "x-pending")
	b := newBrowse(t, f.url, token)
	for _, c := range []struct{ path, form string }{
		{"/ui/orders/x-pending/extend", "timeout=2h"},
		{"/ui/orders/x-paying/force-check", ""},
		{"/ui/orders/x-paying/operator-cancel", "close=no-close"},
		{"/ui/events/retry", "all=1"},
		{"/ui/tasks/retry", "all=1"},
		{"/ui/commands/retry", "all=1"},
	} {
		for name, csrf := range map[string]string{"no token": "", "another token": "&csrf=" + url.QueryEscape("x"+b.csrf)} {
			if status, body := b.do(t, "POST", c.path, c.form+csrf); status != http.StatusForbidden {
				t.Errorf("POST %s with %s: %d, want 403:\n%.300s", c.path, name, status, body)
			}
		}
	}
	if o, _ := f.svc.Get(ctx, "x-pending"); !o.ExpiresAt.Equal(pending.ExpiresAt) || o.Version != pending.Version {
		t.Errorf("x-pending changed: %+v", o)
	}
	if o, _ := f.svc.Get(ctx, "x-paying"); o.Status != order.Paying {
		t.Errorf("x-paying is %s", o.Status)
	}
	if n := f.deadEvents(t); n != 1 {
		t.Errorf("dead events: %d, want 1", n)
	}
	// With the token, the bad forms are 400s that change nothing.
	csrf := "&csrf=" + url.QueryEscape(b.csrf)
	for _, c := range []struct{ path, form string }{
		{"/ui/orders/x-pending/extend", "timeout=soon"},
		{"/ui/orders/x-pending/extend", "timeout=-1h"},
		{"/ui/orders/x-paying/operator-cancel", "close=maybe"},
		{"/ui/orders/x-paying/operator-cancel", ""},
		{"/ui/events/retry", ""},
		{"/ui/events/retry", "all=1&id=e"},
		{"/ui/tasks/retry", "all=0"},
	} {
		if status, body := b.do(t, "POST", c.path, c.form+csrf); status != http.StatusBadRequest {
			t.Errorf("POST %s %s: %d, want 400:\n%.300s", c.path, c.form, status, body)
		}
	}
	if o, _ := f.svc.Get(ctx, "x-pending"); o.Version != pending.Version {
		t.Errorf("x-pending changed by a bad form: %+v", o)
	}
	if o, _ := f.svc.Get(ctx, "x-paying"); o.Status != order.Paying {
		t.Errorf("x-paying is %s after the bad forms", o.Status)
	}
}
