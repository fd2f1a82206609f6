package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/outbox/sinktest"
)

// withExchange returns the broker URL u with the exchange parameter.
func withExchange(u, exchange string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "exchange=" + exchange
}

// newSink returns a sink on an exchange of t's own, which the sink declares
// and t deletes when it ends, and the admin connection.
func newSink(t *testing.T, brokerURL string, format outbox.Format) (*rabbitmq.Sink, string, *amqp.Connection) {
	t.Helper()
	admin := rabbittest.Admin(t)
	exchange := rabbittest.Name("events")
	rabbittest.DeleteExchangeAtEnd(t, admin, exchange)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink, err := rabbitmq.New(ctx, withExchange(brokerURL, exchange), format, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	return sink, exchange, admin
}

// receiver is what a queue bound with # to the sink's exchange received.
type receiver struct{ rec *rabbittest.Recorder }

func (r receiver) Received() []sinktest.Delivery {
	var out []sinktest.Delivery
	for _, d := range r.rec.Deliveries() {
		headers := map[string]string{}
		for k, v := range d.Headers {
			headers[k] = fmt.Sprint(v)
		}
		out = append(out, sinktest.Delivery{Body: d.Body, ContentType: d.ContentType, Headers: headers, Route: d.RoutingKey})
	}
	return out
}

func TestSinkConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Features{HeaderPrefix: rabbitmq.HeaderPrefix, RouteOf: func(typ string) string { return typ }},
		func(t *testing.T, format outbox.Format) (outbox.Sink, sinktest.Receiver) {
			sink, exchange, admin := newSink(t, rabbittest.URL(t), format)
			return sink, receiver{rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, exchange, "#"))}
		})
}

func TestEventsAreDurableTopicMessages(t *testing.T) {
	sink, exchange, admin := newSink(t, rabbittest.URL(t), outbox.FormatJSON)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, exchange, "order.*"))
	evs := sinktest.Events("m", 2, order.EventCancelled)
	mustPublish(t, sink, evs)
	rec.WaitIDs(t, []string{evs[0].ID, evs[1].ID})

	for _, d := range rec.Deliveries() {
		e := evs[0]
		if d.MessageId == evs[1].ID {
			e = evs[1]
		}
		if d.RoutingKey != order.EventCancelled || d.Type != order.EventCancelled || d.DeliveryMode != amqp.Persistent ||
			d.AppId != "lapse" || !d.Timestamp.Equal(e.CreatedAt.Truncate(time.Second)) || d.Exchange != exchange {
			t.Errorf("message %s: routing key %q, type %q, delivery mode %d, app id %q, timestamp %s, exchange %q; want %s, %s, persistent, lapse, %s, %s",
				d.MessageId, d.RoutingKey, d.Type, d.DeliveryMode, d.AppId, d.Timestamp, d.Exchange,
				order.EventCancelled, order.EventCancelled, e.CreatedAt.Truncate(time.Second), exchange)
		}
	}
	// Declaring it again as a durable topic exchange succeeds only if that
	// is what it is (otherwise 406 PRECONDITION_FAILED).
	if err := rabbittest.Channel(t, admin).ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Errorf("the sink's exchange is not a durable topic exchange: %v", err)
	}
	if p := sink.Policy(); p != (outbox.Policy{MaxAge: 72 * time.Hour, MaxRefusals: 10}) {
		t.Errorf("Policy %+v, want 72h and 10 refusals", p)
	}
	if err := sink.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestUnroutableEventsAreRefused(t *testing.T) {
	sink, _, _ := newSink(t, rabbittest.URL(t), outbox.FormatCloudEvents) // no queue bound
	evs := sinktest.Events("u", 5, order.EventCreated)
	errs := publish(t, sink, evs)
	for i, err := range errs {
		var refused *outbox.RefusedError
		switch {
		case !errors.As(err, &refused):
			t.Errorf("event %d: %v, want an *outbox.RefusedError", i, err)
		case refused.Permanent:
			t.Errorf("event %d: refused for good; want it retried under the policy (a queue may be bound later)", i)
		case !errors.Is(err, rabbit.ErrReturned) || !strings.Contains(err.Error(), evs[i].ID):
			t.Errorf("event %d: %v, want rabbit.ErrReturned naming the event", i, err)
		}
	}
}

func TestConnectionCutLosesNoEvent(t *testing.T) {
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	sink, exchange, admin := newSink(t, proxy.URL, outbox.FormatJSON)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, exchange, "#"))
	mustPublish(t, sink, sinktest.Events("w", 1, order.EventCreated)) // the channel, opened at full speed

	// The batch trickles to the broker; the cut comes once some events were
	// routed, with the rest in flight.
	proxy.Throttle(t, 50)
	evs := sinktest.Events("cut", 1500, order.EventCancelled)
	done := make(chan []error, 1)
	go func() { done <- sink.Publish(context.Background(), evs) }()
	rabbittest.Eventually(t, 10*time.Second, func() bool { return len(rec.Deliveries()) > 100 },
		func() string { return "no event reached the queue" })
	proxy.Cut()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish did not return after the connection was cut")
	}
	if len(errs) != len(evs) {
		t.Fatalf("%d results for %d events", len(errs), len(evs))
	}

	var confirmed []string
	var failed []order.Event
	for i, err := range errs {
		var refused *outbox.RefusedError
		switch {
		case err == nil:
			confirmed = append(confirmed, evs[i].ID)
		case errors.As(err, &refused):
			t.Fatalf("event %d: %v: a lost connection is no refusal", i, err)
		default:
			failed = append(failed, evs[i])
		}
	}
	if len(failed) == 0 {
		t.Fatal("every event was confirmed although the connection was cut mid-batch")
	}
	rec.WaitIDs(t, confirmed) // never a false nil
	if err := sink.Ping(context.Background()); err == nil {
		t.Error("Ping answered nil with the broker cut off")
	}

	// The relay retries what failed once the sink is back.
	proxy.Restore(t)
	rabbittest.Eventually(t, 10*time.Second, func() bool { return sink.Ping(context.Background()) == nil },
		func() string { return "the sink did not reconnect" })
	mustPublish(t, sink, failed)
	all := make([]string, len(evs))
	for i, e := range evs {
		all[i] = e.ID
	}
	rec.WaitIDs(t, all) // none missing
	t.Logf("%d events confirmed before the cut", len(confirmed))
}

func TestNameHoldsNoPassword(t *testing.T) {
	sink, exchange, _ := newSink(t, rabbittest.URL(t), outbox.FormatJSON)
	if want := "amqp://127.0.0.1:5672/%2F/" + exchange; rabbittest.URL(t) == rabbittest.DefaultURL && sink.Name() != want {
		t.Errorf("Name %q, want %q", sink.Name(), want)
	}
	if strings.Contains(sink.Name(), "guest") || strings.Contains(sink.Name(), "@") {
		t.Errorf("Name %q holds the user or password", sink.Name())
	}
}

func TestNewFailsClearly(t *testing.T) {
	base := rabbittest.URL(t)
	admin := rabbittest.Admin(t)
	direct := rabbittest.Exchange(t, admin, amqp.ExchangeDirect)
	for _, tc := range []struct{ name, url, want string }{
		{"an exchange of another type", withExchange(base, direct), "PRECONDITION_FAILED"},
		{"a wrong password", withExchange(strings.Replace(base, "guest:guest@", "guest:sEcReT-pw@", 1), "x"), "403"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sink, err := rabbitmq.New(ctx, tc.url, outbox.FormatJSON, slog.New(slog.DiscardHandler))
			if err == nil {
				_ = sink.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "sEcReT") || ctx.Err() != nil {
				t.Errorf("New: %v; want an error with %q, at once, without the password", err, tc.want)
			}
		})
	}
}

func publish(t *testing.T, sink outbox.Sink, evs []order.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := sink.Publish(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Publish: %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func mustPublish(t *testing.T, sink outbox.Sink, evs []order.Event) {
	t.Helper()
	for i, err := range publish(t, sink, evs) {
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, evs[i].ID, err)
		}
	}
}

func TestRawPublishRate(t *testing.T) {
	admin := rabbittest.Admin(t)
	exchange := rabbittest.Name("raw")
	rabbittest.DeleteExchangeAtEnd(t, admin, exchange)
	u := withExchange(rabbittest.URL(t), exchange)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// RawPublishRate declares the exchange; nothing is bound to it yet.
	if _, err := rabbitmq.RawPublishRate(ctx, u, 10, 100); err == nil || !strings.Contains(err.Error(), "bind a queue") {
		t.Errorf("RawPublishRate with no queue bound: %v, want an error saying to bind one", err)
	}
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, exchange, "#"))
	rate, err := rabbitmq.RawPublishRate(ctx, u, 1200, 200)
	if err != nil || rate <= 0 {
		t.Fatalf("RawPublishRate = %v, %v; want a rate", rate, err)
	}
	rabbittest.Eventually(t, 10*time.Second, func() bool { return len(rec.Deliveries()) == 1200 },
		func() string { return fmt.Sprintf("%d of 1200 messages arrived", len(rec.Deliveries())) })
	if d := rec.Deliveries()[0]; len(d.Body) != 200 || d.RoutingKey != rabbitmq.RawRoutingKey || d.DeliveryMode != amqp.Persistent {
		t.Errorf("a message of %d bytes, routing key %q, delivery mode %d; want 200, %s, persistent", len(d.Body), d.RoutingKey, d.DeliveryMode, rabbitmq.RawRoutingKey)
	}
	t.Logf("raw publish rate: %.0f messages/s", rate)
}
