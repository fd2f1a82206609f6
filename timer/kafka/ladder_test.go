package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lapsehq/lapse/timer"
	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
	"github.com/lapsehq/lapse/timer/timertest"
)

// deliveries records what Run loops deliver.
type deliveries struct {
	mu      sync.Mutex
	at      map[string][]time.Time // by key: when each delivery came
	due     map[string]time.Time
	changed chan struct{}
}

func newDeliveries() *deliveries {
	return &deliveries{at: map[string][]time.Time{}, due: map[string]time.Time{}, changed: make(chan struct{})}
}

func (d *deliveries) handler(_ context.Context, ts []timer.Timer) error {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range ts {
		d.at[t.Key] = append(d.at[t.Key], now)
		d.due[t.Key] = t.Due
	}
	close(d.changed)
	d.changed = make(chan struct{})
	return nil
}

// wait waits until every key was delivered, for at most timeout.
func (d *deliveries) wait(t *testing.T, timeout time.Duration, keys ...string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		missing := 0
		for _, k := range keys {
			if len(d.at[k]) == 0 {
				missing++
			}
		}
		changed := d.changed
		d.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d of %d timers not delivered within %v", missing, len(keys), timeout)
		}
	}
}

// run is timertest.Run for this package's Scheduler.
func run(t *testing.T, s *kafkatimer.Scheduler, h timer.Handler) (stop func()) {
	return timertest.Run(t, s, h)
}

// A consumer of the ladder that dies after its forward was produced and
// before the level's offset was committed leaves the records to the next
// owner of the partition, which forwards them again: each timer is
// delivered, maybe twice, never lost and never early.
func TestKilledAfterForwardRedelivers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	var killed atomic.Bool
	died := make(chan struct{})
	kafkatimer.SetKillAfterForward(a, func() bool {
		if killed.CompareAndSwap(false, true) {
			close(died)
		}
		return true // every forward of a dies uncommitted
	})
	got := newDeliveries()
	stopA := run(t, a, got.handler)

	const n = 50
	var keys []string
	due := time.Now().Add(700 * time.Millisecond) // through the 500 ms level
	for i := range n {
		keys = append(keys, fmt.Sprintf("o-%02d", i))
		if err := a.Schedule(context.Background(), keys[i], due); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-died:
	case <-time.After(10 * time.Second):
		t.Fatal("the ladder never forwarded")
	}
	stopA() // the process is gone: its ladder died uncommitted
	run(t, b, got.handler)
	got.wait(t, 15*time.Second, keys...)

	got.mu.Lock()
	defer got.mu.Unlock()
	twice := 0
	for _, k := range keys {
		for _, at := range got.at[k] {
			if at.Before(due) {
				t.Errorf("%s: delivered %v before its due time", k, due.Sub(at))
			}
		}
		if len(got.at[k]) > 1 {
			twice++
		}
	}
	if kafkatimer.Forwarded(b) == 0 {
		t.Error("the second instance forwarded nothing: the dead ladder's records were not left to it")
	}
	t.Logf("%d timers delivered, %d of them twice; the second instance forwarded %d", n, twice, kafkatimer.Forwarded(b))
}

// A timer several levels away walks the ladder, the top level more than
// once, and arrives at its due time, not before; the top level (longer than
// what a consumer keeps in hand) pauses its partitions until their heads
// leave.
func TestFarTimerArrivesNotEarly(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.Levels = []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 1500 * time.Millisecond}
	s := mustNew(t, cfg)
	got := newDeliveries()
	run(t, s, got.handler)
	dues := map[string]time.Time{}
	now := time.Now()
	for i, d := range []time.Duration{3 * time.Second, 3*time.Second + 377*time.Millisecond, 4*time.Second + 901*time.Millisecond} {
		k := fmt.Sprintf("far-%d", i)
		dues[k] = now.Add(d)
		if err := s.Schedule(context.Background(), k, dues[k]); err != nil {
			t.Fatal(err)
		}
	}
	got.wait(t, 15*time.Second, "far-0", "far-1", "far-2")
	got.mu.Lock()
	defer got.mu.Unlock()
	for k, due := range dues {
		at := got.at[k]
		if len(at) != 1 {
			t.Errorf("%s: delivered %d times, want once", k, len(at))
			continue
		}
		if at[0].Before(due) {
			t.Errorf("%s: delivered %v before its due time", k, due.Sub(at[0]))
		}
		if late := at[0].Sub(due); late > 500*time.Millisecond {
			t.Errorf("%s: delivered %v late", k, late)
		}
		if !got.due[k].Equal(due) {
			t.Errorf("%s: delivered Due %v, scheduled %v", k, got.due[k], due)
		}
		t.Logf("%s: %v after its due time", k, at[0].Sub(due))
	}
	// Each waits in the 1.5 s level and in at least two more levels (3 s
	// less the 50 ms lead is 2.95 s: 1.5 s, then 1.45 s in the lower ones).
	if f := kafkatimer.Forwarded(s); f < 3*3 {
		t.Errorf("the ladder forwarded %d times for 3 timers: they skipped levels", f)
	}
	if kafkatimer.Paused(s) == 0 {
		t.Error("no partition of the 1.5 s level was paused")
	}
	t.Logf("%d forwards, %d pauses", kafkatimer.Forwarded(s), kafkatimer.Paused(s))
}

// The loss check seeds the timers from the store when the topics are new
// (no seed marker), not again while nothing is lost, and again after a
// topic was deleted, which it creates again.
func TestLossCheckSeeds(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.LossCheck = 100 * time.Millisecond
	s := mustNew(t, cfg)
	var seeds atomic.Int64
	seeded := make(chan struct{}, 10)
	s.SetSeed(func(ctx context.Context) error {
		seeds.Add(1)
		seeded <- struct{}{}
		return s.Schedule(ctx, "seeded", time.Now())
	})
	got := newDeliveries()
	run(t, s, got.handler)
	select {
	case <-seeded:
	case <-time.After(10 * time.Second):
		t.Fatal("new topics were not seeded")
	}
	got.wait(t, 10*time.Second, "seeded")
	time.Sleep(5 * cfg.LossCheck) // checks that must find nothing lost
	if n := seeds.Load(); n != 1 {
		t.Fatalf("seeded %d times with nothing lost, want once", n)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopics(context.Background(), "lapse-test.delay.500ms"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seeded:
	case <-time.After(10 * time.Second):
		t.Fatal("a deleted topic was not noticed")
	}
	// Timers go through the recreated topic again.
	if err := s.Schedule(context.Background(), "after", time.Now().Add(700*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 15*time.Second, "after")
	var losses uint64
	for _, ctr := range s.Counters() {
		if ctr.Name == "lapse_kafka_timers_losses_total" {
			losses = ctr.Value
		}
	}
	if losses < 2 {
		t.Errorf("lapse_kafka_timers_losses_total %d, want at least 2", losses)
	}
}
