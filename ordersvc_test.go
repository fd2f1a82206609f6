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
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
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
