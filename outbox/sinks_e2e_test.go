package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/store/sqlite"
)

// arrival is one event as a destination received it.
type arrival struct{ id, orderID, typ string }

// arrivals collects what one destination received, in arrival order.
type arrivals struct {
	mu  sync.Mutex
	got []arrival
}

func (a *arrivals) add(x arrival) {
	a.mu.Lock()
	a.got = append(a.got, x)
	a.mu.Unlock()
}

func (a *arrivals) list() []arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]arrival(nil), a.got...)
}

func (a *arrivals) distinct() int {
	ids := map[string]bool{}
	for _, x := range a.list() {
		ids[x.id] = true
	}
	return len(ids)
}

var typeRank = map[string]int{order.EventCreated: 0, order.EventPaid: 1, order.EventCancelled: 1, order.EventRefundRequired: 2}

// checkOrder fails t if any order's events arrived out of order (a repeat
// is fine, an older event after a newer one is not), and returns how many
// arrivals were repeats.
func checkOrder(t *testing.T, dest string, got []arrival) int {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	dups := 0
	for _, x := range got {
		if seen[x.id] {
			dups++
		}
		seen[x.id] = true
		r := typeRank[x.typ]
		if prev, ok := last[x.orderID]; ok && r < prev {
			t.Errorf("%s: order %s: %s arrived after a later event", dest, x.orderID, x.typ)
		}
		last[x.orderID] = max(last[x.orderID], r)
	}
	return dups
}

// webhookDest is an HTTP endpoint verifying each request's signature.
func webhookDest(t *testing.T, secret string) (*arrivals, string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	got := &arrivals{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || wh.Verify(body, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var env outbox.Envelope
		if err := json.Unmarshal(body, &env); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		got.add(arrival{env.ID, env.OrderID, env.Type})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return got, srv.URL + "/hooks"
}

// Every event of a 10,000-order run reaches every sink, each order's in
// order, while the RabbitMQ connection is cut and restored mid-run.
func TestEveryEventReachesEverySink(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "e2e.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hookGot, hookURL := webhookDest(t, secret)
	hook, err := webhook.New(webhook.Config{URL: hookURL, Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}

	admin := rabbittest.Admin(t)
	exchange := rabbittest.Name("e2e")
	rabbittest.DeleteExchangeAtEnd(t, admin, exchange)
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	mq, err := rabbitmq.New(ctx, proxy.URL+"?exchange="+exchange, outbox.FormatJSON, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mq.Close() })
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, exchange, "#"))
	mqGot := func() []arrival {
		var out []arrival
		for _, d := range rec.Deliveries() {
			var env outbox.Envelope
			if json.Unmarshal(d.Body, &env) == nil {
				out = append(out, arrival{d.MessageId, env.OrderID, d.RoutingKey})
			}
		}
		return out
	}

	svc, err := lapse.New(lapse.Config{
		Store: st, Sinks: []outbox.Sink{hook, mq}, Logger: discard(), SweepInterval: -1,
		Outbox: outbox.Config{RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond, Lease: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	const orders, skus = 10_000, 50
	for k := range skus {
		if _, err := svc.SetStock(ctx, fmt.Sprintf("sku-%02d", k), orders); err != nil {
			t.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	cut := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= orders {
					return
				}
				if i == orders/2 {
					close(cut)
				}
				_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
					ID: fmt.Sprintf("e-%05d", i), Items: []order.Item{{SKU: fmt.Sprintf("sku-%02d", i%skus), Qty: 1}},
					AmountCents: 100, Timeout: time.Second + time.Duration(i%20)*100*time.Millisecond,
				})
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
			}
		})
	}
	<-cut // half the orders are placed: the broker goes away for a while
	proxy.Cut()
	time.Sleep(1500 * time.Millisecond) // the outage
	proxy.Restore(t)
	wg.Wait()
	if t.Failed() {
		return
	}

	want := 2 * orders // created, then cancelled at the timeout
	deadline := time.Now().Add(3 * time.Minute)
	for {
		h, m := hookGot.distinct(), len(distinctIDs(mqGot()))
		if h >= want && m >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes: webhook %d, RabbitMQ %d distinct events of %d", h, m, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("webhook: %d duplicates", checkOrder(t, "webhook", hookGot.list()))
	t.Logf("RabbitMQ: %d duplicates (connection cut for 1.5 s)", checkOrder(t, "RabbitMQ", mqGot()))
}

func distinctIDs(got []arrival) map[string]bool {
	ids := map[string]bool{}
	for _, x := range got {
		ids[x.id] = true
	}
	return ids
}
