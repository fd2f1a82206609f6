// Package timertest is the conformance suite every timer backend passes
// before lapse runs on it (docs/architecture.md §1), in the manner of watermill's
// universal tests: a backend declares what it guarantees in Features, and the
// suite tests exactly that, against a real server for sql, redis and amqp.
//
//	func TestConformance(t *testing.T) {
//		timertest.Exercise(t, timertest.Features{BatchSize: 200, LargeN: 100_000, CanUnschedule: true},
//			func(t *testing.T) timer.Scheduler { … })
//	}
//
// # The factory
//
// Every call of the factory with the same t returns a new scheduler instance
// on that test's backend state: the instances share their timers (that is
// what Durable and MultiConsumer mean). Calls with different tests must not
// see each other's timers, because a Run loop drains every due timer of its
// backend and the subtests run in parallel: a backend on a shared server
// namespaces its state per test (a key prefix or database per t, say). A
// backend whose instances cannot share state (memory) returns the same
// instance for the same t. The suite closes nothing itself; the factory
// registers cleanup with t.Cleanup. Keys carry a prefix unique to each
// subtest, so a timer that leaks from another test is reported as such.
//
// # Assumptions
//
// The backend under test redelivers a failed batch after timer.Backoff (the
// default), uses the same clock as the test process for due times, and is
// configured with Features.BatchSize as its batch size.
package timertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/timer"
)

// Features is what a backend guarantees; the suite tests exactly that.
type Features struct {
	// Durable: timers survive a restart of the scheduler (a new instance on
	// the same backend state).
	Durable bool
	// MultiConsumer: several Run loops (one per instance) may consume the
	// same backend concurrently; each timer goes to exactly one of them.
	MultiConsumer bool
	// CanUnschedule: Unschedule really removes a timer, and a Schedule that
	// replaces a due time removes the old one. Without it (amqp), a removed
	// or replaced schedule may still be delivered, carrying its own Due; its
	// consumer re-checks the store.
	CanUnschedule bool
	// Lease is how long a batch claimed by a consumer that died (or hangs)
	// takes to be delivered again; 0 when not applicable.
	Lease time.Duration
	// BatchSize is the most timers one handler call may receive: the size
	// the backend under test is configured with.
	BatchSize int
	// LargeN is how many timers the "many due at once" test schedules
	// (100_000 for memory; fewer for slow backends; 0 skips it).
	LargeN int
}

// Factory returns a new scheduler instance on t's backend state; see the
// package documentation.
type Factory func(t *testing.T) timer.Scheduler

const (
	// window bounds every wait for something that must happen: a due
	// timer's delivery, Run's return after its handler finished. Waits end
	// as soon as the condition holds, so a generous bound costs nothing
	// when the backend works.
	window = 5 * time.Second
	// prompt bounds how long Run takes to return once its ctx ends, when no
	// batch is in hand.
	prompt = time.Second
	// quiet is how long the suite watches for something that must not
	// happen (plus the Lease, where an unacknowledged batch would come back
	// only after it).
	quiet = 300 * time.Millisecond
	// precision is how far a delivered Timer.Due may be from the due time
	// scheduled (storage resolution: Redis scores are milliseconds). Firing
	// early is never tolerated.
	precision = time.Millisecond
	// drainBound bounds the "many due at once" test.
	drainBound = 60 * time.Second
)

// Exercise runs the whole suite.
func Exercise(t *testing.T, f Features, newScheduler Factory) {
	if f.BatchSize <= 0 {
		t.Fatal("timertest: Features.BatchSize must be set")
	}
	tests := []struct {
		name string
		test func(*testing.T, Features, Factory)
		// applies says whether the backend declares what the test needs; a
		// test that does not apply is not run at all (not skipped: CI treats a
		// skip as a suite that did not run).
		applies func(Features) bool
	}{
		{"a timer fires at or after its due time, never before", testFiresOnTime, nil},
		{"Schedule is an upsert: the latest due time wins", testUpsert, nil},
		{"Unschedule removes a pending timer", testUnschedule, func(f Features) bool { return f.CanUnschedule }},
		{"a handler error redelivers the whole batch after backoff", testRedeliver, nil},
		{"a handler may schedule its timer again", testHandlerSchedules, nil},
		{"batches never exceed BatchSize", testBatchSize, nil},
		{"many timers due at once drain, each exactly once", testLargeN, func(f Features) bool { return f.LargeN > 0 }},
		{"Schedule and Unschedule are safe while Run delivers", testConcurrentSchedule, nil},
		{"several consumers share the timers, each to exactly one", testMultiConsumer, func(f Features) bool { return f.MultiConsumer }},
		{"a killed consumer's batch comes back within the lease", testKilledConsumer, func(f Features) bool { return f.MultiConsumer && f.Lease > 0 }},
		{"timers survive a restart", testDurable, func(f Features) bool { return f.Durable }},
		{"Run can be started again after it returns", testRunAgain, nil},
		{"Run returns its ctx's error promptly", testRunReturns, nil},
		{"a batch in hand when Run is cancelled is finished", testCancelFinishesBatch, nil},
		{"a batch that fails as Run is cancelled is redelivered", testCancelFailedBatch, nil},
	}
	for _, tt := range tests {
		if tt.applies != nil && !tt.applies(f) {
			t.Logf("not applicable to this backend: %s", tt.name)
			continue
		}
		t.Run(tt.name, func(t *testing.T) { tt.test(t, f, newScheduler) })
	}
}

func testFiresOnTime(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	// A far timer first, so a Run loop that planned its sleep for it must be
	// woken by the nearer ones scheduled after it started.
	h.schedule(s, "far", time.Now().Add(time.Hour))
	h.run(s, 1, nil)
	offsets := []time.Duration{
		-time.Hour, -time.Second, -time.Millisecond, 0,
		time.Millisecond, 1500 * time.Microsecond, 10*time.Millisecond + 123456*time.Nanosecond,
		25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		200*time.Millisecond + 999999*time.Nanosecond, 300 * time.Millisecond,
	}
	type planned struct{ at, due time.Time }
	want := map[string]planned{}
	var names []string
	for i, off := range offsets {
		name := fmt.Sprintf("t%02d%+v", i, off)
		now := time.Now()
		want[name] = planned{at: now, due: h.schedule(s, name, now.Add(off))}
		names = append(names, name)
	}
	// A cluster 137 µs apart: a loop that wakes for one and claims "what is
	// nearly due" with it delivers the next ones early.
	now := time.Now()
	for i := range 60 {
		name := fmt.Sprintf("c%02d", i)
		want[name] = planned{at: now, due: h.schedule(s, name, now.Add(50*time.Millisecond+time.Duration(i)*137*time.Microsecond))}
		names = append(names, name)
	}
	h.waitDelivered(window+300*time.Millisecond, names...)
	var maxLate time.Duration
	for _, name := range names {
		w := want[name]
		ds := h.got(name)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", name, len(ds))
			continue
		}
		d := ds[0]
		if d.At.Before(w.due) {
			t.Errorf("%s: fired %v before its due time", name, w.due.Sub(d.At))
		}
		if !near(d.Due, w.due) {
			t.Errorf("%s: delivered Due %v, scheduled %v", name, d.Due, w.due)
		}
		if d.Attempt != 1 {
			t.Errorf("%s: first delivery has Attempt %d, want 1", name, d.Attempt)
		}
		maxLate = max(maxLate, d.At.Sub(later(w.due, w.at)))
	}
	if n := len(h.got("far")); n != 0 {
		t.Errorf("the timer due in an hour was delivered %d times", n)
	}
	t.Logf("latest delivery: %v after its due time (or after being scheduled, for due times in the past)", maxLate)
}

func testUpsert(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	h.run(s, 1, nil)
	now := time.Now()
	first, early := now.Add(1500*time.Millisecond), now.Add(100*time.Millisecond)
	h.schedule(s, "earlier", first)
	h.schedule(s, "earlier", early)
	h.schedule(s, "later", early)
	last := h.schedule(s, "later", now.Add(500*time.Millisecond))
	h.schedule(s, "same", early)
	h.schedule(s, "same", early)
	h.waitFor("earlier, later and same delivered at their final due times", window+first.Sub(now), func() bool {
		return h.deliveredAt("earlier", early) && h.deliveredAt("later", last) && h.deliveredAt("same", early)
	})
	// Watch past the replaced due time of "earlier".
	time.Sleep(time.Until(first) + quiet)

	check := func(name string, want time.Time, replaced ...time.Time) {
		t.Helper()
		final := 0
		for _, d := range h.got(name) {
			if d.At.Before(d.Due) {
				t.Errorf("%s: fired %v before its Due", name, d.Due.Sub(d.At))
			}
			switch {
			case near(d.Due, want):
				final++
			case f.CanUnschedule:
				t.Errorf("%s: delivered with Due %v, a due time that was replaced by %v", name, d.Due, want)
			case !slices.ContainsFunc(replaced, func(r time.Time) bool { return near(d.Due, r) }):
				t.Errorf("%s: delivered with Due %v, never scheduled", name, d.Due)
			}
		}
		if final != 1 && (f.CanUnschedule || final == 0) {
			t.Errorf("%s: delivered %d times with its final due time, want once", name, final)
		}
	}
	check("earlier", early, first)
	check("later", last, early)
	check("same", early)
	if ds := h.got("earlier"); len(ds) > 0 && !ds[0].At.Before(first) {
		t.Errorf("earlier: fired at %v, not before its replaced due time %v", ds[0].At, first)
	}
}

func testUnschedule(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	if err := s.Unschedule(context.Background(), h.key("never-scheduled")); err != nil {
		t.Errorf("Unschedule of an unknown key: %v", err)
	}
	if !f.CanUnschedule {
		t.Skip("the backend cannot unschedule (Features.CanUnschedule)")
	}
	h.schedule(s, "gone-past", time.Now().Add(-time.Second))
	h.unschedule(s, "gone-past")
	h.run(s, 1, nil)
	due := time.Now().Add(150 * time.Millisecond)
	h.schedule(s, "gone", due)
	h.schedule(s, "kept", due)
	h.unschedule(s, "gone")
	h.unschedule(s, "gone") // twice is fine
	h.waitDelivered(window, "kept")
	time.Sleep(quiet)
	for _, name := range []string{"gone", "gone-past"} {
		if n := len(h.got(name)); n != 0 {
			t.Errorf("%s: unscheduled, yet delivered %d times", name, n)
		}
	}
}

func testRedeliver(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	const n, okAttempt = 5, 3
	h := newHarness(t)
	s := newScheduler(t)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("k%d", i))
		h.schedule(s, names[i], time.Now().Add(-time.Millisecond))
	}
	h.run(s, 1, func(_ context.Context, due []timer.Timer) error {
		for _, tm := range due {
			if tm.Attempt < okAttempt {
				return errors.New("timertest: handler refuses the batch")
			}
		}
		return nil
	})
	h.waitFor("every timer delivered with Attempt 3", window+timer.Backoff(1)+timer.Backoff(2)+2*f.Lease, func() bool {
		for _, name := range names {
			ds := h.byKey[name]
			if len(ds) == 0 || ds[len(ds)-1].Attempt < okAttempt {
				return false
			}
		}
		return true
	})
	time.Sleep(quiet + f.Lease) // acknowledged: never again
	for _, name := range names {
		ds := h.got(name)
		if len(ds) != okAttempt {
			t.Errorf("%s: delivered %d times, want %d (twice refused, then acknowledged)", name, len(ds), okAttempt)
		}
		for i, d := range ds {
			if d.Attempt != i+1 {
				t.Errorf("%s: delivery %d has Attempt %d", name, i+1, d.Attempt)
			}
			if !near(d.Due, ds[0].Due) {
				t.Errorf("%s: redelivery %d carries Due %v, want the original %v", name, i+1, d.Due, ds[0].Due)
			}
			if i == 0 {
				continue
			}
			if gap, backoff := d.At.Sub(ds[i-1].At), timer.Backoff(ds[i-1].Attempt); gap < backoff {
				t.Errorf("%s: redelivered %v after attempt %d failed, before the backoff of %v", name, gap, ds[i-1].Attempt, backoff)
			}
		}
	}
}

func testHandlerSchedules(t *testing.T, _ Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	var again atomic.Int64 // the due time, in UnixNano, the handler scheduled
	h.schedule(s, "again", time.Now())
	h.run(s, 1, func(ctx context.Context, due []timer.Timer) error {
		if again.Load() != 0 {
			return nil
		}
		next := time.Now().Add(100 * time.Millisecond)
		again.Store(next.UnixNano())
		if err := s.Schedule(ctx, due[0].Key, next); err != nil {
			t.Errorf("Schedule from the handler: %v", err)
		}
		return nil // acknowledges this delivery, not the new schedule
	})
	h.waitFor("the timer delivered a second time", window+100*time.Millisecond, func() bool { return len(h.byKey["again"]) >= 2 })
	time.Sleep(quiet)
	ds := h.got("again")
	if next := time.Unix(0, again.Load()); ds[1].At.Before(next) {
		t.Errorf("second delivery %v before the due time the handler scheduled", next.Sub(ds[1].At))
	}
	if len(ds) != 2 {
		t.Errorf("delivered %d times, want twice (once scheduled by the test, once by the handler)", len(ds))
	}
}

func testBatchSize(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	n := 2*f.BatchSize + f.BatchSize/2 + 1
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("b%05d", i))
		h.schedule(s, names[i], time.Now().Add(-time.Duration(i)*time.Microsecond))
	}
	h.run(s, 1, nil)
	h.waitDelivered(window, names...)
	time.Sleep(quiet)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, size := range h.batches {
		if size < 1 || size > f.BatchSize {
			t.Errorf("batch %d has %d timers, want 1 to %d", i, size, f.BatchSize)
		}
	}
	for _, name := range names {
		if got := len(h.byKey[name]); got != 1 {
			t.Errorf("%s: delivered %d times, want once", name, got)
		}
	}
	t.Logf("%d timers in %d batches", n, len(h.batches))
}

func testLargeN(t *testing.T, f Features, newScheduler Factory) {
	if f.LargeN <= 0 {
		t.Skip("Features.LargeN is 0")
	}
	t.Parallel()
	n := f.LargeN
	h := newHarness(t)
	s := newScheduler(t)
	due := time.Now()
	start := time.Now()
	const workers = 4
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := s.Schedule(context.Background(), h.key(fmt.Sprint(i)), due); err != nil {
					errs <- fmt.Errorf("schedule timer %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	scheduled := time.Since(start)

	// The harness's recorder keeps every delivery; this one only counts.
	var (
		mu         sync.Mutex
		seen       = make([]uint8, n)
		distinct   int
		duplicates int
		batches    int
		oversize   int
		done       = make(chan struct{})
	)
	start = time.Now()
	h.runHandler(s, 1, func(_ context.Context, due []timer.Timer) error {
		mu.Lock()
		defer mu.Unlock()
		batches++
		if len(due) > f.BatchSize {
			oversize++
		}
		for _, tm := range due {
			name, ok := strings.CutPrefix(tm.Key, h.prefix)
			i, err := strconv.Atoi(name)
			if !ok || err != nil || i < 0 || i >= n {
				t.Errorf("delivered a key never scheduled: %q", tm.Key)
				continue
			}
			if seen[i]++; seen[i] > 1 {
				duplicates++
				continue
			}
			if distinct++; distinct == n {
				close(done)
			}
		}
		return nil
	})
	select {
	case <-done:
	case err := <-h.failed:
		t.Fatal(err)
	case <-time.After(drainBound):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d timers delivered within %v", distinct, n, drainBound)
	}
	drained := time.Since(start)
	time.Sleep(quiet)
	mu.Lock()
	defer mu.Unlock()
	if duplicates > 0 {
		t.Errorf("%d deliveries of timers delivered before", duplicates)
	}
	if oversize > 0 {
		t.Errorf("%d batches over BatchSize %d", oversize, f.BatchSize)
	}
	t.Logf("scheduled %d timers in %v; drained them in %v (%.0f timers/s, %d batches)",
		n, scheduled.Round(time.Millisecond), drained.Round(time.Millisecond), float64(n)/drained.Seconds(), batches)
}

func testConcurrentSchedule(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	const workers, per = 4, 250
	h := newHarness(t)
	s := newScheduler(t)
	h.run(s, 1, nil)
	base := time.Now().Add(300 * time.Millisecond)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		kept []string
		gone []string
	)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				name := fmt.Sprintf("w%d-%03d", w, i)
				ctx := context.Background()
				if err := s.Schedule(ctx, h.key(name), base.Add(time.Duration(i%50)*time.Millisecond)); err != nil {
					t.Errorf("Schedule %s: %v", name, err)
					return
				}
				if i%4 == 0 {
					due := base.Add(time.Duration(i%50) * time.Millisecond)
					if err := s.Unschedule(ctx, h.key(name)); err != nil {
						t.Errorf("Unschedule %s: %v", name, err)
						return
					}
					// Unschedule is best effort once a timer is due (it may be
					// claimed already): only an Unschedule that returned before
					// the due time must keep it from firing.
					if time.Now().Before(due) {
						mu.Lock()
						gone = append(gone, name)
						mu.Unlock()
					}
					continue
				}
				mu.Lock()
				kept = append(kept, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// From the last due time, or from now if scheduling them took longer
	// (a loaded machine: the due times are then past).
	h.waitDelivered(window+max(time.Until(base.Add(50*time.Millisecond)), 0), kept...)
	time.Sleep(time.Until(base.Add(50*time.Millisecond)) + quiet)
	for _, name := range kept {
		if n := len(h.got(name)); n != 1 {
			t.Errorf("%s: delivered %d times, want once", name, n)
		}
	}
	if f.CanUnschedule {
		for _, name := range gone {
			if n := len(h.got(name)); n != 0 {
				t.Errorf("%s: unscheduled, yet delivered %d times", name, n)
			}
		}
	}
}

func testMultiConsumer(t *testing.T, f Features, newScheduler Factory) {
	if !f.MultiConsumer {
		t.Skip("the backend has one consumer (Features.MultiConsumer)")
	}
	t.Parallel()
	const consumers = 3
	h := newHarness(t)
	var ss []timer.Scheduler
	for c := range consumers {
		ss = append(ss, newScheduler(t))
		h.run(ss[c], c+1, nil)
	}
	n := 3*f.BatchSize + 17
	var names []string
	last := time.Now()
	for i := range n {
		names = append(names, fmt.Sprintf("m%05d", i))
		// Half due already, half over the next 300 ms, scheduled through every instance.
		due := time.Now().Add(time.Duration(i-n/2) * 300 * time.Millisecond / time.Duration(n))
		last = h.schedule(ss[i%consumers], names[i], due)
	}
	h.waitDelivered(window+max(time.Until(last), 0), names...)
	time.Sleep(quiet + f.Lease)
	per := make([]int, consumers+1)
	for _, name := range names {
		ds := h.got(name)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times (consumers %v), want once", name, len(ds), consumersOf(ds))
			continue
		}
		if ds[0].At.Before(ds[0].Due) {
			t.Errorf("%s: fired %v before its due time", name, ds[0].Due.Sub(ds[0].At))
		}
		per[ds[0].Consumer]++
	}
	t.Logf("%d timers; per consumer %v", n, per[1:])
}

func testKilledConsumer(t *testing.T, f Features, newScheduler Factory) {
	if f.Lease <= 0 || !f.MultiConsumer {
		t.Skip("needs a Lease and several consumers (Features.Lease, Features.MultiConsumer)")
	}
	t.Parallel()
	h := newHarness(t)
	a, b := newScheduler(t), newScheduler(t)
	n := min(f.BatchSize, 10)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("k%02d", i))
		h.schedule(a, names[i], time.Now().Add(-time.Millisecond))
	}
	claimed := make(chan []timer.Timer, 1)
	release := make(chan struct{})
	var first atomic.Bool
	// Consumer 1 takes a batch and hangs: it never acknowledges while the test looks.
	ra := h.run(a, 1, func(ctx context.Context, due []timer.Timer) error {
		if first.CompareAndSwap(false, true) {
			claimed <- due
		}
		<-release
		return errors.New("timertest: consumer killed")
	})
	t.Cleanup(func() { close(release) }) // runs before ra's stop (cleanups run last first)
	var held []timer.Timer
	select {
	case held = <-claimed:
	case err := <-h.failed:
		t.Fatal(err)
	case <-time.After(window):
		t.Fatal("consumer 1 never got a batch")
	}
	killed := time.Now()
	ra.cancel()
	h.run(b, 2, nil)
	h.waitFor("consumer 2 gets the killed consumer's batch", f.Lease+window, func() bool {
		for _, tm := range held {
			if !slices.ContainsFunc(h.byKey[strings.TrimPrefix(tm.Key, h.prefix)], func(d delivery) bool { return d.Consumer == 2 }) {
				return false
			}
		}
		return true
	})
	took := time.Since(killed)
	for _, tm := range held {
		for _, d := range h.got(strings.TrimPrefix(tm.Key, h.prefix)) {
			if d.Consumer == 2 && d.Attempt < 2 {
				t.Errorf("%s: redelivered after a lease with Attempt %d, want at least 2", d.Key, d.Attempt)
			}
		}
	}
	h.waitDelivered(window, names...)
	t.Logf("consumer 1 held %d timers; consumer 2 had them %v after consumer 1 was killed (lease %v)", len(held), took.Round(time.Millisecond), f.Lease)
}

func testDurable(t *testing.T, f Features, newScheduler Factory) {
	if !f.Durable {
		t.Skip("the backend forgets its timers on a restart (Features.Durable)")
	}
	t.Parallel()
	h := newHarness(t)
	first := newScheduler(t)
	r := h.run(first, 1, nil)
	now := time.Now()
	missed := h.schedule(first, "due-while-down", now.Add(200*time.Millisecond))
	ahead := h.schedule(first, "due-after-restart", now.Add(600*time.Millisecond))
	r.stop()
	time.Sleep(time.Until(missed) + 50*time.Millisecond) // a point in time, not a guess: past the first due time
	second := newScheduler(t)
	h.run(second, 2, nil)
	h.waitDelivered(window+max(time.Until(ahead), 0), "due-while-down", "due-after-restart")
	time.Sleep(quiet)
	for name, due := range map[string]time.Time{"due-while-down": missed, "due-after-restart": ahead} {
		ds := h.got(name)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", name, len(ds))
			continue
		}
		if ds[0].Consumer != 2 {
			t.Errorf("%s: delivered by the stopped instance", name)
		}
		if ds[0].At.Before(due) {
			t.Errorf("%s: fired %v before its due time", name, due.Sub(ds[0].At))
		}
	}
}

func testRunAgain(t *testing.T, _ Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	r := h.run(s, 1, nil)
	h.schedule(s, "before", time.Now())
	pending := h.schedule(s, "pending", time.Now().Add(400*time.Millisecond))
	h.waitDelivered(window, "before")
	r.stop()
	h.schedule(s, "while-stopped", time.Now())
	h.run(s, 2, nil)
	h.waitDelivered(window+max(time.Until(pending), 0), "pending", "while-stopped")
	for _, name := range []string{"before", "pending", "while-stopped"} {
		if n := len(h.got(name)); n != 1 {
			t.Errorf("%s: delivered %d times, want once", name, n)
		}
	}
}

func testRunReturns(t *testing.T, _ Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	h.schedule(s, "far", time.Now().Add(time.Hour))

	r := h.run(s, 1, nil)
	h.schedule(s, "now", time.Now())
	h.waitDelivered(window, "now") // the loop is up, and asleep until "far"
	start := time.Now()
	r.cancel()
	err, ok := r.wait(prompt)
	if !ok {
		t.Fatalf("Run still running %v after its ctx was cancelled", prompt)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v after cancel, want context.Canceled", err)
	}
	t.Logf("Run returned %v after cancel", time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r = h.runCtx(ctx, s, 2, h.handler(2, nil))
	err, ok = r.wait(200*time.Millisecond + prompt)
	if !ok {
		t.Fatalf("Run still running %v after its ctx's deadline", prompt)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run returned %v after its deadline, want context.DeadlineExceeded", err)
	}
}

func testCancelFinishesBatch(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	entered := make(chan context.Context, 1)
	release := make(chan error)
	var first atomic.Bool
	h.schedule(s, "in-hand", time.Now())
	r := h.run(s, 1, func(ctx context.Context, _ []timer.Timer) error {
		if !first.CompareAndSwap(false, true) {
			return nil
		}
		entered <- ctx
		return <-release
	})
	var hctx context.Context
	select {
	case hctx = <-entered:
	case err := <-h.failed:
		t.Fatal(err)
	case <-time.After(window):
		t.Fatal("the timer was never delivered")
	}
	r.cancel()
	if _, ok := r.wait(quiet); ok {
		t.Fatal("Run returned while its handler still held a batch")
	}
	if err := hctx.Err(); err != nil {
		t.Errorf("the handler's ctx ended with Run's: %v", err)
	}
	release <- nil
	err, ok := r.wait(window)
	if !ok {
		t.Fatalf("Run still running %v after its handler returned", window)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	// The acknowledgement made after the cancel holds: a new Run does not
	// get the batch again.
	h.run(s, 2, nil)
	h.schedule(s, "fresh", time.Now())
	h.waitDelivered(window, "fresh")
	time.Sleep(quiet + f.Lease)
	if n := len(h.got("in-hand")); n != 1 {
		t.Errorf("in-hand: delivered %d times; the acknowledgement after the cancel was lost", n)
	}
}

func testCancelFailedBatch(t *testing.T, f Features, newScheduler Factory) {
	t.Parallel()
	h := newHarness(t)
	s := newScheduler(t)
	entered := make(chan struct{}, 1)
	release := make(chan error)
	var first atomic.Bool
	h.schedule(s, "failing", time.Now())
	r := h.run(s, 1, func(context.Context, []timer.Timer) error {
		if !first.CompareAndSwap(false, true) {
			return nil
		}
		entered <- struct{}{}
		return <-release
	})
	select {
	case <-entered:
	case err := <-h.failed:
		t.Fatal(err)
	case <-time.After(window):
		t.Fatal("the timer was never delivered")
	}
	r.cancel()
	release <- errors.New("timertest: handler fails after the cancel")
	r.stop()
	h.run(s, 2, nil)
	h.waitFor("the failed batch redelivered to the next Run", timer.Backoff(1)+f.Lease+window, func() bool {
		return len(h.byKey["failing"]) >= 2
	})
	if d := h.got("failing")[1]; d.Attempt != 2 {
		t.Errorf("redelivered with Attempt %d, want 2", d.Attempt)
	}
}

// delivery is one timer as a handler received it.
type delivery struct {
	timer.Timer
	At       time.Time // time.Now() when the handler was called
	Consumer int
}

// harness records the deliveries of one subtest and waits on them.
type harness struct {
	t      *testing.T
	prefix string
	failed chan error // a Run that returned before its ctx ended

	mu      sync.Mutex
	byKey   map[string][]delivery // by name (key without the prefix), in delivery order
	batches []int                 // sizes, in delivery order
	changed chan struct{}         // closed and replaced at every batch
}

var harnesses atomic.Int64

func newHarness(t *testing.T) *harness {
	return &harness{
		t:       t,
		prefix:  fmt.Sprintf("timertest-%x-%d-", time.Now().UnixNano(), harnesses.Add(1)),
		failed:  make(chan error, 8),
		byKey:   map[string][]delivery{},
		changed: make(chan struct{}),
	}
}

func (h *harness) key(name string) string { return h.prefix + name }

// schedule schedules name and returns due.
func (h *harness) schedule(s timer.Scheduler, name string, due time.Time) time.Time {
	h.t.Helper()
	if err := s.Schedule(context.Background(), h.key(name), due); err != nil {
		h.t.Fatalf("Schedule(%s, %v): %v", name, due, err)
	}
	return due
}

func (h *harness) unschedule(s timer.Scheduler, name string) {
	h.t.Helper()
	if err := s.Unschedule(context.Background(), h.key(name)); err != nil {
		h.t.Fatalf("Unschedule(%s): %v", name, err)
	}
}

// handler records every batch for consumer, then calls next (nil acknowledges).
func (h *harness) handler(consumer int, next timer.Handler) timer.Handler {
	return func(ctx context.Context, due []timer.Timer) error {
		at := time.Now()
		h.record(consumer, at, due)
		if next == nil {
			return nil
		}
		return next(ctx, due)
	}
}

func (h *harness) record(consumer int, at time.Time, due []timer.Timer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches = append(h.batches, len(due))
	for _, tm := range due {
		name, ok := strings.CutPrefix(tm.Key, h.prefix)
		if !ok {
			h.t.Errorf("consumer %d got %q, a timer of another test: the factory must give each test its own backend state", consumer, tm.Key)
			continue
		}
		h.byKey[name] = append(h.byKey[name], delivery{Timer: tm, At: at, Consumer: consumer})
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// got returns name's deliveries so far.
func (h *harness) got(name string) []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byKey[name])
}

// deliveredAt reports whether name was delivered with Due near due; call under h.mu.
func (h *harness) deliveredAt(name string, due time.Time) bool {
	return slices.ContainsFunc(h.byKey[name], func(d delivery) bool { return near(d.Due, due) })
}

// waitFor waits until cond, called under h.mu, holds; it fails the test
// after timeout or when a Run returns early.
func (h *harness) waitFor(what string, timeout time.Duration, cond func() bool) {
	h.t.Helper()
	if err := h.waitUntil(timeout, cond); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
}

// waitUntil waits until cond, called under h.mu, holds, for at most timeout.
func (h *harness) waitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		ok, changed := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case err := <-h.failed:
			return err
		case <-deadline.C:
			return fmt.Errorf("not within %v", timeout)
		}
	}
}

// waitDelivered waits until every name was delivered at least once.
func (h *harness) waitDelivered(timeout time.Duration, names ...string) {
	h.t.Helper()
	var missing []string
	err := h.waitUntil(timeout, func() bool {
		missing = missing[:0]
		for _, name := range names {
			if len(h.byKey[name]) == 0 {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0
	})
	if err != nil {
		h.t.Fatalf("%d of %d timers not delivered (first: %s): %v", len(missing), len(names), missing[0], err)
	}
}

// runner is one Run loop of a test.
type runner struct {
	h         *harness
	consumer  int
	cancel    context.CancelFunc
	done      chan struct{}
	err       error // Run's result, once done is closed
	early     bool  // Run returned before its ctx ended
	stopOnce  sync.Once
	cancelled atomic.Bool
}

// run starts consumer's Run loop on s with the recording handler, then next;
// it is stopped at the end of the test.
func (h *harness) run(s timer.Scheduler, consumer int, next timer.Handler) *runner {
	return h.runHandler(s, consumer, h.handler(consumer, next))
}

// runHandler starts consumer's Run loop on s with hd as it is.
func (h *harness) runHandler(s timer.Scheduler, consumer int, hd timer.Handler) *runner {
	r := h.runCtx(context.Background(), s, consumer, hd)
	h.t.Cleanup(r.stop)
	return r
}

// runCtx starts consumer's Run loop on s under parent; the caller waits for it.
func (h *harness) runCtx(parent context.Context, s timer.Scheduler, consumer int, hd timer.Handler) *runner {
	ctx, cancel := context.WithCancel(parent)
	r := &runner{h: h, consumer: consumer, done: make(chan struct{})}
	r.cancel = func() { r.cancelled.Store(true); cancel() }
	go func() {
		defer close(r.done)
		r.err = s.Run(ctx, hd)
		if ctx.Err() == nil {
			r.early = true
			select {
			case h.failed <- fmt.Errorf("consumer %d: Run returned before its ctx ended: %v", consumer, r.err):
			default:
			}
		}
	}()
	return r
}

// wait waits up to timeout for Run to return; ok is false if it has not.
func (r *runner) wait(timeout time.Duration) (err error, ok bool) {
	select {
	case <-r.done:
		return r.err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// stop cancels Run and checks it returns context.Canceled within window.
func (r *runner) stop() {
	r.stopOnce.Do(func() {
		r.h.t.Helper()
		r.cancel()
		err, ok := r.wait(window)
		switch {
		case !ok:
			r.h.t.Errorf("consumer %d: Run still running %v after its ctx was cancelled", r.consumer, window)
		case r.early:
			r.h.t.Errorf("consumer %d: Run returned before its ctx ended: %v", r.consumer, err)
		case !errors.Is(err, context.Canceled):
			r.h.t.Errorf("consumer %d: Run returned %v after its ctx was cancelled, want context.Canceled", r.consumer, err)
		}
	})
}

// near reports whether a delivered Due matches a scheduled one within the
// backend's storage precision.
func near(got, want time.Time) bool {
	d := got.Sub(want)
	return -precision < d && d < precision
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func consumersOf(ds []delivery) []int {
	var cs []int
	for _, d := range ds {
		cs = append(cs, d.Consumer)
	}
	return cs
}

// Run starts s.Run with h, for a backend's own tests: it is stopped, and
// must return context.Canceled within 10 s, when t ends or when the
// returned stop is called (once; later calls do nothing).
func Run(t testing.TB, s timer.Scheduler, h timer.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run returned %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run still running 10 s after its ctx was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
