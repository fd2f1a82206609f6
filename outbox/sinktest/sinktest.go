// Package sinktest is the conformance suite every outbox sink passes: a
// sink's test constructs it against its real destination (the machine's
// RabbitMQ, NATS, a kfake cluster, an HTTP receiver) with a Receiver that
// reads back what arrived, and calls Run.
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// Delivery is one message as it arrived at the destination.
type Delivery struct {
	// Body is the message body, as sent.
	Body []byte
	// ContentType is the message's content type (header or property).
	ContentType string
	// Headers are the message's headers (HTTP headers, AMQP headers, Kafka
	// record headers, NATS headers), one value each.
	Headers map[string]string
	// Key is the Kafka record key, empty elsewhere.
	Key string
	// Route is where the message went: an AMQP routing key, a NATS subject,
	// a Kafka topic, an HTTP path.
	Route string
}

// Receiver reads back what a sink delivered.
type Receiver interface {
	// Received returns every message that arrived so far, in arrival order.
	Received() []Delivery
}

// Features declares what the suite checks of a sink.
type Features struct {
	// HeaderPrefix is the CloudEvents binary-mode attribute prefix of the
	// transport ("ce_", "cloudEvents:", "ce-"); empty for a sink that sends
	// structured CloudEvents (webhooks).
	HeaderPrefix string
	// RouteOf, when set, is the route each event type must arrive on.
	RouteOf func(eventType string) string
	// KeyIsOrderID: the message key is the order id (Kafka).
	KeyIsOrderID bool
	// Dedupes: the destination drops a republished event id (NATS's
	// Nats-Msg-Id window); otherwise a republish arrives twice.
	Dedupes bool
}

// New makes a sink writing format, and a receiver of what it delivers, fresh
// for each test (its own exchange, topic, stream or endpoint).
type New func(t *testing.T, format outbox.Format) (outbox.Sink, Receiver)

// Run runs the suite.
func Run(t *testing.T, f Features, newSink New) {
	t.Run("every event arrives with its id, type and order id", func(t *testing.T) {
		sink, recv := newSink(t, outbox.FormatJSON)
		evs := Events("o", 20, order.EventCreated)
		mustPublish(t, sink, evs)
		got := waitFor(t, recv, len(evs))
		byID := map[string]outbox.Envelope{}
		for _, d := range got {
			var env outbox.Envelope
			if err := json.Unmarshal(d.Body, &env); err != nil {
				t.Fatalf("body %q is not the JSON envelope: %v", d.Body, err)
			}
			byID[env.ID] = env
			if f.RouteOf != nil && d.Route != f.RouteOf(env.Type) {
				t.Errorf("event %s arrived on %q, want %q", env.ID, d.Route, f.RouteOf(env.Type))
			}
			if f.KeyIsOrderID && d.Key != env.OrderID {
				t.Errorf("event %s key %q, want the order id %q", env.ID, d.Key, env.OrderID)
			}
			if !strings.HasPrefix(d.ContentType, "application/json") {
				t.Errorf("content type %q, want application/json", d.ContentType)
			}
		}
		for _, e := range evs {
			env, ok := byID[e.ID]
			if !ok {
				t.Fatalf("event %s never arrived", e.ID)
			}
			if env.Type != e.Type || env.OrderID != e.OrderID || !env.CreatedAt.Equal(e.CreatedAt) || string(env.Data) != string(e.Payload) {
				t.Errorf("event %s arrived as %+v, want %+v", e.ID, env, e)
			}
		}
	})

	t.Run("events of one order published one after another arrive in that order", func(t *testing.T) {
		sink, recv := newSink(t, outbox.FormatJSON)
		const orders, rounds = 10, 8
		var want []order.Event
		for r := range rounds {
			round := Events("p", orders, fmt.Sprintf("order.step%d", r))
			mustPublish(t, sink, round)
			want = append(want, round...)
		}
		got := waitFor(t, recv, len(want))
		seen := map[string][]string{} // order id → types in arrival order
		for _, d := range got {
			var env outbox.Envelope
			if err := json.Unmarshal(d.Body, &env); err != nil {
				t.Fatal(err)
			}
			seen[env.OrderID] = append(seen[env.OrderID], env.Type)
		}
		for id, types := range seen {
			if !slices.IsSorted(types) {
				t.Errorf("order %s: events arrived as %v, want them in publish order", id, types)
			}
		}
	})

	t.Run("CloudEvents carry the id, type, source, subject and time", func(t *testing.T) {
		sink, recv := newSink(t, outbox.FormatCloudEvents)
		evs := Events("c", 5, order.EventPaid)
		mustPublish(t, sink, evs)
		got := waitFor(t, recv, len(evs))
		seen := map[string]bool{}
		for _, d := range got {
			attrs := map[string]string{}
			var data []byte
			if f.HeaderPrefix == "" {
				var ce map[string]json.RawMessage
				if err := json.Unmarshal(d.Body, &ce); err != nil {
					t.Fatalf("structured CloudEvent %q: %v", d.Body, err)
				}
				if !strings.HasPrefix(d.ContentType, "application/cloudevents+json") {
					t.Errorf("content type %q, want application/cloudevents+json", d.ContentType)
				}
				for k, v := range ce {
					var s string
					if json.Unmarshal(v, &s) == nil {
						attrs[k] = s
					}
				}
				data = ce["data"]
			} else {
				for k, v := range d.Headers {
					if name, ok := strings.CutPrefix(k, f.HeaderPrefix); ok {
						attrs[name] = v
					}
				}
				data = d.Body
			}
			if attrs["specversion"] != "1.0" || attrs["source"] != outbox.EventSource || attrs["type"] != order.EventPaid {
				t.Errorf("CloudEvent attributes %v: want specversion 1.0, source %s, type %s", attrs, outbox.EventSource, order.EventPaid)
			}
			e := find(evs, attrs["id"])
			if e == nil {
				t.Fatalf("CloudEvent id %q is none of the events published (attributes %v)", attrs["id"], attrs)
			}
			seen[e.ID] = true
			if attrs["subject"] != e.OrderID {
				t.Errorf("subject %q, want the order id %q", attrs["subject"], e.OrderID)
			}
			if ts, err := time.Parse(time.RFC3339Nano, attrs["time"]); err != nil || !ts.Equal(e.CreatedAt) {
				t.Errorf("time %q, want %s", attrs["time"], e.CreatedAt.Format(time.RFC3339Nano))
			}
			if !jsonEqual(data, e.Payload) {
				t.Errorf("data %s, want the payload %s", data, e.Payload)
			}
		}
		if len(seen) != len(evs) {
			t.Errorf("%d of %d CloudEvents arrived", len(seen), len(evs))
		}
	})

	t.Run("a republished event keeps its id", func(t *testing.T) {
		sink, recv := newSink(t, outbox.FormatJSON)
		evs := Events("r", 3, order.EventCancelled)
		mustPublish(t, sink, evs)
		mustPublish(t, sink, evs[:1]) // the relay crashed before marking it
		want := len(evs) + 1
		if f.Dedupes {
			want = len(evs)
		}
		got := waitFor(t, recv, want)
		ids := map[string]int{}
		for _, d := range got {
			var env outbox.Envelope
			if err := json.Unmarshal(d.Body, &env); err != nil {
				t.Fatal(err)
			}
			ids[env.ID]++
		}
		if f.Dedupes && ids[evs[0].ID] != 1 {
			t.Errorf("republished event arrived %d times; the destination dedupes, want 1", ids[evs[0].ID])
		}
		if !f.Dedupes && ids[evs[0].ID] != 2 {
			t.Errorf("republished event arrived %d times, want 2 with one id", ids[evs[0].ID])
		}
		if f.Dedupes {
			time.Sleep(200 * time.Millisecond) // nothing more may come: a duplicate would arrive by now
			if n := len(recv.Received()); n != want {
				t.Errorf("%d messages arrived, want %d", n, want)
			}
		}
	})

	t.Run("publish returns once its context ends", func(t *testing.T) {
		sink, _ := newSink(t, outbox.FormatJSON)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan []error, 1)
		evs := Events("x", 3, order.EventCreated)
		go func() { done <- sink.Publish(ctx, evs) }()
		select {
		case errs := <-done:
			if len(errs) != len(evs) {
				t.Fatalf("%d results for %d events", len(errs), len(evs))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Publish with an ended context did not return in 10 s")
		}
	})

	t.Run("the name holds no secret", func(t *testing.T) {
		sink, _ := newSink(t, outbox.FormatJSON)
		name := sink.Name()
		if name == "" {
			t.Fatal("empty name")
		}
		for _, secret := range []string{"guest:guest", "whsec_", "password", "@"} {
			if strings.Contains(name, secret) {
				t.Errorf("name %q contains %q", name, secret)
			}
		}
	})
}

var seq atomic.Int64

// Events returns n events of type typ, one for each of n orders named
// prefix-<test-unique number>-i; payload is small JSON naming the order.
func Events(prefix string, n int, typ string) []order.Event {
	base := seq.Add(1)
	evs := make([]order.Event, n)
	for i := range evs {
		id := fmt.Sprintf("%s-%d-%d", prefix, base, i)
		evs[i] = order.Event{
			Seq: seq.Add(1), ID: uuid.Must(uuid.NewV7()).String(), Type: typ, OrderID: id,
			Payload:   []byte(fmt.Sprintf(`{"schema_version":1,"id":%q,"status":"PENDING"}`, id)),
			CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
		}
	}
	return evs
}

func mustPublish(t *testing.T, sink outbox.Sink, evs []order.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := sink.Publish(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Publish: %d results for %d events", len(errs), len(evs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Publish event %d (%s): %v", i, evs[i].ID, err)
		}
	}
}

// WaitFor waits up to 30 s until recv holds at least n messages, and
// returns them.
func waitFor(t *testing.T, recv Receiver, n int) []Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := recv.Received()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived in 30 s", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func find(evs []order.Event, id string) *order.Event {
	for i := range evs {
		if evs[i].ID == id {
			return &evs[i]
		}
	}
	return nil
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
