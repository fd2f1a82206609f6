package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/timer"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// lossCheck is the tests' Config.LossCheck: a loss is seen within it.
const lossCheck = 100 * time.Millisecond

// fakeStore is the orders table of a data-loss test: the timers scheduled,
// and a seed function that schedules again every one not yet delivered, as
// lapse's seed schedules every pending order.
type fakeStore struct {
	mu      sync.Mutex
	pending map[string]time.Time
	seeds   int
}

func newFakeStore() *fakeStore { return &fakeStore{pending: map[string]time.Time{}} }

func (f *fakeStore) add(key string, due time.Time) {
	f.mu.Lock()
	f.pending[key] = due
	f.mu.Unlock()
}

// handler forgets the timers it is given: their orders are cancelled.
func (f *fakeStore) handler(_ context.Context, due []timer.Timer) error {
	f.mu.Lock()
	for _, tm := range due {
		if !tm.Due.Before(f.pending[tm.Key]) {
			delete(f.pending, tm.Key)
		}
	}
	f.mu.Unlock()
	return nil
}

func (f *fakeStore) seed(s *amqptimer.Scheduler) func(context.Context) error {
	return func(ctx context.Context) error {
		f.mu.Lock()
		var ts []timer.Timer
		for key, due := range f.pending {
			ts = append(ts, timer.Timer{Key: key, Due: due})
		}
		f.seeds++
		f.mu.Unlock()
		return s.ScheduleMany(ctx, ts)
	}
}

// waitStats waits until cond holds for s's counters, failing t after
// timeout.
func waitStats(t *testing.T, s *amqptimer.Scheduler, what string, timeout time.Duration, cond func(amqptimer.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond(s.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (stats %+v)", what, timeout, s.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scheduleSpread schedules n timers due from 4 to 7 s ahead: each waits
// first in level 5 (3.2 s) or 6 (6.4 s), and is there when the test
// damages the queues right after.
func scheduleSpread(t *testing.T, s *amqptimer.Scheduler, store *fakeStore, n int) (keys []string, last time.Time) {
	t.Helper()
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("lost-%03d", i)
		due := start.Add(4*time.Second + time.Duration(i)*3*time.Second/time.Duration(n))
		store.add(key, due)
		if err := s.Schedule(context.Background(), key, due); err != nil {
			t.Fatal(err)
		}
		keys, last = append(keys, key), due
	}
	return keys, last
}

// checkDelivered checks that every timer was delivered, none before its due
// time, and reports how many were delivered twice (those the loss spared
// and the seed sent again).
func checkDelivered(t *testing.T, rec *recorder, store *fakeStore, keys []string, last time.Time) {
	t.Helper()
	rec.waitDelivered(t, time.Until(last)+10*time.Second, keys...)
	twice := 0
	for _, key := range keys {
		ds := rec.deliveries(key)
		for _, d := range ds {
			if d.At.Before(d.Due) {
				t.Errorf("%s: delivered %v before its due time", key, d.Due.Sub(d.At))
			}
		}
		if len(ds) > 1 {
			twice++
		}
	}
	t.Logf("%d timers delivered after the loss, %d of them twice; %d seeds", len(keys), twice, store.seeds)
}

// The wait queues and the ready queue are purged while 60 timers wait in
// them: the check finds the waiting queues shorter than the timers this
// instance published there, the timers are seeded again from the store, and
// every one is delivered, none early.
func TestPurgeReseeds(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
	store := newFakeStore()
	s.SetSeed(store.seed(s))
	rec := newRecorder(store.handler)
	run(t, s, rec.handler(1))
	// A new topology has no seed marker: the first check seeds (nothing yet).
	waitStats(t, s, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })

	keys, last := scheduleSpread(t, s, store, 60)
	levels, ready, _, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	purged := 0
	for _, q := range append(levels, ready) {
		n, err := ch.QueuePurge(q, false)
		if err != nil {
			t.Fatal(err)
		}
		purged += n
	}
	if purged == 0 {
		t.Fatal("the purge found no timer to remove")
	}
	waitStats(t, s, "the loss seen and the timers seeded again", 5*time.Second, func(st amqptimer.Stats) bool {
		return st.Losses >= 1 && st.Seeds >= 2
	})
	t.Logf("purged %d timers", purged)
	checkDelivered(t, rec, store, keys, last)
}

// Two waiting queues and an exchange of the ladder are deleted while timers
// wait in them: the check finds them missing, declares the topology again
// (bindings included, or timers passing through would be dropped), and the
// timers are seeded again; every one is delivered, none early, and a timer
// scheduled afterwards goes through the rebuilt ladder.
func TestDeleteReseeds(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
	store := newFakeStore()
	s.SetSeed(store.seed(s))
	rec := newRecorder(store.handler)
	run(t, s, rec.handler(1))
	waitStats(t, s, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })

	keys, last := scheduleSpread(t, s, store, 40)
	levels, _, _, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range []string{levels[5], levels[6]} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.ExchangeDelete(levels[4], false, false); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s, "the loss seen and the timers seeded again", 5*time.Second, func(st amqptimer.Stats) bool {
		return st.Losses >= 1 && st.Seeds >= 2
	})
	checkDelivered(t, rec, store, keys, last)
	// 2.5 s = 25 units = 11001: levels 4, 3 and 0.
	after := time.Now().Add(2500 * time.Millisecond)
	if err := s.Schedule(context.Background(), "after", after); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, time.Until(after)+5*time.Second, "after")
}

// Two instances start on a new topology: one of them seeds, once. An
// instance that dies while seeding releases the seed lock with its
// connection, and the other seeds in its place.
func TestSeedLock(t *testing.T) {
	t.Parallel()
	t.Run("one seed for two instances", func(t *testing.T) {
		t.Parallel()
		prefix := newPrefix(t, amqptimer.DefaultLevels)
		var (
			mu    sync.Mutex
			seeds int
		)
		seed := func(context.Context) error {
			mu.Lock()
			seeds++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond) // a seed takes a while: the other instance looks meanwhile
			return nil
		}
		var ss []*amqptimer.Scheduler
		for c := range 2 {
			s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
			s.SetSeed(seed)
			run(t, s, newRecorder(nil).handler(c))
			ss = append(ss, s)
		}
		deadline := time.Now().Add(5 * time.Second)
		for ss[0].Stats().Seeds+ss[1].Stats().Seeds == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no instance seeded within 5s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(5 * lossCheck) // both look again: the marker is there
		mu.Lock()
		defer mu.Unlock()
		if seeds != 1 {
			t.Errorf("%d seeds, want 1", seeds)
		}
	})
	t.Run("the seed of an instance that died is taken over", func(t *testing.T) {
		t.Parallel()
		prefix := newPrefix(t, amqptimer.DefaultLevels)
		started := make(chan struct{})
		a := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
		a.SetSeed(func(ctx context.Context) error {
			close(started)
			<-ctx.Done() // hangs until its instance is gone
			return ctx.Err()
		})
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		doneA := make(chan error, 1)
		go func() { doneA <- a.Run(ctxA, newRecorder(nil).handler(1)) }()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("instance a never started its seed")
		}
		b := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
		b.SetSeed(func(context.Context) error { return nil })
		run(t, b, newRecorder(nil).handler(2))
		time.Sleep(5 * lossCheck) // b looks while a holds the lock
		if got := b.Stats().Seeds; got != 0 {
			t.Fatalf("b seeded %d times while a held the seed lock", got)
		}
		// a dies in the middle of its seed: its connections, and the lock, go.
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-doneA:
			if !errors.Is(err, rabbit.ErrClosed) {
				t.Errorf("a's Run returned %v once a was closed, want rabbit.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("a's Run still running 5s after a was closed")
		}
		waitStats(t, b, "b seeds in a's place", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })
	})
}

// The marker queue holds one message after a seed; purging it (what a loss
// looks like when the whole topology is gone) makes the next check seed.
func TestMissingMarkerReseeds(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
	s.SetSeed(func(context.Context) error { return nil })
	run(t, s, newRecorder(nil).handler(1))
	waitStats(t, s, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })
	_, _, marker, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	if got := depth(t, conn, marker); got != 1 {
		t.Fatalf("the marker queue holds %d messages, want 1", got)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueuePurge(marker, false); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s, "a seed after the marker went", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 2 })
	if got := depth(t, conn, marker); got != 1 {
		t.Errorf("the marker queue holds %d messages after the seed, want 1", got)
	}
}
