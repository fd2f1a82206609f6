package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	lnats "github.com/lapsehq/lapse/outbox/nats"
	"github.com/lapsehq/lapse/outbox/sinktest"
)

// serverAddr is the NATS server (with JetStream) the tests run against:
// LAPSE_TEST_NATS (nats://host:port), 127.0.0.1:4222 when unset; set to
// empty, the tests are skipped. Each test works in subjects and a stream of
// its own and deletes the stream when it ends.
//
//	nats-server -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server
func serverAddr(t testing.TB) string {
	t.Helper()
	u, ok := os.LookupEnv("LAPSE_TEST_NATS")
	if !ok {
		u = "nats://127.0.0.1:4222"
	}
	if u == "" {
		t.Skip("LAPSE_TEST_NATS is empty: set it to nats://host:port of a server with JetStream to run")
	}
	return strings.TrimPrefix(u, "nats://")
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// admin is a JetStream client of the test server, on a connection of its
// own, closed when t ends.
func admin(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect("nats://"+serverAddr(t), natsgo.Name("lapse outbox/nats tests"))
	if err != nil {
		t.Fatalf("connect to NATS at %s (start it: nats-server -js): %v", serverAddr(t), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newPrefix returns a subject prefix of t's own; the stream named after
// it, if any, is deleted when t ends.
func newPrefix(t testing.TB, js jetstream.JetStream) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "lapsetest." + hex.EncodeToString(b)
	t.Cleanup(func() { deleteStream(t, js, lnats.StreamName(prefix)) })
	return prefix
}

func deleteStream(t testing.TB, js jetstream.JetStream, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("delete stream %s: %v", name, err)
	}
}

// newSink returns a sink on the test server, closed when t ends.
func newSink(t testing.TB, cfg lnats.Config) *lnats.Sink {
	t.Helper()
	if cfg.Servers == nil {
		cfg.Servers = []string{serverAddr(t)}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := lnats.New(ctx, cfg)
	if err != nil {
		t.Fatalf("nats.New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// receiver reads the whole stream with an ordered consumer, in the
// background.
type receiver struct {
	mu  sync.Mutex
	got []sinktest.Delivery
}

func consume(t testing.TB, js jetstream.JetStream, stream string) *receiver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer on %s: %v", stream, err)
	}
	r := &receiver{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d := sinktest.Delivery{Body: m.Data(), Route: m.Subject(), Headers: map[string]string{}}
		for k := range m.Headers() {
			d.Headers[k] = m.Headers().Get(k)
		}
		d.ContentType = d.Headers["Content-Type"]
		r.mu.Lock()
		r.got = append(r.got, d)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("consume %s: %v", stream, err)
	}
	t.Cleanup(cc.Stop)
	return r
}

// Received implements sinktest.Receiver.
func (r *receiver) Received() []sinktest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// waitFor waits up to 30 s until r holds at least n messages.
func (r *receiver) waitFor(t testing.TB, n int) []sinktest.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.Received()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived in 30 s", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func publish(t testing.TB, s *lnats.Sink, evs []order.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Publish(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Publish: %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func mustPublish(t testing.TB, s *lnats.Sink, evs []order.Event) {
	t.Helper()
	for i, err := range publish(t, s, evs) {
		if err != nil {
			t.Fatalf("Publish event %d (%s): %v", i, evs[i].ID, err)
		}
	}
}

func streamInfo(t testing.TB, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return info
}

func TestConformance(t *testing.T) {
	js := admin(t)
	var prefix string // this subtest's: RouteOf reads it
	sinktest.Run(t, sinktest.Features{
		HeaderPrefix: lnats.HeaderPrefix,
		RouteOf:      func(typ string) string { return prefix + "." + typ },
		Dedupes:      true,
	}, func(t *testing.T, format outbox.Format) (outbox.Sink, sinktest.Receiver) {
		prefix = newPrefix(t, js)
		s := newSink(t, lnats.Config{Prefix: prefix, Format: format})
		return s, consume(t, js, s.Stream())
	})
}

func TestMessageCarriesIDTypeAndCloudEventHeaders(t *testing.T) {
	t.Parallel()
	js := admin(t)
	prefix := newPrefix(t, js)
	s := newSink(t, lnats.Config{Prefix: prefix, Format: outbox.FormatCloudEvents})
	r := consume(t, js, s.Stream())
	evs := sinktest.Events("h", 3, order.EventCancelled)
	mustPublish(t, s, evs)
	for _, d := range r.waitFor(t, len(evs)) {
		id := d.Headers[jetstream.MsgIDHeader]
		i := slices.IndexFunc(evs, func(e order.Event) bool { return e.ID == id })
		if i < 0 {
			t.Fatalf("message with Nats-Msg-Id %q: none of the events published", id)
		}
		e := evs[i]
		checks := map[string]string{
			"Content-Type": "application/json", "ce-id": e.ID, "ce-type": e.Type,
			"ce-subject": e.OrderID, "ce-specversion": "1.0", "ce-source": outbox.EventSource,
		}
		for k, want := range checks {
			if got := d.Headers[k]; got != want {
				t.Errorf("event %s: header %s = %q, want %q", e.ID, k, got, want)
			}
		}
		if d.Route != prefix+".order.cancelled" {
			t.Errorf("event %s on subject %q, want %s.order.cancelled", e.ID, d.Route, prefix)
		}
		if string(d.Body) != string(e.Payload) {
			t.Errorf("event %s: body %s, want the payload %s", e.ID, d.Body, e.Payload)
		}
	}
}

// TestRepublishIsDeduplicated: the stream keeps one message per event id
// within its duplicate window, whatever the number of publishes.
func TestRepublishIsDeduplicated(t *testing.T) {
	t.Parallel()
	js := admin(t)
	prefix := newPrefix(t, js)
	s := newSink(t, lnats.Config{Prefix: prefix})
	evs := sinktest.Events("d", 5, order.EventCreated)
	mustPublish(t, s, evs)
	mustPublish(t, s, evs)     // the relay crashed before marking them
	mustPublish(t, s, evs[:2]) // and again
	if n := streamInfo(t, js, s.Stream()).State.Msgs; n != uint64(len(evs)) {
		t.Errorf("the stream holds %d messages after republishing %d events, want %d", n, len(evs), len(evs))
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	js := admin(t)

	t.Run("created with file storage and the dedupe window", func(t *testing.T) {
		prefix := newPrefix(t, js)
		cfg, err := lnats.ParseURL("nats://" + serverAddr(t) + "/" + prefix + "?dedupe_window=90s")
		if err != nil {
			t.Fatal(err)
		}
		s := newSink(t, cfg)
		if s.Stream() != lnats.StreamName(prefix) {
			t.Errorf("stream %q, want %q", s.Stream(), lnats.StreamName(prefix))
		}
		info := streamInfo(t, js, s.Stream())
		if info.Config.Storage != jetstream.FileStorage || info.Config.Duplicates != 90*time.Second ||
			!slices.Equal(info.Config.Subjects, []string{prefix + ".>"}) {
			t.Errorf("stream config %+v: want file storage, a 90 s duplicate window, subjects %s.>", info.Config, prefix)
		}
	})

	t.Run("an existing stream is used unchanged", func(t *testing.T) {
		base := newPrefix(t, js)
		prefix := base + ".orders"
		name := lnats.StreamName(base) + "_OPS"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The operator's stream captures more than the sink's subjects.
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{base + ".*.>"}, Storage: jetstream.MemoryStorage,
			Duplicates: time.Minute, MaxMsgs: 1000,
		}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { deleteStream(t, js, name) })
		s := newSink(t, lnats.Config{Prefix: prefix, DedupeWindow: 5 * time.Minute})
		if s.Stream() != name {
			t.Errorf("sink uses stream %q, want the existing %q", s.Stream(), name)
		}
		info := streamInfo(t, js, name)
		if info.Config.Storage != jetstream.MemoryStorage || info.Config.Duplicates != time.Minute || info.Config.MaxMsgs != 1000 {
			t.Errorf("the existing stream was changed: %+v", info.Config)
		}
		mustPublish(t, s, sinktest.Events("u", 2, order.EventCreated))
		if n := streamInfo(t, js, name).State.Msgs; n != 2 {
			t.Errorf("the existing stream holds %d messages, want 2", n)
		}
	})

	t.Run("a stream of that name capturing other subjects is an error", func(t *testing.T) {
		prefix := newPrefix(t, js)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: lnats.StreamName(prefix), Subjects: []string{prefix + "x.>"}}); err != nil {
			t.Fatal(err)
		}
		_, err := lnats.New(ctx, lnats.Config{Servers: []string{serverAddr(t)}, Prefix: prefix, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "does not capture") {
			t.Errorf("New: %v, want an error saying the stream does not capture the subjects", err)
		}
	})

	t.Run("a stream capturing only some event types is an error", func(t *testing.T) {
		prefix := newPrefix(t, js)
		name := lnats.StreamName(prefix) + "_PART"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".order.created"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteStream(t, js, name) })
		_, err := lnats.New(ctx, lnats.Config{Servers: []string{serverAddr(t)}, Prefix: prefix, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "only part") {
			t.Errorf("New: %v, want an error saying the stream captures only part of the subjects", err)
		}
	})

	t.Run("?stream= naming another stream than the one capturing the subjects is an error", func(t *testing.T) {
		prefix := newPrefix(t, js)
		newSink(t, lnats.Config{Prefix: prefix}) // creates the default stream
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := lnats.New(ctx, lnats.Config{Servers: []string{serverAddr(t)}, Prefix: prefix, Stream: "OTHER", Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "not to stream OTHER") {
			t.Errorf("New: %v, want an error naming both streams", err)
		}
	})
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	js := admin(t)

	limited := func(t *testing.T, cfg jetstream.StreamConfig) (*lnats.Sink, string) {
		prefix := newPrefix(t, js)
		cfg.Name, cfg.Subjects = lnats.StreamName(prefix), []string{prefix + ".>"}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		return newSink(t, lnats.Config{Prefix: prefix}), cfg.Name
	}

	t.Run("a full stream that discards new messages refuses", func(t *testing.T) {
		s, _ := limited(t, jetstream.StreamConfig{MaxMsgs: 2, Discard: jetstream.DiscardNew, Duplicates: time.Minute})
		errs := publish(t, s, sinktest.Events("f", 3, order.EventCreated))
		refusals := 0
		for _, err := range errs {
			var refused *outbox.RefusedError
			switch {
			case err == nil:
			case errors.As(err, &refused) && !refused.Permanent:
				refusals++
			default:
				t.Errorf("%v: want a refusal, not permanent", err)
			}
		}
		if refusals != 1 {
			t.Errorf("%d of 3 events refused by a stream holding at most 2, want 1 (%v)", refusals, errs)
		}
	})

	t.Run("a message larger than the stream allows is refused for good", func(t *testing.T) {
		s, _ := limited(t, jetstream.StreamConfig{MaxMsgSize: 2048, Duplicates: time.Minute})
		evs := sinktest.Events("l", 2, order.EventCreated)
		evs[0].Payload = []byte(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)
		errs := publish(t, s, evs)
		var refused *outbox.RefusedError
		if !errors.As(errs[0], &refused) || !refused.Permanent {
			t.Errorf("large event: %v, want a permanent refusal", errs[0])
		}
		if errs[1] != nil {
			t.Errorf("small event: %v", errs[1])
		}
	})

	t.Run("no stream for the subjects refuses", func(t *testing.T) {
		prefix := newPrefix(t, js)
		s := newSink(t, lnats.Config{Prefix: prefix})
		deleteStream(t, js, s.Stream())
		for i, err := range publish(t, s, sinktest.Events("n", 2, order.EventCreated)) {
			var refused *outbox.RefusedError
			if !errors.As(err, &refused) || refused.Permanent {
				t.Errorf("event %d with no stream: %v, want a refusal, not permanent", i, err)
			}
		}
	})

	t.Run("an event type that cannot be a subject is refused for good", func(t *testing.T) {
		prefix := newPrefix(t, js)
		s := newSink(t, lnats.Config{Prefix: prefix})
		evs := sinktest.Events("w", 2, "order.*")
		var refused *outbox.RefusedError
		if err := publish(t, s, evs)[0]; !errors.As(err, &refused) || !refused.Permanent {
			t.Errorf("event of type order.*: %v, want a permanent refusal", err)
		}
	})
}

// TestConnectionCutAndRestored puts a TCP proxy (toxiproxy, in this
// process) between the sink and the server, cuts it, and restores it:
// while cut, Publish fails fast with transport errors; once restored, the
// sink reconnects by itself and publishing the failed events again
// delivers every event, once.
func TestConnectionCutAndRestored(t *testing.T) {
	t.Parallel()
	js := admin(t)
	prefix := newPrefix(t, js)

	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "nats", "127.0.0.1:0", serverAddr(t))
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)

	s := newSink(t, lnats.Config{
		Servers: []string{proxy.Listen}, Prefix: prefix, PublishTimeout: 10 * time.Second,
		Options: []natsgo.Option{natsgo.ReconnectWait(50 * time.Millisecond)},
	})
	r := consume(t, js, s.Stream()) // directly, not through the proxy
	before := sinktest.Events("c", 20, order.EventCreated)
	mustPublish(t, s, before)

	proxy.Stop() // every connection through it is closed; new ones refused
	during := sinktest.Events("c", 20, order.EventPaid)
	start := time.Now()
	errs := publish(t, s, during)
	t.Logf("with the connection cut, Publish answered in %s: %v", time.Since(start).Round(time.Millisecond), errs[0])
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Publish with the connection cut took %s; want it to fail fast, not wait for the 10 s timeout", took)
	}
	for i, err := range errs {
		var refused *outbox.RefusedError
		switch {
		case err == nil:
			t.Errorf("event %d reported delivered with the connection cut", i)
		case errors.As(err, &refused):
			t.Errorf("event %d: %v is a refusal; a lost connection is a transport failure", i, err)
		}
	}

	pctx, cancelPing := context.WithTimeout(context.Background(), time.Second)
	defer cancelPing()
	if err := s.Ping(pctx); err == nil {
		t.Error("Ping with the connection cut: nil")
	}

	if err := proxy.Start(); err != nil {
		t.Fatalf("restore the proxy: %v", err)
	}
	// The relay's retry: publish what failed until it is delivered; the
	// sink must come back by itself within the deadline.
	pending := during
	deadline := time.Now().Add(20 * time.Second)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still failing 20 s after the connection was restored: %v", len(pending), publish(t, s, pending[:1]))
		}
		var still []order.Event
		for i, err := range publish(t, s, pending) {
			if err != nil {
				still = append(still, pending[i])
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond) // the relay's back-off, shortened
		}
	}

	if err := s.Ping(pctx); err != nil {
		t.Errorf("Ping once delivered again: %v", err)
	}
	all := append(slices.Clone(before), during...)
	got := r.waitFor(t, len(all))
	count := map[string]int{}
	for _, d := range got {
		count[d.Headers[jetstream.MsgIDHeader]]++
	}
	for _, e := range all {
		if count[e.ID] != 1 {
			t.Errorf("event %s is in the stream %d times, want once", e.ID, count[e.ID])
		}
	}
	if n := streamInfo(t, js, s.Stream()).State.Msgs; n != uint64(len(all)) {
		t.Errorf("the stream holds %d messages, want %d", n, len(all))
	}
}

func TestPublishWithEndedContext(t *testing.T) {
	t.Parallel()
	js := admin(t)
	s := newSink(t, lnats.Config{Prefix: newPrefix(t, js)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range s.Publish(ctx, sinktest.Events("x", 3, order.EventCreated)) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("event %d: %v, want context.Canceled", i, err)
		}
	}
	if n := streamInfo(t, js, s.Stream()).State.Msgs; n != 0 {
		t.Errorf("the stream holds %d messages; nothing may be sent with an ended context", n)
	}
}

func TestRawPublishRate(t *testing.T) {
	t.Parallel()
	js := admin(t)
	prefix := newPrefix(t, js)
	s := newSink(t, lnats.Config{Prefix: prefix}) // creates the stream
	rate, err := lnats.RawPublishRate(context.Background(), "nats://"+serverAddr(t)+"/"+prefix, 1200, 200)
	if err != nil || rate <= 0 {
		t.Fatalf("RawPublishRate: %v, %v; want a positive rate", rate, err)
	}
	info := streamInfo(t, js, s.Stream())
	if info.State.Msgs != 1200 || info.State.NumSubjects != 1 {
		t.Errorf("the stream holds %d messages on %d subjects, want 1200 on %s.%s", info.State.Msgs, info.State.NumSubjects, prefix, lnats.RawType)
	}
	if _, err := lnats.RawPublishRate(context.Background(), "nats://"+serverAddr(t)+"/"+prefix, 0, 10); err == nil {
		t.Error("RawPublishRate of 0 messages: no error")
	}
}
