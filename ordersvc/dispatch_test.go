package ordersvc_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

// gatedClient answers cancelled to every send, each send waiting for the
// gate to open: while it is shut, the dispatcher's one worker is busy.
type gatedClient struct {
	gate chan struct{}
	mu   sync.Mutex
	sent []string
}

func (c *gatedClient) Send(ctx context.Context, d ordersvc.Delivery) (ordersvc.Answer, error) {
	select {
	case <-c.gate:
	case <-ctx.Done():
		return ordersvc.Answer{}, ctx.Err()
	}
	c.mu.Lock()
	c.sent = append(c.sent, d.ID)
	c.mu.Unlock()
	return ordersvc.Answer{Result: ordersvc.Cancelled}, nil
}

func (c *gatedClient) Close() error { return nil }

func (c *gatedClient) sends() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sent)
}

func commands(ids ...string) []store.ClaimedCommand {
	cs := make([]store.ClaimedCommand, len(ids))
	for i, id := range ids {
		cs[i] = store.ClaimedCommand{Command: order.Command{ID: id, OrderID: "o-" + id, Attempts: 1}}
	}
	return cs
}

// A cancel may hand its commands to a running dispatcher (Hold), never
// before Run or after it returned. What the cancels hand over while the
// workers are busy waits for the next pass, all of it in one batch and one
// settle; the hand-over refuses more than Workers×BatchSize waiting; and
// Run returns only once every command handed over is sent and settled.
func TestHandedOverCommandsGoTogetherAndAreBounded(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := &gatedClient{gate: make(chan struct{})}
	var mu sync.Mutex
	var settles int
	d := &ordersvc.Dispatcher{Store: st, Client: client, DispatcherConfig: ordersvc.DispatcherConfig{
		Workers: 1, BatchSize: 3, Lease: 7 * time.Second, Interval: time.Hour,
		OnSettled: func(store.SettleCommandsResult) { mu.Lock(); settles++; mu.Unlock() },
	}}
	settled := func() int { mu.Lock(); defer mu.Unlock(); return settles }
	if _, ok := d.Hold(); ok {
		t.Fatal("Hold before Run: ok, want refused")
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	var first *ordersvc.Handoff
	for deadline := time.Now().Add(10 * time.Second); ; {
		var ok bool
		if first, ok = d.Hold(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Hold never succeeded on a running dispatcher")
		}
		time.Sleep(time.Millisecond)
	}
	if first.Lease() != 7*time.Second {
		t.Fatalf("Lease %v, want the dispatcher's 7s", first.Lease())
	}
	// The worker takes the first command and waits at the gate with it.
	first.Deliver(commands("c1"))
	waitFor(t, "the worker to take c1", func() bool { return ordersvc.Waiting(d) == 0 })
	// Three cancels hand over one command each meanwhile: they wait.
	for _, id := range []string{"c2", "c3", "c4"} {
		h, ok := d.Hold()
		if !ok {
			t.Fatalf("Hold for %s refused with %d waiting", id, ordersvc.Waiting(d))
		}
		h.Deliver(commands(id))
	}
	// Workers×BatchSize (3) wait: the hand-over is full.
	if h, ok := d.Hold(); ok {
		h.Release()
		t.Fatal("Hold granted with Workers×BatchSize commands waiting")
	}
	close(client.gate)
	waitFor(t, "c1 to c4 settled", func() bool { return len(client.sends()) == 4 && settled() >= 2 })
	if got := settled(); got != 2 {
		t.Errorf("%d settles for c1, then c2–c4 handed over together: want 2", got)
	}
	// A Hold still open at shutdown: Run waits for it, and sends its commands.
	last, ok := d.Hold()
	if !ok {
		t.Fatal("Hold refused with nothing waiting")
	}
	last.Release()
	last.Release() // a second Release is a no-op
	last, ok = d.Hold()
	if !ok {
		t.Fatal("Hold refused after a Release")
	}
	stop()
	select {
	case <-ran:
		t.Fatal("Run returned while a Hold was open")
	case <-time.After(50 * time.Millisecond):
	}
	last.Deliver(commands("c5"))
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its Holds were delivered")
	}
	if got := client.sends(); !slices.Contains(got, "c5") {
		t.Errorf("sent %v: c5, delivered while Run was stopping, was not sent", got)
	}
	if _, ok := d.Hold(); ok {
		t.Fatal("Hold after Run returned: ok, want refused")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
