package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/memory"
	"github.com/lapsehq/lapse/timer/timertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	// A memory scheduler is its own backend: every instance a test asks for
	// is that test's one scheduler.
	var (
		mu         sync.Mutex
		schedulers = map[*testing.T]*memory.Scheduler{}
	)
	timertest.Exercise(t, timertest.Features{BatchSize: 200, LargeN: 100_000, CanUnschedule: true},
		func(t *testing.T) timer.Scheduler {
			mu.Lock()
			defer mu.Unlock()
			s, ok := schedulers[t]
			if !ok {
				s = memory.New(memory.Config{BatchSize: 200})
				schedulers[t] = s
				t.Cleanup(func() {
					mu.Lock()
					defer mu.Unlock()
					delete(schedulers, t)
				})
			}
			return s
		})
}

// delivery is one handler call, seen from inside a synctest bubble.
type delivery struct {
	at  time.Time
	due []timer.Timer
}

// start runs s in the bubble with a handler that reports every batch on the
// returned channel and answers with fail(batch); stop cancels Run and checks
// it returns context.Canceled.
func start(t *testing.T, s *memory.Scheduler, fail func([]timer.Timer) error) (got <-chan delivery, stop func()) {
	t.Helper()
	ch := make(chan delivery, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- s.Run(ctx, func(_ context.Context, due []timer.Timer) error {
			ch <- delivery{at: time.Now(), due: due}
			if fail == nil {
				return nil
			}
			return fail(due)
		})
	}()
	return ch, func() {
		t.Helper()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}
}

func keys(ts []timer.Timer) []string {
	var ks []string
	for _, t := range ts {
		ks = append(ks, fmt.Sprintf("%s#%d", t.Key, t.Attempt))
	}
	slices.Sort(ks)
	return ks
}

// expect receives the next delivery and checks when it came and what it held
// ("key#attempt", sorted).
func expect(t *testing.T, got <-chan delivery, at time.Time, want ...string) {
	t.Helper()
	d := <-got // the bubble advances its clock to the next timer; a deadlock fails the test
	if !d.at.Equal(at) {
		t.Errorf("delivered at +%v, want +%v", d.at.Sub(epoch), at.Sub(epoch))
	}
	if ks := keys(d.due); !slices.Equal(ks, want) {
		t.Errorf("delivered %v at +%v, want %v", ks, d.at.Sub(epoch), want)
	}
}

// expectNone checks nothing is delivered up to and including until.
func expectNone(t *testing.T, got <-chan delivery, until time.Time) {
	t.Helper()
	time.Sleep(time.Until(until))
	synctest.Wait()
	select {
	case d := <-got:
		t.Errorf("delivered %v at +%v, want nothing until +%v", keys(d.due), d.at.Sub(epoch), until.Sub(epoch))
	default:
	}
}

// epoch is the start of every synctest bubble's clock.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func TestWakesExactlyAtTheNextDueTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		got, stop := start(t, s, nil)
		defer stop()
		now := time.Now()
		a := now.Add(90*time.Second + 7*time.Nanosecond)
		b := now.Add(5 * time.Minute)
		mustSchedule(t, s, "b", b)
		mustSchedule(t, s, "a", a)
		mustSchedule(t, s, "past", now.Add(-time.Hour))
		expect(t, got, now, "past#1")
		expectNone(t, got, a.Add(-time.Nanosecond))
		mustSchedule(t, s, "a-next", a.Add(time.Nanosecond))
		expect(t, got, a, "a#1")
		expect(t, got, a.Add(time.Nanosecond), "a-next#1")
		expect(t, got, b, "b#1")
		if n := s.Len(); n != 0 {
			t.Errorf("Len %d after every timer fired", n)
		}
	})
}

func TestEarlierScheduleWakesTheLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		now := time.Now()
		mustSchedule(t, s, "far", now.Add(time.Hour))
		got, stop := start(t, s, nil)
		defer stop()
		synctest.Wait() // the loop sleeps, planning to wake in an hour
		time.Sleep(time.Minute)
		near := time.Now().Add(time.Minute)
		mustSchedule(t, s, "near", near)
		expect(t, got, near, "near#1")
		// Moving the far timer earlier wakes the loop too; moving it later does not fire it early.
		mustSchedule(t, s, "far", now.Add(30*time.Minute))
		mustSchedule(t, s, "later", now.Add(10*time.Minute))
		mustSchedule(t, s, "later", now.Add(2*time.Hour))
		expect(t, got, now.Add(30*time.Minute), "far#1")
		expect(t, got, now.Add(2*time.Hour), "later#1")
	})
}

func TestUnscheduleRemovesTheNextTimer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		got, stop := start(t, s, nil)
		defer stop()
		now := time.Now()
		mustSchedule(t, s, "gone", now.Add(time.Second))
		mustSchedule(t, s, "kept", now.Add(2*time.Second))
		synctest.Wait()
		if err := s.Unschedule(context.Background(), "gone"); err != nil {
			t.Fatal(err)
		}
		expect(t, got, now.Add(2*time.Second), "kept#1")
	})
}

func TestFailedBatchComesBackAfterBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		got, stop := start(t, s, func(due []timer.Timer) error {
			if due[0].Attempt < 5 {
				return errors.New("refused")
			}
			return nil
		})
		defer stop()
		at := time.Now()
		mustSchedule(t, s, "a", at)
		mustSchedule(t, s, "b", at)
		expect(t, got, at, "a#1", "b#1")
		for attempt := 1; attempt < 5; attempt++ {
			at = at.Add(timer.Backoff(attempt))
			expect(t, got, at, fmt.Sprintf("a#%d", attempt+1), fmt.Sprintf("b#%d", attempt+1))
		}
		expectNone(t, got, at.Add(time.Hour)) // acknowledged
	})
}

func TestConfiguredBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute }})
		got, stop := start(t, s, func(due []timer.Timer) error {
			if due[0].Attempt < 3 {
				return errors.New("refused")
			}
			return nil
		})
		defer stop()
		at := time.Now()
		mustSchedule(t, s, "a", at)
		expect(t, got, at, "a#1")
		expect(t, got, at.Add(time.Minute), "a#2")
		expect(t, got, at.Add(3*time.Minute), "a#3")
	})
}

func TestRescheduleDuringFailedBatchWins(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		now := time.Now()
		moved := now.Add(time.Minute)
		got, stop := start(t, s, func(due []timer.Timer) error {
			if due[0].Attempt > 1 || len(due) == 1 {
				return nil
			}
			// While the batch is in hand, the store says "moved" fires later.
			if err := s.Schedule(context.Background(), "moved", moved); err != nil {
				t.Error(err)
			}
			return errors.New("refused")
		})
		defer stop()
		mustSchedule(t, s, "moved", now)
		mustSchedule(t, s, "kept", now)
		expect(t, got, now, "kept#1", "moved#1")
		expect(t, got, now.Add(timer.Backoff(1)), "kept#2")
		// The new schedule, not the requeue, decides; it starts counting afresh.
		expect(t, got, moved, "moved#1")
	})
}

func TestHandlerSchedulesItsTimerAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		now := time.Now()
		again := now.Add(time.Minute)
		got, stop := start(t, s, func(due []timer.Timer) error {
			if time.Now().Equal(now) {
				if err := s.Schedule(context.Background(), "a", again); err != nil {
					t.Error(err)
				}
			}
			return nil
		})
		defer stop()
		mustSchedule(t, s, "a", now)
		expect(t, got, now, "a#1")
		expect(t, got, again, "a#1")
		expectNone(t, got, again.Add(time.Hour))
	})
}

func TestBatchesAreBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{BatchSize: 3})
		now := time.Now()
		for i := range 7 {
			// Scheduled latest first: the heap, not the order of calls, decides.
			mustSchedule(t, s, fmt.Sprint(i), now.Add(-time.Duration(i)*time.Second))
		}
		got, stop := start(t, s, nil)
		defer stop()
		expect(t, got, now, "4#1", "5#1", "6#1")
		expect(t, got, now, "1#1", "2#1", "3#1")
		expect(t, got, now, "0#1")
	})
}

func TestOneRunAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{})
		_, stop := start(t, s, nil)
		synctest.Wait()
		if err := s.Run(context.Background(), func(context.Context, []timer.Timer) error { return nil }); err == nil {
			t.Error("a second concurrent Run started")
		}
		stop()
		// Once the first returned, another may run.
		got, stop := start(t, s, nil)
		defer stop()
		mustSchedule(t, s, "a", time.Now())
		expect(t, got, time.Now(), "a#1")
	})
}

func TestScheduleRefusesAnEmptyKey(t *testing.T) {
	t.Parallel()
	if err := memory.New(memory.Config{}).Schedule(context.Background(), "", time.Now()); err == nil {
		t.Error("Schedule accepted an empty key")
	}
}

func mustSchedule(t *testing.T, s *memory.Scheduler, key string, due time.Time) {
	t.Helper()
	if err := s.Schedule(context.Background(), key, due); err != nil {
		t.Fatalf("Schedule(%s): %v", key, err)
	}
}

// BenchmarkScheduleClaim is the hot path: schedule n timers, then claim them
// all through Run in batches of 200. Due times come in ascending order (as
// orders are created: created_at plus a fixed timeout) or shuffled (seeding
// from the store, mixed timeouts).
func BenchmarkScheduleClaim(b *testing.B) {
	for _, bc := range []struct {
		n        int
		shuffled bool
	}{{1_000, false}, {1_000, true}, {100_000, false}, {100_000, true}} {
		name := fmt.Sprintf("n=%d/ascending", bc.n)
		if bc.shuffled {
			name = fmt.Sprintf("n=%d/shuffled", bc.n)
		}
		b.Run(name, func(b *testing.B) {
			n := bc.n
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("order-%08d", i)
			}
			base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour) // wall time, as the store gives it
			order := make([]int, n)
			for i := range order {
				order[i] = i
			}
			if bc.shuffled {
				order = rand.New(rand.NewPCG(1, 2)).Perm(n)
			}
			dues := make([]time.Time, n)
			for i, j := range order {
				dues[i] = base.Add(time.Duration(j) * time.Millisecond)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s := memory.New(memory.Config{BatchSize: 200})
				for i, id := range ids {
					if err := s.Schedule(ctx, id, dues[i]); err != nil {
						b.Fatal(err)
					}
				}
				runCtx, cancel := context.WithCancel(ctx)
				left := n
				err := s.Run(runCtx, func(_ context.Context, due []timer.Timer) error {
					if len(due) > 200 {
						b.Fatalf("batch of %d", len(due))
					}
					if left -= len(due); left == 0 {
						cancel()
					}
					return nil
				})
				cancel()
				if !errors.Is(err, context.Canceled) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/timer")
		})
	}
}
