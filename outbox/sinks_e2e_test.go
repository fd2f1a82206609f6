package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
	natssink "github.com/lapsehq/lapse/outbox/nats"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/store/postgres"
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
	// PostgreSQL, as in production (and the pure-Go SQLite is slow under
	// the race detector, which this run must not measure).
	st, err := postgres.Open(ctx, postgres.Config{URL: postgresSchema(t)})
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

	kSink, kafkaGot := kafkaDest(t)
	nSink, natsGot := natsDest(t)

	svc, err := lapse.New(lapse.Config{
		Store: st, Sinks: []outbox.Sink{hook, mq, kSink, nSink}, Logger: discard(), SweepInterval: -1,
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
	started := time.Now()
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
	t.Logf("%d orders created in %s", orders, time.Since(started).Round(time.Millisecond))

	want := 2 * orders // created, then cancelled at the timeout
	deadline := time.Now().Add(3 * time.Minute)
	lastLog := time.Now()
	for {
		h, m, k, n := hookGot.distinct(), len(distinctIDs(mqGot())), kafkaGot.distinct(), natsGot.distinct()
		if h >= want && m >= want && k >= want && n >= want {
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("%s: webhook %d, RabbitMQ %d, Kafka %d, NATS %d", time.Since(started).Round(time.Second), h, m, k, n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes: webhook %d, RabbitMQ %d, Kafka %d, NATS %d distinct events of %d", h, m, k, n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("webhook: %d duplicates", checkOrder(t, "webhook", hookGot.list()))
	t.Logf("RabbitMQ: %d duplicates (connection cut for 1.5 s)", checkOrder(t, "RabbitMQ", mqGot()))
	t.Logf("Kafka (kfake, 3 brokers): %d duplicates", checkOrder(t, "Kafka", kafkaGot.list()))
	t.Logf("NATS JetStream: %d duplicates", checkOrder(t, "NATS", natsGot.list()))
}

// kafkaDest is a three-broker kfake cluster (no Kafka broker can run on
// these machines) with a sink producing to it and a consumer reading it.
func kafkaDest(t *testing.T) (*kafka.Sink, *arrivals) {
	t.Helper()
	const topic = "lapse-e2e"
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sink, err := kafka.New(context.Background(), kafka.Config{Brokers: c.ListenAddrs(), Topic: topic, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got := &arrivals{}
	seen := map[[2]int64]bool{} // a consumer may read an offset again after a leader moves
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				at := [2]int64{int64(r.Partition), r.Offset}
				if seen[at] {
					return
				}
				seen[at] = true
				hs := map[string]string{}
				for _, h := range r.Headers {
					hs[h.Key] = string(h.Value)
				}
				got.add(arrival{hs["id"], string(r.Key), hs["type"]})
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return sink, got
}

// natsDest is a NATS JetStream sink on the machine's server (a prefix and
// stream of the test's own) and an ordered consumer of its stream.
func natsDest(t *testing.T) (*natssink.Sink, *arrivals) {
	t.Helper()
	u, ok := os.LookupEnv("LAPSE_TEST_NATS")
	if !ok {
		u = "nats://127.0.0.1:4222"
	}
	if u == "" {
		t.Skip("LAPSE_TEST_NATS is empty")
	}
	cfg, err := natssink.ParseURL(u + "/" + fmt.Sprintf("lapse.e2e%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = discard()
	sink, err := natssink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsgo.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sink.Close()
		_ = js.DeleteStream(context.Background(), sink.Stream())
		nc.Close()
	})
	cons, err := js.OrderedConsumer(context.Background(), sink.Stream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := &arrivals{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var env outbox.Envelope
		if json.Unmarshal(m.Data(), &env) == nil {
			got.add(arrival{m.Headers().Get("Nats-Msg-Id"), env.OrderID, env.Type})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return sink, got
}

// postgresSchema returns LAPSE_TEST_POSTGRES pointed at a schema of the
// test's own, dropped when it ends.
func postgresSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_POSTGRES")
	if base == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("lapse_outbox_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func distinctIDs(got []arrival) map[string]bool {
	ids := map[string]bool{}
	for _, x := range got {
		ids[x.id] = true
	}
	return ids
}
