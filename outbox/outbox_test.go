package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
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
	relay := &outbox.Relay{Store: st, Sink: sink, Interval: 5 * time.Millisecond, Logger: discard()}
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
	want := []string{"o1 order.created", "o1 order.cancelled", "o2 order.created", "o3 order.created"}
	got := sink.events()
	if len(got) != len(want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delivered %v, want %v", got, want)
		}
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
	relay := &outbox.Relay{Store: st, Sink: sink, Interval: 5 * time.Millisecond, Logger: discard()}
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
