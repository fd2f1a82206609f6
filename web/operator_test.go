package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/web"
)

// stubGateway answers queries from its map (an order not in it: the
// gateway is down, an error) and closes unless closeErr is set. It
// refunds (payment.Refunder), as re_<payment id>, a payment it was not
// told to refuse; a refused one is refused for good (its refund DEAD).
type stubGateway struct {
	mu       sync.Mutex
	state    map[string]payment.Status
	closeErr error
	refuse   map[string]bool
	refunds  map[string]int // asked, per payment id
}

func (g *stubGateway) Refund(_ context.Context, r payment.Refund) (payment.RefundResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refunds[r.PaymentID]++
	if g.refuse[r.PaymentID] {
		return payment.RefundResult{}, fmt.Errorf("refund %s: %w", r.PaymentID, payment.ErrUnknownPayment)
	}
	return payment.RefundResult{RefundID: "re_" + r.PaymentID, State: payment.RefundSucceeded, AmountCents: r.AmountCents, Currency: r.Currency}, nil
}

// setRefuse makes the gateway refuse (or take) the refund of a payment.
func (g *stubGateway) setRefuse(paymentID string, refuse bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse[paymentID] = refuse
}

// refundsAsked is how often the gateway was asked to refund a payment.
func (g *stubGateway) refundsAsked(paymentID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refunds[paymentID]
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

// newOpFixture builds it; tune changes the service's configuration (the
// refunds' tests turn AutoRefund on).
func newOpFixture(t *testing.T, ctx context.Context, tok string, tune ...func(*lapse.Config)) *opFixture {
	t.Helper()
	f := &opFixture{gw: &stubGateway{state: map[string]payment.Status{}, closeErr: errors.New("the gateway is down"),
		refuse: map[string]bool{}, refunds: map[string]int{}}}
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
	cfg := lapse.Config{Store: st, Sinks: []outbox.Sink{sink}, Logger: logger, Gateway: f.gw,
		Outbox: outbox.Config{Interval: 20 * time.Millisecond}, GatewayPendingMax: time.Hour, ConfirmAfter: time.Hour}
	for _, tn := range tune {
		tn(&cfg)
	}
	svc, err := lapse.New(cfg)
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

// owe makes order id (created here, unpaid) paid by id-a and paid again by
// id-b: id-b owes money back (REFUND_REQUIRED).
func (f *opFixture) owe(t *testing.T, id string) {
	t.Helper()
	f.create(t, id, time.Hour, false)
	for _, p := range []string{id + "-a", id + "-b"} {
		if _, err := f.svc.Notify(context.Background(), lapse.Notification{OrderID: id, PaymentID: p, Status: lapse.PaymentSucceeded, AmountCents: 1999}); err != nil {
			t.Fatalf("notify %s: %v", p, err)
		}
	}
}

// attempt is the status of the order's payment attempt paymentID.
func (f *opFixture) attempt(t *testing.T, id, paymentID string) order.PaymentStatus {
	t.Helper()
	o, err := f.svc.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return p.Status
		}
	}
	return ""
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
// CSRF token: without it, or with another, 403 and nothing changes — the
// buyer's cancel, extend, check, force-check, operator cancel, refund now,
// mark refunded, and the retry of dead events, tasks, commands and
// refunds. With the token, a bad form is a 400 that changes nothing.
func TestOperatorActionsRefuseAFormWithoutItsCSRFToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newOpFixture(t, ctx, token, func(c *lapse.Config) {
		c.AutoRefund = true
		c.Refunds = refund.Config{Interval: 10 * time.Millisecond, RetryBase: time.Hour, RetryMax: time.Hour}
	})
	f.create(t, "x-pending", time.Hour, false)
	f.create(t, "x-paying", time.Hour, true)
	f.gw.setRefuse("x-owed-b", true) // its refund DEAD: the gateway does not know it
	f.owe(t, "x-owed")
	eventually(t, "x-owed-b's refund DEAD", func() (bool, error) {
		st, err := f.svc.Store().RefundStats(ctx)
		return st.Dead == 1, err
	})
	f.settled(t)
	f.killSink.Store(true)
	f.create(t, "x-dead", time.Hour, false)
	eventually(t, "a dead event", func() (bool, error) { return f.deadEvents(t) == 1, nil })
	pending, _ := f.svc.Get(ctx, "x-pending")
	b := newBrowse(t, f.url, token)
	for _, c := range []struct{ path, form string }{
		{"/ui/orders/x-pending/cancel", ""},
		{"/ui/orders/x-pending/extend", "timeout=2h"},
		{"/ui/orders/x-paying/check", ""},
		{"/ui/orders/x-paying/force-check", ""},
		{"/ui/orders/x-paying/operator-cancel", "close=no-close"},
		{"/ui/orders/x-owed/refund", "payment=x-owed-b"},
		{"/ui/orders/x-owed/mark-refunded", "payment=x-owed-b&note=by+hand"},
		{"/ui/events/retry", "all=1"},
		{"/ui/tasks/retry", "all=1"},
		{"/ui/commands/retry", "all=1"},
		{"/ui/refunds/retry", "all=1"},
		{"/ui/refunds/retry", "id=x-owed-b"},
	} {
		for name, csrf := range map[string]string{"no token": "", "another token": "&csrf=" + url.QueryEscape("x"+b.csrf)} {
			if status, body := b.do(t, "POST", c.path, c.form+csrf); status != http.StatusForbidden {
				t.Errorf("POST %s with %s: %d, want 403:\n%.300s", c.path, name, status, body)
			}
		}
	}
	if o, _ := f.svc.Get(ctx, "x-pending"); o.Status != order.Pending || !o.ExpiresAt.Equal(pending.ExpiresAt) || o.Version != pending.Version {
		t.Errorf("x-pending changed: %+v", o)
	}
	if o, _ := f.svc.Get(ctx, "x-paying"); o.Status != order.Paying {
		t.Errorf("x-paying is %s", o.Status)
	}
	if n := f.deadEvents(t); n != 1 {
		t.Errorf("dead events: %d, want 1", n)
	}
	owedUnchanged := func(when string) {
		t.Helper()
		if got := f.attempt(t, "x-owed", "x-owed-b"); got != order.PaymentRefundRequired {
			t.Errorf("%s: x-owed-b is %s, want REFUND_REQUIRED", when, got)
		}
		if st, err := f.svc.Store().RefundStats(ctx); err != nil || st.Dead != 1 {
			t.Errorf("%s: refunds %+v, %v, want x-owed-b's still DEAD", when, st, err)
		}
		if n := f.gw.refundsAsked("x-owed-b"); n != 1 {
			t.Errorf("%s: the gateway was asked %d times for x-owed-b, want once (the dispatcher's)", when, n)
		}
	}
	owedUnchanged("after the forms without their token")
	// With the token, the bad forms are 400s that change nothing.
	csrf := "&csrf=" + url.QueryEscape(b.csrf)
	for _, c := range []struct{ path, form string }{
		{"/ui/orders/x-pending/extend", "timeout=soon"},
		{"/ui/orders/x-pending/extend", "timeout=-1h"},
		{"/ui/orders/x-paying/operator-cancel", "close=maybe"},
		{"/ui/orders/x-paying/operator-cancel", ""},
		{"/ui/orders/x-owed/refund", ""},
		{"/ui/orders/x-owed/refund", "payment=x-paying-card"},
		{"/ui/orders/x-owed/mark-refunded", "payment=x-owed-b"},
		{"/ui/orders/x-owed/mark-refunded", "payment=x-owed-b&note=+++"},
		{"/ui/orders/x-owed/mark-refunded", "payment=x-owed-b&note=n&refund_id=" + strings.Repeat("r", 256)},
		{"/ui/events/retry", ""},
		{"/ui/events/retry", "all=1&id=e"},
		{"/ui/tasks/retry", "all=0"},
		{"/ui/refunds/retry", ""},
		{"/ui/refunds/retry", "id=" + strings.Repeat("p", 129)},
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
	owedUnchanged("after the bad forms")
}
