package lapse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// testSecret is a Standard Webhooks secret for tests only (24 zero bytes
// would do as well; this one reads as what it is).
const testSecret = "whsec_dGVzdC1zZWNyZXQtZm9yLWxhcHNlLW9yZGVyLXNlcnZpY2U="

// shopReceiver is an order service in the test: its own orders, a
// conditional update per command, answers by the order's state, and a
// record of every delivery.
type shopReceiver struct {
	t      *testing.T
	verify *standardwebhooks.Webhook

	mu       sync.Mutex
	orders   map[string]string // pending, paid, cancelled, paying
	applied  map[string]int    // order id → cancels applied
	ids      map[string]map[string]bool
	early    []string
	failing  int // answer 503 to this many more requests
	payingN  map[string]int
	received int
}

func newShopReceiver(t *testing.T) *shopReceiver {
	w, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return &shopReceiver{t: t, verify: w, orders: map[string]string{}, applied: map[string]int{},
		ids: map[string]map[string]bool{}, payingN: map[string]int{}}
}

func (r *shopReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := r.verify.Verify(body, req.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var c ordersvc.Command
	if err := json.Unmarshal(body, &c); err != nil || c.Validate() != nil {
		http.Error(w, "bad command", http.StatusBadRequest)
		return
	}
	id := req.Header.Get(standardwebhooks.HeaderWebhookID)
	a, err := r.apply(req.Context(), c, id)
	if err != nil {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}

// errShopDown is the shop's failure while failing > 0 (a 503 over HTTP).
var errShopDown = errors.New("shop down")

// apply is the shop's side of a verified command, on either transport.
func (r *shopReceiver) apply(_ context.Context, c ordersvc.Command, id string) (ordersvc.Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received++
	if r.ids[c.OrderID] == nil {
		r.ids[c.OrderID] = map[string]bool{}
	}
	r.ids[c.OrderID][id] = true
	if ca, err := time.Parse(time.RFC3339Nano, c.CancelAfter); err != nil || time.Now().Before(ca) {
		r.early = append(r.early, c.OrderID)
	}
	if r.failing > 0 {
		r.failing--
		return ordersvc.Answer{}, errShopDown
	}
	var res ordersvc.Result
	switch st, ok := r.orders[c.OrderID]; {
	case !ok:
		res = ordersvc.NotFound
	case st == "pending":
		r.orders[c.OrderID] = "cancelled"
		r.applied[c.OrderID]++
		res = ordersvc.Cancelled
	case st == "cancelled":
		res = ordersvc.AlreadyCancelled
	case st == "paid":
		res = ordersvc.AlreadyPaid
	case st == "paying":
		r.payingN[c.OrderID]++
		r.orders[c.OrderID] = "paid" // the payment in flight succeeds
		res = ordersvc.Paying
	}
	return ordersvc.Answer{Result: res, RetryAfterSeconds: 1, CommandID: id}, nil
}

func orderServicePG(t *testing.T, rcv http.Handler) (*lapse.Service, store.Store) {
	t.Helper()
	st := orderServiceStore(t)
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	client, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL + "/lapse/commands", Secrets: []string{testSecret}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return orderServiceOn(t, st, client)
}

// orderServiceStore is a migrated PostgreSQL store of the test's own.
func orderServiceStore(t *testing.T) store.Store {
	t.Helper()
	if os.Getenv("LAPSE_TEST_POSTGRES") == "" {
		t.Skip("LAPSE_TEST_POSTGRES not set")
	}
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: testdb.PostgresSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// orderServiceOn runs a service on st in order-service mode with client,
// stopped when t ends.
func orderServiceOn(t *testing.T, st store.Store, client ordersvc.Client) (*lapse.Service, store.Store) {
	t.Helper()
	ctx := context.Background()
	svc := newService(t, lapse.Config{Store: st, OrderService: client,
		Commands: ordersvc.DispatcherConfig{RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, PayingMin: 50 * time.Millisecond}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return svc, st
}

func TestOrderServiceAnswersDecide(t *testing.T) {
	rcv := newShopReceiver(t)
	rcv.failing = 3 // the first sends meet a 503: retried
	svc, _ := orderServicePG(t, rcv)
	checkAnswersDecide(t, svc, rcv)
}

// checkAnswersDecide registers 20 orders of the five kinds the shop knows
// (pending, paid, cancelled, paying, missing) and checks that each ends as
// the order service's answer says: cancelled once, by timeout, never before
// cancel_after, one command id per order; not_found DEAD.
func checkAnswersDecide(t *testing.T, svc *lapse.Service, rcv *shopReceiver) {
	t.Helper()
	ctx := context.Background()
	kinds := []string{"pending", "paid", "cancelled", "paying", "missing"}
	want := map[string]order.Status{"pending": order.Cancelled, "paid": order.Paid, "cancelled": order.Cancelled,
		"paying": order.Paid, "missing": order.Cancelling}
	var ids []string
	for i := range 20 {
		kind := kinds[i%len(kinds)]
		id := fmt.Sprintf("os-%s-%d", kind, i)
		if kind != "missing" {
			rcv.mu.Lock()
			rcv.orders[id] = kind
			rcv.mu.Unlock()
		}
		// Items are informational: checked, not held.
		res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, AmountCents: 500, Currency: "EUR", Timeout: 300 * time.Millisecond,
			Items: []order.Item{{SKU: "not-stocked", Qty: 2}}})
		if err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		if len(res.Order.Items) != 0 || res.Order.Status != order.Pending {
			t.Fatalf("registered %+v, want PENDING with no items held", res.Order)
		}
		ids = append(ids, id)
	}
	kindOf := func(id string) string {
		for _, k := range kinds {
			if len(id) > len("os-"+k) && id[:len("os-"+k)] == "os-"+k {
				return k
			}
		}
		return ""
	}
	waitFor(t, 20*time.Second, "every order's answer", func() bool {
		for _, id := range ids {
			o, err := svc.Get(ctx, id)
			if err != nil || o.Status != want[kindOf(id)] {
				return false
			}
		}
		return true
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.early) > 0 {
		t.Errorf("commands received before cancel_after: %v", rcv.early)
	}
	for id, n := range rcv.applied {
		if n != 1 {
			t.Errorf("%s: the cancel was applied %d times", id, n)
		}
	}
	for id, set := range rcv.ids {
		if len(set) != 1 {
			t.Errorf("%s: deliveries carried %d webhook-ids, want one", id, len(set))
		}
	}
	for _, id := range ids {
		o, err := svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == order.Cancelled && o.CancelReason != order.ReasonTimeout {
			t.Errorf("%s cancelled by %s, want timeout", id, o.CancelReason)
		}
	}
	dead, err := svc.Store().ListCommands(ctx, store.ListTasksParams{Dead: true})
	if err != nil || len(dead) != 4 {
		t.Fatalf("dead commands %d (%v), want the 4 not_found", len(dead), err)
	}
}

// The payment reaches lapse while the cancel command is out (the order
// service answered paying, and the command went again), and the order
// service answers cancelled: it cancelled before it saw the money. lapse's
// record stays PAID (order.paid is out), but the money was taken for an
// order its owner cancelled: the attempt owes it back, refund_required is
// set with order.refund_required, and with AutoRefund the refund goes to
// the gateway once, the attempt ends REFUNDED and the audit passes.
func TestOrderServiceCancelOfAnOrderLapseSawPaidGivesTheMoneyBack(t *testing.T) {
	t.Parallel()
	mock := payment.NewMock(payment.MockConfig{})
	gwSrv := httptest.NewServer(mock)
	t.Cleanup(gwSrv.Close)
	t.Cleanup(func() { _ = mock.Close() })
	gw, err := payment.NewHTTPGateway(gwSrv.URL, payment.HTTPConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	const id, pid = "os-late-pay", "p-os-late"
	var (
		svc   *lapse.Service
		mu    sync.Mutex
		sends int
	)
	// The shop: paying on the first command; on the second, the payment
	// lands at lapse (the gateway's notification) before the shop, which
	// saw no payment, cancels.
	rcv := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var c ordersvc.Command
		if err := json.NewDecoder(req.Body).Decode(&c); err != nil || c.OrderID != id {
			http.Error(w, "bad command", http.StatusBadRequest)
			return
		}
		mu.Lock()
		sends++
		n := sends
		mu.Unlock()
		a := ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 1, CommandID: req.Header.Get(standardwebhooks.HeaderWebhookID)}
		if n > 1 {
			if _, err := svc.Notify(req.Context(), lapse.Notification{OrderID: id, PaymentID: pid, Status: lapse.PaymentSucceeded, AmountCents: 500}); err != nil {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			a.Result = ordersvc.Cancelled
			a.RetryAfterSeconds = 0
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	})
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	client, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: srv.URL, Secrets: []string{testSecret}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := orderServiceStore(t)
	svc = newService(t, lapse.Config{Store: st, OrderService: client, Gateway: gw, AutoRefund: true, ConfirmAfter: time.Hour,
		Commands: ordersvc.DispatcherConfig{RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, PayingMin: 50 * time.Millisecond},
		Refunds:  refund.Config{RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Interval: 50 * time.Millisecond}})
	start(t, svc)
	ctx := context.Background()
	if _, err := mock.Pay(id, 500, payment.OutcomeSucceeded, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, AmountCents: 500, Currency: "EUR", Timeout: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var o order.Order
	waitFor(t, 20*time.Second, "the refund of the payment the order service's cancel left owed", func() bool {
		o, _ = svc.Get(ctx, id)
		return hasPayment(o, pid, order.PaymentRefunded) && !o.RefundRequired
	})
	if o.Status != order.Paid {
		t.Fatalf("the order is %s in lapse, want PAID (its order.paid went out; a transition is never taken back)", o.Status)
	}
	if rs := mock.Refunds(id); len(rs) != 1 || rs[0].PaymentID != pid || rs[0].AmountCents != 500 {
		t.Fatalf("refunds at the gateway: %+v, want one of %s's 500", rs, pid)
	}
	evs, err := st.OrderEvents(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if want := []string{order.EventCreated, order.EventPaid, order.EventRefundRequired, order.EventRefunded}; !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	if got := metric(t, svc, "lapse_refund_required_total"); got != 1 {
		t.Fatalf("lapse_refund_required_total = %v, want 1", got)
	}
	storetest.AuditOK(t, st)
}
