package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recorder is a sink that fails the first failures calls, then records.
type recorder struct {
	mu       sync.Mutex
	failures int
	got      []string
}

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Publish(_ context.Context, evs []order.Event) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return outbox.ErrorsFor(len(evs), errors.New("sink down"))
	}
	for _, e := range evs {
		r.got = append(r.got, e.OrderID+" "+e.Type)
	}
	return make([]error, len(evs))
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// openStore returns a migrated SQLite store in the test's directory.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "o.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRelayDeliversInOrderAfterSinkFailures(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o1", "a")
	if _, err := st.CancelOrder(ctx, "o1"); err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, st, "o2", "a")

	sink := &recorder{failures: 1}
	relay := &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: outbox.Config{Interval: 5 * time.Millisecond, Logger: discard()}}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.events()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("relay delivered %v", sink.events())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Written while the relay runs, delivered by its last pass at shutdown at the latest.
	storetest.Create(t, st, "o3", "a")
	cancel()
	<-done
	// Orders are independent: only each order's own events keep their order.
	got := sink.events()
	want := []string{"o1 order.created", "o1 order.cancelled", "o2 order.created", "o3 order.created"}
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("delivered %v, want %v in any order across orders", got, want)
	}
	if slices.Index(got, "o1 order.created") > slices.Index(got, "o1 order.cancelled") {
		t.Fatalf("delivered %v: o1's events out of order", got)
	}
	if left, _ := st.UnpublishedEvents(ctx, 10); len(left) != 0 {
		t.Fatalf("%d events left unpublished", len(left))
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cancelling is a sink that ends the relay's run (a shutdown) while it
// publishes, after accepting the events.
type cancelling struct {
	recorder
	cancel context.CancelFunc
}

func (c *cancelling) Publish(ctx context.Context, evs []order.Event) []error {
	c.cancel()
	return c.recorder.Publish(ctx, evs)
}

// Events a sink accepted just as shutdown began are marked published anyway,
// so the relay's last pass does not deliver them again.
func TestRelayShutdownDuringPublishDeliversOnce(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o1", "a")
	runCtx, cancel := context.WithCancel(ctx)
	sink := &cancelling{cancel: cancel}
	relay := &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: outbox.Config{Interval: 5 * time.Millisecond, Logger: discard()}}
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not stop within 10s of its context ending")
	}
	if got := sink.events(); len(got) != 1 || got[0] != "o1 order.created" {
		t.Fatalf("delivered %v, want [o1 order.created] once", got)
	}
	if left, _ := st.UnpublishedEvents(ctx, 10); len(left) != 0 {
		t.Fatalf("%d events left unpublished", len(left))
	}
}

// scripted is a sink whose answer for each event comes from answer (nil
// answer: delivered); it records what it delivered, with ids.
type scripted struct {
	name   string
	mu     sync.Mutex
	answer func(e order.Event, call int) error
	calls  map[string]int
	got    []order.Event
}

func newScripted(name string, answer func(e order.Event, call int) error) *scripted {
	return &scripted{name: name, answer: answer, calls: map[string]int{}}
}

func (s *scripted) Name() string { return s.name }

func (s *scripted) Publish(_ context.Context, evs []order.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(evs))
	for i, e := range evs {
		s.calls[e.ID]++
		if s.answer != nil {
			errs[i] = s.answer(e, s.calls[e.ID])
		}
		if errs[i] == nil {
			s.got = append(s.got, e)
		}
	}
	return errs
}

func (s *scripted) delivered() []order.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]order.Event(nil), s.got...)
}

// run starts r and returns a stop function that waits for it.
func run(t *testing.T, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("relay did not stop in 15 s")
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fastConfig() outbox.Config {
	return outbox.Config{Interval: 5 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Logger: discard()}
}

// A refusal for good makes the event dead for that sink alone: the sink's
// other orders go on, the event's own order waits behind it, the other sink
// gets everything; a retry delivers it and then what waited.
func TestRelayDeadLettersAndRetry(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "bad", "a")
	if _, err := st.CancelOrder(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, st, "good", "a")
	refuse := true
	var mu sync.Mutex
	hook := newScripted("hook", func(e order.Event, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse && e.OrderID == "bad" {
			return outbox.RefusedForGood(errors.New("400 Bad Request"))
		}
		return nil
	})
	mq := newScripted("mq", nil)
	stop := run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{hook, mq}, Config: fastConfig()})
	waitUntil(t, "mq to get all 3 events", func() bool { return len(mq.delivered()) == 3 })
	waitUntil(t, "hook to get the good order", func() bool { return len(hook.delivered()) == 1 })
	waitUntil(t, "the bad event to be dead", func() bool {
		dead, err := st.ListEvents(ctx, store.ListEventsParams{Dead: true})
		return err == nil && len(dead) == 1 && dead[0].OrderID == "bad" && dead[0].Type == order.EventCreated
	})
	if got := hook.delivered(); got[0].OrderID != "good" {
		t.Fatalf("hook delivered %v", got)
	}
	stop()
	mu.Lock()
	refuse = false
	mu.Unlock()
	if n, err := st.RetryEvents(ctx, store.RetryEventsParams{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("retry: %d %v", n, err)
	}
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{hook, mq}, Config: fastConfig()})
	waitUntil(t, "hook to get the bad order's events in order", func() bool { return len(hook.delivered()) == 3 })
	got := hook.delivered()
	if got[1].OrderID != "bad" || got[1].Type != order.EventCreated || got[2].Type != order.EventCancelled {
		t.Fatalf("hook delivered %v after the retry, want bad's created then cancelled", names(got))
	}
}

// A sink's policy bounds its refusals: the tenth unroutable return is dead.
func TestRelayMaxRefusals(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o", "a")
	sink := &policySink{scripted: newScripted("amqp", func(order.Event, int) error { return outbox.Refused(errors.New("NO_ROUTE")) })}
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: fastConfig()})
	waitUntil(t, "the event to be dead", func() bool {
		dead, err := st.ListEvents(ctx, store.ListEventsParams{Dead: true})
		return err == nil && len(dead) == 1
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, n := range sink.calls {
		if n != 3 {
			t.Fatalf("event %s published %d times, want 3 (MaxRefusals)", id, n)
		}
	}
}

type policySink struct{ *scripted }

func (p *policySink) Policy() outbox.Policy { return outbox.Policy{MaxRefusals: 3} }

// A 410 stops the relay for that sink only; its events stay pending.
func TestRelayGoneDisablesOneSink(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o", "a")
	gone := newScripted("gone", func(order.Event, int) error { return fmt.Errorf("410: %w", outbox.ErrGone) })
	ok := newScripted("ok", nil)
	reg := prometheus.NewRegistry()
	m, err := outbox.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Metrics = m
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{gone, ok}, Config: cfg})
	waitUntil(t, "ok to deliver", func() bool { return len(ok.delivered()) == 1 })
	waitUntil(t, "the gone sink to be disabled", func() bool {
		return testutil.ToFloat64(m.Disabled("gone")) == 1
	})
	storetest.Create(t, st, "p", "a")
	waitUntil(t, "ok to deliver the second", func() bool { return len(ok.delivered()) == 2 })
	gone.mu.Lock()
	calls := len(gone.calls)
	gone.mu.Unlock()
	if calls != 1 {
		t.Fatalf("the gone sink was asked about %d events, want 1 (it stops after the 410)", calls)
	}
	pending, err := st.ListEvents(ctx, store.ListEventsParams{Sink: "gone"})
	if err != nil || len(pending) != 2 {
		t.Fatalf("gone's pending events: %d (%v), want 2 kept", len(pending), err)
	}
}

// crashingStore fails every settle: the relay dies between publish and mark.
type crashingStore struct{ store.Store }

func (crashingStore) SettleEvents(context.Context, string, []store.Outcome) error {
	return errors.New("killed before the mark")
}

// A relay that published but never marked leaves a lease: when it runs out
// another relay publishes the same event again, with the same id.
func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o", "a")
	first := newScripted("s", nil)
	cfg := fastConfig()
	cfg.Lease = 300 * time.Millisecond
	stop := run(t, &outbox.Relay{Store: crashingStore{st}, Sinks: []outbox.Sink{first}, Config: cfg})
	waitUntil(t, "the first relay to publish", func() bool { return len(first.delivered()) >= 1 })
	stop()
	second := newScripted("s", nil)
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{second}, Config: cfg})
	waitUntil(t, "the second relay to publish it again", func() bool { return len(second.delivered()) == 1 })
	if a, b := first.delivered()[0], second.delivered()[0]; a.ID != b.ID {
		t.Fatalf("redelivered with id %s, first %s: want the same id", b.ID, a.ID)
	}
	waitUntil(t, "nothing left unpublished", func() bool {
		left, err := st.UnpublishedEvents(context.Background(), 10)
		return err == nil && len(left) == 0
	})
}

// Published events past retention go; the relay runs retention itself.
func TestRelayRetention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	storetest.Stock(t, st, 10, "a")
	storetest.Create(t, st, "o", "a")
	sink := newScripted("s", nil)
	cfg := fastConfig()
	cfg.Retention = time.Millisecond
	cfg.RetentionInterval = 10 * time.Millisecond
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: cfg})
	waitUntil(t, "delivery", func() bool { return len(sink.delivered()) == 1 })
	waitUntil(t, "the published event to be deleted", func() bool {
		var rows int
		if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM lapse_outbox").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows == 0
	})
}

func names(evs []order.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.OrderID + " " + e.Type
	}
	return out
}

// While Yield says the cancels have the store, the relay claims nothing
// until MaxYield has passed, then a batch; once Yield stops saying so it
// delivers the rest at once, and the held time is counted per sink.
func TestRelayYieldsToABurst(t *testing.T) {
	st := openStore(t)
	storetest.Stock(t, st, 10, "a")
	for i := range 3 {
		storetest.Create(t, st, fmt.Sprintf("y%d", i), "a")
	}
	var busy atomic.Bool
	busy.Store(true)
	sink := &recorder{}
	reg := prometheus.NewRegistry()
	m, err := outbox.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Workers, cfg.BatchSize = 1, 1
	cfg.Yield, cfg.MaxYield, cfg.Metrics = busy.Load, 400*time.Millisecond, m
	start := time.Now()
	run(t, &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: cfg})
	waitUntil(t, "the first event, after a hold", func() bool { return len(sink.events()) >= 1 })
	if held := time.Since(start); held < 400*time.Millisecond {
		t.Fatalf("the first event went out %s after the start, while Yield said true: want a hold of MaxYield (400ms)", held)
	}
	// Still busy: one batch (of 1) per MaxYield, not the rest at once.
	if n := len(sink.events()); n > 2 {
		t.Fatalf("%d events delivered within one hold of the first: the relay did not hold", n)
	}
	busy.Store(false)
	waitUntil(t, "every event once Yield says false", func() bool { return len(sink.events()) == 3 })
	if s := testutil.ToFloat64(m.Yielded("recorder")); s < 0.4 {
		t.Fatalf("lapse_outbox_yield_seconds_total = %.3f, want at least the 0.4 s held", s)
	}
}
