package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

// scripted is a Client whose answers a test decides per call: the logic
// under test is the dispatcher's (the transports have their own suite
// against the reference inventory).
type scripted struct {
	mu     sync.Mutex
	sent   []inventory.Command
	answer func(n int, c inventory.Command) (inventory.Answer, error)
}

func (s *scripted) Send(ctx context.Context, c inventory.Command) (inventory.Answer, error) {
	s.mu.Lock()
	s.sent = append(s.sent, c)
	n := len(s.sent)
	s.mu.Unlock()
	return s.answer(n, c)
}

func (s *scripted) Close() error { return nil }

func (s *scripted) commands() []inventory.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]inventory.Command(nil), s.sent...)
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	if err == nil {
		err = s.Migrate(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// cancelRemote creates n orders whose stock the inventory holds and cancels
// them: n release tasks.
func cancelRemote(t *testing.T, s store.Store, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("o%03d", i)
		_, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
			ID: id, Items: []order.Item{{SKU: "tee", Qty: 2}}, AmountCents: 100, Currency: "EUR",
			Timeout: time.Minute, ReservationID: "res-" + id,
		})
		if err == nil {
			_, err = s.CancelOrder(context.Background(), id)
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// run starts d and stops it at the end of the test.
func run(t *testing.T, d *inventory.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stats(t *testing.T, s store.Store) store.TaskStats {
	t.Helper()
	st, err := s.TaskStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestDispatcherSendsEachTaskAndSettlesItDone(t *testing.T) {
	s := openStore(t)
	ids := cancelRemote(t, s, 30)
	c := &scripted{answer: func(_ int, c inventory.Command) (inventory.Answer, error) {
		return inventory.Answer{TaskID: c.TaskID, Result: inventory.Success}, nil
	}}
	d := &inventory.Dispatcher{Store: s, Client: c, DispatcherConfig: inventory.DispatcherConfig{BatchSize: 7, Logger: quiet}}
	run(t, d)
	d.Notify()
	waitFor(t, "every task done", func() bool { return len(c.commands()) >= 30 && stats(t, s).Pending == 0 })
	seen := map[string]bool{}
	for _, cmd := range c.commands() {
		if seen[cmd.OrderID] {
			t.Errorf("order %s's release sent twice", cmd.OrderID)
		}
		seen[cmd.OrderID] = true
		if err := cmd.Validate(); err != nil || cmd.Action != inventory.Release || cmd.ReservationID != "res-"+cmd.OrderID ||
			len(cmd.Items) != 1 || cmd.Items[0] != (inventory.Item{SKU: "tee", Qty: 2}) {
			t.Errorf("command %+v (%v): want the release of its order's reservation and items", cmd, err)
		}
	}
	for _, id := range ids {
		o, err := s.GetOrder(context.Background(), id)
		if err != nil || len(o.Tasks) != 1 || o.Tasks[0].Status != order.TaskDone || o.Tasks[0].Result != string(inventory.Success) {
			t.Fatalf("order %s tasks %+v, %v: want its release DONE", id, o.Tasks, err)
		}
	}
}

func TestRejectedTaskIsDeadAtOnceAndSentAgainAfterARetry(t *testing.T) {
	s := openStore(t)
	cancelRemote(t, s, 1)
	var reject sync.Map
	reject.Store("on", true)
	c := &scripted{answer: func(_ int, c inventory.Command) (inventory.Answer, error) {
		if v, _ := reject.Load("on"); v == true {
			return inventory.Answer{TaskID: c.TaskID, Result: inventory.Rejected, Reason: "unknown_reservation"}, nil
		}
		return inventory.Answer{TaskID: c.TaskID, Result: inventory.AlreadyDone}, nil
	}}
	d := &inventory.Dispatcher{Store: s, Client: c, DispatcherConfig: inventory.DispatcherConfig{Logger: quiet, Interval: 10 * time.Millisecond}}
	run(t, d)
	waitFor(t, "the task DEAD", func() bool { return stats(t, s).Dead == 1 })
	if n := len(c.commands()); n != 1 {
		t.Fatalf("a rejected task was sent %d times, want once (DEAD at once)", n)
	}
	dead, err := s.ListTasks(context.Background(), store.ListTasksParams{Dead: true})
	if err != nil || len(dead) != 1 || dead[0].LastError != "REJECTED: unknown_reservation" {
		t.Fatalf("dead tasks %+v, %v", dead, err)
	}
	reject.Store("on", false)
	if n, err := s.RetryTasks(context.Background(), store.RetryTasksParams{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	waitFor(t, "the retried task done", func() bool { st := stats(t, s); return st.Dead == 0 && st.Pending == 0 })
}

func TestFailingTaskBacksOffThenDiesAfterMaxAttempts(t *testing.T) {
	s := openStore(t)
	cancelRemote(t, s, 1)
	var mu sync.Mutex
	var at []time.Time
	c := &scripted{answer: func(int, inventory.Command) (inventory.Answer, error) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return inventory.Answer{}, errors.New("connection refused")
	}}
	d := &inventory.Dispatcher{Store: s, Client: c, DispatcherConfig: inventory.DispatcherConfig{
		Logger: quiet, Interval: 5 * time.Millisecond, MaxAttempts: 4, RetryBase: 40 * time.Millisecond, RetryMax: time.Second,
	}}
	run(t, d)
	waitFor(t, "the task DEAD", func() bool { return stats(t, s).Dead == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 4 {
		t.Fatalf("sent %d times, want 4 (MaxAttempts)", len(at))
	}
	// Backoff 40, 80, 160 ms (±20%, and the store's ms clock).
	for i, want := range []time.Duration{40, 80, 160} {
		want *= time.Millisecond
		if gap := at[i+1].Sub(at[i]); gap < want*8/10-2*time.Millisecond {
			t.Errorf("gap %d: %s, want at least %s", i, gap, want*8/10)
		}
	}
	dead, err := s.ListTasks(context.Background(), store.ListTasksParams{Dead: true})
	if err != nil || len(dead) != 1 || dead[0].LastError != "connection refused" || dead[0].Attempts != 4 {
		t.Fatalf("dead %+v, %v", dead, err)
	}
}

func TestAHungSendEndsWithinTheLeaseAndIsSentAgain(t *testing.T) {
	s := openStore(t)
	cancelRemote(t, s, 1)
	c := &scripted{answer: func(_ int, c inventory.Command) (inventory.Answer, error) {
		return inventory.Answer{TaskID: c.TaskID, Result: inventory.AlreadyDone}, nil
	}}
	c1 := &hangFirst{scripted: c}
	d := &inventory.Dispatcher{Store: s, Client: c1, DispatcherConfig: inventory.DispatcherConfig{
		Logger: quiet, Interval: 5 * time.Millisecond, Lease: 500 * time.Millisecond, RetryBase: 10 * time.Millisecond,
	}}
	run(t, d)
	waitFor(t, "the task done", func() bool { return stats(t, s).Pending == 0 && len(c.commands()) >= 2 })
}

// hangFirst blocks its first send until the context ends, as a client
// whose connection hangs does.
type hangFirst struct {
	*scripted
	once sync.Once
}

func (h *hangFirst) Send(ctx context.Context, c inventory.Command) (inventory.Answer, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		h.mu.Lock()
		h.sent = append(h.sent, c)
		h.mu.Unlock()
		<-ctx.Done()
		return inventory.Answer{}, ctx.Err()
	}
	return h.scripted.Send(ctx, c)
}
