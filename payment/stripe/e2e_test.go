package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// service is a running lapse.Service on SQLite, with gw as its gateway
// (nil: none).
func service(t *testing.T, gw payment.Gateway) (*lapse.Service, *sqlite.Store) {
	t.Helper()
	return serviceWaiting(t, gw, 300*time.Millisecond)
}

// serviceWaiting is service with pendingMax as its GatewayPendingMax.
func serviceWaiting(t *testing.T, gw payment.Gateway, pendingMax time.Duration) (*lapse.Service, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "l.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, st, 100, "sku")
	cfg := lapse.Config{Store: st, Logger: quiet}
	if gw != nil {
		cfg.Gateway, cfg.ConfirmAfter, cfg.GatewayPendingMax = gw, 100*time.Millisecond, pendingMax
	}
	svc, err := lapse.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)
	return svc, st
}

func createPaying(t *testing.T, svc *lapse.Service, id, pid string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 1299, Timeout: timeout}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PayAttempt(ctx, id, pid); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, svc *lapse.Service, id string) order.Order {
	t.Helper()
	o, err := svc.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func waitStatus(t *testing.T, svc *lapse.Service, id string, want order.Status) order.Order {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o := get(t, svc, id)
		if o.Status == want {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s after 10 s, want %s", id, o.Status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The service's gateway check with the Stripe adapter: PAYING orders past
// their deadline are asked about their PaymentIntent — succeeded → PAID by
// it; requires_payment_method → cancelled at Stripe (the PaymentIntent, or
// its open Checkout Session), then CANCELLED; processing → asked again, then
// closed — and the confirmation query after the cancel finds it canceled.
func TestGatewayCheckWithStripe(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	svc, st := service(t, newGateway(t, fs.URL, stripe.Config{}))
	for _, c := range []struct{ pid, status string }{
		{"pi_paid", "succeeded"}, {"pi_unpaid", "requires_payment_method"}, {"pi_checkout", "requires_payment_method"},
		{"pi_processing", "processing"}, {"pi_failedthen", "requires_payment_method"},
	} {
		fs.Set(stripetest.PaymentIntent{ID: c.pid, Status: "requires_payment_method", Amount: 1299})
		if c.status != "requires_payment_method" {
			fs.SetStatus(c.pid, c.status)
		}
	}
	fs.AddSession("cs_checkout", "pi_checkout")
	createPaying(t, svc, "o-paid", "pi_paid", time.Second)
	createPaying(t, svc, "o-unpaid", "pi_unpaid", time.Second)
	createPaying(t, svc, "o-checkout", "pi_checkout", time.Second)
	createPaying(t, svc, "o-processing", "pi_processing", time.Second)

	if o := waitStatus(t, svc, "o-paid", order.Paid); o.PaymentID != "pi_paid" {
		t.Fatalf("o-paid paid by %q", o.PaymentID)
	}
	waitStatus(t, svc, "o-unpaid", order.Cancelled)
	if s := fs.Status("pi_unpaid"); s != "canceled" {
		t.Fatalf("pi_unpaid after the cancel: %s", s)
	}
	waitStatus(t, svc, "o-checkout", order.Cancelled)
	if s := fs.SessionStatus("cs_checkout"); s != "expired" {
		t.Fatalf("cs_checkout after the cancel: %s", s)
	}
	// Stripe cannot cancel a processing PaymentIntent: never cancelled
	// while it is; once it fails (back to requires_payment_method) it is.
	deadline := time.Now().Add(10 * time.Second)
	for fs.Count("POST /v1/payment_intents/pi_processing/cancel") == 0 { // past GatewayPendingMax: the close is tried, and refused
		if time.Now().After(deadline) {
			t.Fatal("the processing PaymentIntent was never closed after GatewayPendingMax")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if o := get(t, svc, "o-processing"); o.Status != order.Paying {
		t.Fatalf("o-processing: %s while its PaymentIntent is processing", o.Status)
	}
	fs.SetStatus("pi_processing", "requires_payment_method")
	waitStatus(t, svc, "o-processing", order.Cancelled)
	if fs.Count("GET /v1/payment_intents/pi_unpaid") < 2 {
		t.Fatalf("no confirmation query after the cancel: %v", fs.Calls())
	}
	storetest.AuditOK(t, st)
}

// waitCalls waits until the fake Stripe served "METHOD path" at least n
// times.
func waitCalls(t *testing.T, fs *stripetest.Server, call string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fs.Count(call) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s served %d times in 10 s, want %d: %v", call, fs.Count(call), n, fs.Calls())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A buyer still in 3-D Secure at the deadline (requires_action) is waited
// for, as a payment in progress: the order stays PAYING, its PaymentIntent
// is not cancelled under the buyer, and once the buyer is through it pays
// the order.
func TestThreeDSecureAtTheDeadlineIsWaitedFor(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	svc, st := serviceWaiting(t, newGateway(t, fs.URL, stripe.Config{}), time.Minute)
	fs.Set(stripetest.PaymentIntent{ID: "pi_3ds", Status: "requires_action", NextAction: "use_stripe_sdk", Amount: 1299})
	fs.Set(stripetest.PaymentIntent{ID: "pi_confirm", Status: "requires_confirmation", NextAction: "redirect_to_url", Amount: 1299})
	createPaying(t, svc, "o-3ds", "pi_3ds", time.Second)
	createPaying(t, svc, "o-confirm", "pi_confirm", time.Second)
	// Asked at the deadline, then again: still authenticating each time.
	waitCalls(t, fs, "GET /v1/payment_intents/pi_3ds", 3)
	waitCalls(t, fs, "GET /v1/payment_intents/pi_confirm", 3)
	for _, c := range []struct{ id, pi, status string }{{"o-3ds", "pi_3ds", "requires_action"}, {"o-confirm", "pi_confirm", "requires_confirmation"}} {
		if o := get(t, svc, c.id); o.Status != order.Paying {
			t.Fatalf("%s: %s while the buyer authenticates", c.id, o.Status)
		}
		if s, n := fs.Status(c.pi), fs.Count("POST /v1/payment_intents/"+c.pi+"/cancel"); s != c.status || n != 0 {
			t.Fatalf("%s: %s after %d cancels, while the buyer authenticates", c.pi, s, n)
		}
	}
	fs.SetStatus("pi_3ds", "succeeded")
	fs.SetStatus("pi_confirm", "succeeded")
	for _, c := range []struct{ id, pi string }{{"o-3ds", "pi_3ds"}, {"o-confirm", "pi_confirm"}} {
		if o := waitStatus(t, svc, c.id, order.Paid); o.PaymentID != c.pi {
			t.Fatalf("%s paid by %q", c.id, o.PaymentID)
		}
	}
	storetest.AuditOK(t, st)
}

// A PaymentIntent Stripe does not have, or one made for another order
// (metadata.order_id), keeps no order PAYING for longer than
// GatewayPendingMax: the order is then cancelled and its stock released,
// and the other order's PaymentIntent is never cancelled on its behalf.
func TestUnknownOrForeignPaymentIntentHoldsNoStock(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	svc, st := service(t, newGateway(t, fs.URL, stripe.Config{}))
	fs.Set(stripetest.PaymentIntent{ID: "pi_foreign", Status: "requires_payment_method", Amount: 1299, Metadata: map[string]string{"order_id": "o-owner"}})
	fs.Set(stripetest.PaymentIntent{ID: "pi_foreignpaid", Status: "requires_payment_method", Amount: 1299, Metadata: map[string]string{"order_id": "o-owner2"}})
	fs.SetStatus("pi_foreignpaid", "succeeded")
	createPaying(t, svc, "o-foreign", "pi_foreign", time.Second)
	createPaying(t, svc, "o-foreignpaid", "pi_foreignpaid", time.Second)
	createPaying(t, svc, "o-unknown", "pi_nosuch", time.Second)
	for _, id := range []string{"o-foreign", "o-foreignpaid", "o-unknown"} {
		if o := waitStatus(t, svc, id, order.Cancelled); o.RefundRequired {
			t.Fatalf("%s: cancelled with refund_required: another order's payment was counted as its own", id)
		}
		// The event says why.
		evs, err := st.OrderEvents(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		var why string
		for _, e := range evs {
			if e.Type == order.EventCancelled {
				var p struct {
					CancelDetail string `json:"cancel_detail"`
				}
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					t.Fatal(err)
				}
				why = p.CancelDetail
			}
		}
		if why != "payment_unknown" {
			t.Fatalf("%s: order.cancelled says cancel_detail %q, want payment_unknown", id, why)
		}
	}
	for _, pi := range []string{"pi_foreign", "pi_foreignpaid"} {
		if n := fs.Count("POST /v1/payment_intents/" + pi + "/cancel"); n != 0 {
			t.Fatalf("another order's PaymentIntent %s cancelled %d times", pi, n)
		}
	}
	if s := fs.Status("pi_foreign"); s != "requires_payment_method" {
		t.Fatalf("pi_foreign: %s", s)
	}
	sku, err := svc.GetSKU(context.Background(), "sku")
	if err != nil || sku.Available != 100 || sku.Locked != 0 || sku.Sold != 0 {
		t.Fatalf("stock after the cancels: %+v, %v; want all 100 available", sku, err)
	}
	storetest.AuditOK(t, st)
}

// A card declined (payment_intent.payment_failed) puts the order back to
// PENDING with its attempt FAILED; at the deadline the check still asks
// Stripe about that PaymentIntent — the buyer may retry it — and closes it
// before the cancel.
func TestFailedAttemptClosedAtTheDeadline(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	svc, st := service(t, newGateway(t, fs.URL, stripe.Config{}))
	fs.Set(stripetest.PaymentIntent{ID: "pi_declined", Status: "requires_payment_method", Amount: 1299})
	createPaying(t, svc, "o-declined", "pi_declined", 300*time.Millisecond)
	if _, err := svc.Notify(context.Background(), lapse.Notification{OrderID: "o-declined", PaymentID: "pi_declined",
		Status: lapse.PaymentFailed, CallbackID: "stripe:evt_declined"}); err != nil {
		t.Fatal(err)
	}
	if o := get(t, svc, "o-declined"); o.Status != order.Pending {
		t.Fatalf("after the decline: %s", o.Status)
	}
	waitStatus(t, svc, "o-declined", order.Cancelled)
	if s := fs.Status("pi_declined"); s != "canceled" {
		t.Fatalf("the declined PaymentIntent after the cancel: %s (the buyer could still pay it)", s)
	}
	storetest.AuditOK(t, st)
}

// Stripe's webhook through lapse's route, with a real Service on SQLite:
// forged, stale, malformed events change nothing; a good one pays the order
// (found by its PaymentIntent when the event has no metadata.order_id); the
// same event again changes nothing; a store failure answers 500, so Stripe
// sends it again.
func TestWebhookThroughTheRoute(t *testing.T) {
	t.Parallel()
	svc, st := service(t, nil)
	n, err := stripe.NewNotifier(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(httpapi.New(svc, httpapi.Options{APIToken: "the-api-token-0123456789", Notifiers: []payment.Notifier{n}, Logger: quiet}))
	t.Cleanup(api.Close)
	createPaying(t, svc, "o-1", "pi_one", time.Hour)
	createPaying(t, svc, "o-2", "pi_two", time.Hour)
	post := func(body []byte, h http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", api.URL+"/v1/payments/notify/stripe", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	errCode := func(body string) string {
		var b struct{ Error struct{ Code string } }
		_ = json.Unmarshal([]byte(body), &b)
		return b.Error.Code
	}
	now := time.Now()
	paid1 := event("evt_paid1", "payment_intent.succeeded", "pi_one", "succeeded", 1299, "")
	for _, c := range []struct {
		name string
		body []byte
		h    http.Header
		code string
	}{
		{"forged", paid1, sign(paid1, "whsec_not_lapses", now), "invalid_signature"},
		{"stale", paid1, sign(paid1, testWebhookSecret, now.Add(-6*time.Minute)), "invalid_signature"},
		{"unsigned", paid1, http.Header{}, "invalid_signature"},
		{"malformed", []byte(`{"id":"evt_x","type":"payment_intent.succeeded","data":{"object":{"id":"pi_one","amount_received":"lots"}}}`),
			sign([]byte(`{"id":"evt_x","type":"payment_intent.succeeded","data":{"object":{"id":"pi_one","amount_received":"lots"}}}`), testWebhookSecret, now), "invalid_event"},
	} {
		if status, body := post(c.body, c.h); status != 400 || errCode(body) != c.code {
			t.Fatalf("%s: %d %s; want 400 %s", c.name, status, body, c.code)
		}
		if o := get(t, svc, "o-1"); o.Status != order.Paying {
			t.Fatalf("o-1 after a %s event: %s", c.name, o.Status)
		}
	}
	// Good, no metadata: the order found by the PaymentIntent id.
	if status, body := post(paid1, sign(paid1, testWebhookSecret, now)); status != 200 || body != "{}" {
		t.Fatalf("good: %d %s", status, body)
	}
	before := get(t, svc, "o-1")
	if before.Status != order.Paid || before.PaymentID != "pi_one" {
		t.Fatalf("o-1 after its success event: %s by %q", before.Status, before.PaymentID)
	}
	// Replayed: the same event, signed again (Stripe retries with a fresh
	// timestamp): acknowledged, nothing changes.
	if status, _ := post(paid1, sign(paid1, testWebhookSecret, time.Now())); status != 200 {
		t.Fatalf("replay: %d", status)
	}
	if after := get(t, svc, "o-1"); after.Version != before.Version || after.Status != order.Paid {
		t.Fatalf("o-1 changed by a replay: version %d → %d, %s", before.Version, after.Version, after.Status)
	}
	res, err := svc.Notify(context.Background(), lapse.Notification{OrderID: "o-1", PaymentID: "pi_one", Status: lapse.PaymentSucceeded,
		AmountCents: 1299, CallbackID: "stripe:evt_paid1"})
	if err != nil || res.Outcome != store.OutcomeReplayed {
		t.Fatalf("the event's id was not recorded as seen: %+v %v", res.Outcome, err)
	}
	// A failure event with metadata.order_id: o-2 back to PENDING.
	failed2 := event("evt_failed2", "payment_intent.payment_failed", "pi_two", "requires_payment_method", 0, "o-2")
	if status, _ := post(failed2, sign(failed2, testWebhookSecret, now)); status != 200 {
		t.Fatalf("failed: %d", status)
	}
	if o := get(t, svc, "o-2"); o.Status != order.Pending || o.PaymentAttempts != 1 {
		t.Fatalf("o-2 after payment_failed: %s, %d attempts", o.Status, o.PaymentAttempts)
	}
	// Another event type: acknowledged, nothing applied.
	other := event("evt_created", "payment_intent.created", "pi_two", "requires_payment_method", 0, "o-2")
	if status, body := post(other, sign(other, testWebhookSecret, now)); status != 200 || body != "{}" {
		t.Fatalf("another event: %d %s", status, body)
	}
	// The store down: 500, and Stripe sends it again.
	_ = st.Close()
	paid2 := event("evt_paid2", "payment_intent.succeeded", "pi_two", "succeeded", 1299, "o-2")
	if status, body := post(paid2, sign(paid2, testWebhookSecret, now)); status != 500 || errCode(body) != "not_applied" {
		t.Fatalf("store down: %d %s", status, body)
	}
}

// lockedBuffer is a log destination the test reads while lapse writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An event over 1 MiB is refused for good (413 too_large) and logged at
// WARN, without its body.
func TestOversizedWebhookIsRefusedAndLogged(t *testing.T) {
	t.Parallel()
	svc, _ := service(t, nil)
	n, err := stripe.NewNotifier(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	api := httptest.NewServer(httpapi.New(svc, httpapi.Options{APIToken: "the-api-token-0123456789", Notifiers: []payment.Notifier{n},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	t.Cleanup(api.Close)
	createPaying(t, svc, "o-1", "pi_one", time.Hour)
	ev := event("evt_big", "payment_intent.succeeded", "pi_one", "succeeded", 1299, "o-1")
	big := append(ev[:len(ev)-1:len(ev)-1], []byte(`,"pad":"`+strings.Repeat("PADDING", (1<<20)/7+1)+`"}`)...)
	req, _ := http.NewRequest("POST", api.URL+"/v1/payments/notify/stripe", bytes.NewReader(big))
	for k, v := range sign(big, testWebhookSecret, time.Now()) {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct{ Error struct{ Code string } }
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &body) != nil || body.Error.Code != "too_large" {
		t.Fatalf("oversized: %d %s, want 413 too_large", resp.StatusCode, b)
	}
	if o := get(t, svc, "o-1"); o.Status != order.Paying {
		t.Fatalf("o-1 after an oversized event: %s", o.Status)
	}
	got := logs.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "gateway=stripe") || !strings.Contains(got, "too large") {
		t.Fatalf("no WARN line naming the gateway and the size:\n%s", got)
	}
	if strings.Contains(got, "PADDINGPADDING") {
		t.Fatal("the event's body was logged")
	}
}
