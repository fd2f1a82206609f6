package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
	natssink "github.com/lapsehq/lapse/outbox/nats"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
	"github.com/twmb/franz-go/pkg/kfake"
)

// drainResult is one sink's drain measurement.
type drainResult struct {
	sink        string
	events      int
	perS, rawPS float64
	rawErr      error
}

// rawPublishers measure a broker's plain publish rate (the ceiling of a
// sink) by sink type; a sink without one reports no ceiling.
var rawPublishers = map[string]func(ctx context.Context, spec string, n, size int) (float64, error){
	"amqp":  rabbitmq.RawPublishRate,
	"amqps": rabbitmq.RawPublishRate,
	"kafka": kafka.RawPublishRate,
	"nats":  natssink.RawPublishRate,
}

// fakeKafka starts an in-process kfake cluster (three brokers) for every
// --sink kafka://kfake/topic, with the topic, and returns the specs with
// its addresses: no Kafka broker can run on the machines lapse is developed
// on, and the bench says so in its sink names.
func fakeKafka(specs []string) (out []string, stop func(), err error) {
	var clusters []*kfake.Cluster
	stop = func() {
		for _, c := range clusters {
			c.Close()
		}
	}
	for _, spec := range specs {
		rest, ok := strings.CutPrefix(spec, "kafka://kfake/")
		if !ok {
			out = append(out, spec)
			continue
		}
		topic, _, _ := strings.Cut(rest, "?")
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, topic))
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("start a kfake cluster: %w", err)
		}
		clusters = append(clusters, c)
		out = append(out, "kafka://"+strings.Join(c.ListenAddrs(), ",")+"/"+rest)
	}
	return out, stop, nil
}

// benchQueues binds a queue of the run's own to every RabbitMQ sink's
// exchange, so the run's events are routed (an unroutable event is a
// refusal); remove deletes them.
func benchQueues(ctx context.Context, specs []string) (remove func(), err error) {
	var removers []func() error
	remove = func() {
		for _, r := range removers {
			_ = r()
		}
	}
	for _, spec := range specs {
		if !strings.HasPrefix(spec, "amqp://") && !strings.HasPrefix(spec, "amqps://") {
			continue
		}
		r, err := rabbitmq.BenchQueue(ctx, spec)
		if err != nil {
			remove()
			return nil, err
		}
		removers = append(removers, r)
	}
	return remove, nil
}

// measureDrains writes orders' events with no relay running (each order
// created then cancelled by its buyer: two events), then times one relay
// emptying them into each sink in turn.
func measureDrains(ctx context.Context, st store.Store, specs []string, sinks []outbox.Sink, cfg outbox.Config, orders int, stderr io.Writer) ([]drainResult, error) {
	// Every sink gets the backlog: registered before it is written.
	if err := st.RegisterSinks(ctx, sinkNames(sinks)); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "lapse bench: relay drain: writing %d orders' events (created, cancelled)…\n", orders)
	if _, err := st.SetStock(ctx, "relay-drain", int64(orders)); err != nil {
		return nil, err
	}
	run := time.Now().UnixNano()
	var size int
	for i := range orders {
		id := fmt.Sprintf("drain-%d-%d", run, i)
		res, err := st.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "relay-drain", Qty: 1}},
			AmountCents: 1000, Currency: "USD", Timeout: time.Hour})
		if err != nil {
			return nil, fmt.Errorf("relay drain: create: %w", err)
		}
		if _, err := st.CancelOrder(ctx, id); err != nil {
			return nil, fmt.Errorf("relay drain: cancel: %w", err)
		}
		if i == 0 {
			payload, err := core.EventPayload(res.Order)
			if err != nil {
				return nil, err
			}
			b, _, err := outbox.FormatJSON.Structured(order.Event{ID: "0198a0c0-0000-7000-8000-000000000000", Type: order.EventCreated, OrderID: id, Payload: payload, CreatedAt: time.Now()})
			if err != nil {
				return nil, err
			}
			size = len(b)
		}
		if (i+1)%5000 == 0 {
			fmt.Fprintf(stderr, "lapse bench: relay drain: %d of %d orders written\n", i+1, orders)
		}
	}
	var out []drainResult
	for i, s := range sinks {
		fmt.Fprintf(stderr, "lapse bench: relay drain: %s…\n", s.Name())
		perS, err := bench.DrainRelay(ctx, st, s, cfg, 2*orders, 5*time.Minute)
		if err != nil {
			return nil, err
		}
		r := drainResult{sink: s.Name(), events: 2 * orders, perS: perS}
		scheme, _, _ := strings.Cut(specs[i], "://")
		if raw := rawPublishers[scheme]; raw != nil {
			fmt.Fprintf(stderr, "lapse bench: relay drain: a plain publisher to the same broker…\n")
			r.rawPS, r.rawErr = raw(ctx, specs[i], 2*orders, size)
		}
		out = append(out, r)
	}
	return out, nil
}

// forgetNewSinks returns a function that unregisters, at the end of the
// run, the sinks of names the store did not know before it: a benchmark
// leaves no sink behind to collect deliveries nobody makes.
func forgetNewSinks(ctx context.Context, st store.Outbox, names []string, stderr io.Writer) (func(), error) {
	before, err := st.OutboxStats(ctx)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, s := range before.Sinks {
		known[s.Sink] = true
	}
	return func() {
		for _, n := range names {
			if known[n] {
				continue
			}
			if _, err := st.ForgetSink(context.WithoutCancel(ctx), n); err != nil {
				fmt.Fprintf(stderr, "lapse bench: forgetting the run's sink %s: %v\n", n, err)
			}
		}
	}, nil
}

// withDrains adds the drain measurements to the run's relay results, by sink.
func withDrains(rs []bench.RelayResult, ds []drainResult) []bench.RelayResult {
	for _, d := range ds {
		i := slices.IndexFunc(rs, func(r bench.RelayResult) bool { return r.Sink == d.sink })
		if i < 0 {
			rs = append(rs, bench.RelayResult{Sink: d.sink})
			i = len(rs) - 1
		}
		rs[i].DrainEvents, rs[i].DrainPerS, rs[i].RawPerS = d.events, d.perS, d.rawPS
		if d.rawErr != nil {
			rs[i].RawError = d.rawErr.Error()
		}
	}
	return rs
}
