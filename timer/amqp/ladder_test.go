package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/timer"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// quiet is how long a test watches for something that must not happen (a
// second delivery). Watching is all a sleep is used for.
const quiet = 400 * time.Millisecond

// lateBound is the lateness this package promises to stay under with the
// default Base: the rounding up to Base (100 ms), a millisecond or so per
// level, and what a loaded CI machine under the race detector adds.
const lateBound = amqptimer.DefaultBase + 500*time.Millisecond

// The ladder: timers of 1 s, 15 min and 7 days scheduled together. The 1 s
// timer is not held behind the long ones: it fires within lateBound of its
// due time, while the long ones wait in their top levels' queues (15 min =
// 9000 units, highest bit 13; 7 days = 6,048,000 units, highest bit 22).
func TestLadder(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix})
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	ctx := context.Background()
	now := time.Now()
	long := map[string]time.Time{"week": now.Add(7 * 24 * time.Hour), "quarter": now.Add(15 * time.Minute)}
	for key, due := range long {
		if err := s.Schedule(ctx, key, due); err != nil {
			t.Fatal(err)
		}
	}
	due := now.Add(time.Second)
	if err := s.Schedule(ctx, "second", due); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, time.Until(due)+5*time.Second, "second")
	d := rec.deliveries("second")[0]
	if d.At.Before(due) {
		t.Errorf("the 1 s timer fired %v before its due time", due.Sub(d.At))
	}
	if late := d.At.Sub(due); late > lateBound {
		t.Errorf("the 1 s timer fired %v after its due time, over %v", late, lateBound)
	} else {
		t.Logf("the 1 s timer fired %v after its due time", late.Round(time.Microsecond))
	}
	if !d.Due.Equal(due) {
		t.Errorf("delivered with Due %v, scheduled %v", d.Due, due)
	}

	levels, ready, _, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	for k, q := range levels {
		want := 0
		if k == 13 || k == 22 {
			want = 1
		}
		if got := depth(t, conn, q); got != want {
			t.Errorf("level %d (%s) holds %d timers, want %d", k, q, got, want)
		}
	}
	if got := depth(t, conn, ready); got != 0 {
		t.Errorf("the ready queue holds %d timers, want 0", got)
	}
	for key := range long {
		if n := len(rec.deliveries(key)); n != 0 {
			t.Errorf("%s: delivered %d times", key, n)
		}
	}
	if got, want := s.MaxDelay(), 838860700*time.Millisecond; got != want {
		t.Errorf("MaxDelay %v, want %v (9 days 17 hours)", got, want)
	}
}

// Timers with random delays of 0 to 3 s: every one is delivered once, at or
// after its due time, and within Base + 1 s of it (CI runs every package's
// tests at once on two cores); the data-loss check,
// looking all the while, sees no loss. The lateness is reported
// (p50, p99, max), measured from the due time to the handler's call.
func TestLateness(t *testing.T) {
	t.Parallel()
	for _, base := range []time.Duration{amqptimer.DefaultBase, 10 * time.Millisecond} {
		t.Run(base.String(), func(t *testing.T) {
			t.Parallel()
			prefix := newPrefix(t, amqptimer.DefaultLevels)
			// The data-loss check looks every 20 ms while the timers move
			// down the ladder: it must never take their moves for a loss.
			s := mustOpen(t, amqptimer.Config{Prefix: prefix, Base: base, LossCheck: 20 * time.Millisecond})
			rec := newRecorder(nil)
			run(t, s, rec.handler(1))
			ctx := context.Background()
			const n = 300
			want := map[string]time.Time{}
			var keys []string
			var last time.Time
			for i := range n {
				key := fmt.Sprintf("late-%03d", i)
				due := time.Now().Add(rand.N(3 * time.Second))
				if err := s.Schedule(ctx, key, due); err != nil {
					t.Fatal(err)
				}
				want[key], keys = due, append(keys, key)
				last = later(last, due)
			}
			rec.waitDelivered(t, time.Until(last)+5*time.Second, keys...)
			time.Sleep(quiet)
			var lates []time.Duration
			for _, key := range keys {
				ds := rec.deliveries(key)
				if len(ds) != 1 {
					t.Errorf("%s: delivered %d times, want once", key, len(ds))
					continue
				}
				d, due := ds[0], want[key]
				if d.At.Before(due) {
					t.Errorf("%s: delivered %v before its due time", key, due.Sub(d.At))
					continue
				}
				if !d.Due.Equal(due) {
					t.Errorf("%s: delivered with Due %v, scheduled %v", key, d.Due, due)
				}
				late := d.At.Sub(due)
				lates = append(lates, late)
				if bound := base + time.Second; late > bound {
					t.Errorf("%s: delivered %v after its due time, over %v", key, late, bound)
				}
			}
			if st := s.Stats(); st.Losses != 0 {
				t.Errorf("%d data losses seen where none happened", st.Losses)
			}
			slices.Sort(lates)
			if len(lates) > 0 {
				t.Logf("base %v, %d timers: lateness p50 %v, p99 %v, max %v", base, len(lates),
					lates[len(lates)/2].Round(time.Microsecond), lates[len(lates)*99/100].Round(time.Microsecond),
					lates[len(lates)-1].Round(time.Microsecond))
			}
		})
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A ladder of 4 levels reaches 1.5 s with a Base of 100 ms: a timer due in
// 2.5 s is sent for 1.5 s, arrives a second early, is sent again for the
// remainder, and is delivered at its due time, once.
func TestBeyondTheLadder(t *testing.T) {
	t.Parallel()
	const levels = 4
	prefix := newPrefix(t, levels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, Levels: levels})
	if got := s.MaxDelay(); got != 1500*time.Millisecond {
		t.Fatalf("MaxDelay %v, want 1.5s", got)
	}
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	due := time.Now().Add(2500 * time.Millisecond)
	if err := s.Schedule(context.Background(), "far", due); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, time.Until(due)+5*time.Second, "far")
	time.Sleep(quiet)
	ds := rec.deliveries("far")
	if len(ds) != 1 {
		t.Fatalf("delivered %d times, want once", len(ds))
	}
	if ds[0].At.Before(due) {
		t.Errorf("delivered %v before its due time", due.Sub(ds[0].At))
	}
	if late := ds[0].At.Sub(due); late > lateBound {
		t.Errorf("delivered %v after its due time, over %v", late, lateBound)
	}
	st := s.Stats()
	if st.Clamped != 1 || st.Republished != 1 {
		t.Errorf("Stats %+v: want Clamped 1, Republished 1", st)
	}
}

// Two instances share the ready queue: each timer goes to exactly one of
// them; a batch one of them refuses is delivered again (to either) with
// Attempt 2, after the backoff, and the acknowledged ones never again.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	a := mustOpen(t, amqptimer.Config{Prefix: prefix, BatchSize: 20})
	b := mustOpen(t, amqptimer.Config{Prefix: prefix, BatchSize: 20})
	var refused atomic.Bool
	rec := newRecorder(func(_ context.Context, due []timer.Timer) error {
		for _, tm := range due {
			if tm.Key == "refused-once" && tm.Attempt == 1 && refused.CompareAndSwap(false, true) {
				return errors.New("test: the store is down")
			}
		}
		return nil
	})
	run(t, a, rec.handler(1))
	run(t, b, rec.handler(2))
	ctx := context.Background()
	var keys []string
	last := time.Now()
	for i := range 300 {
		key := fmt.Sprintf("k%03d", i)
		s := a
		if i%2 == 1 {
			s = b
		}
		last = time.Now().Add(time.Duration(i) * time.Millisecond)
		if err := s.Schedule(ctx, key, last); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	if err := a.Schedule(ctx, "refused-once", time.Now()); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, time.Until(last)+5*time.Second, keys...)
	rec.waitFor(t, "the refused timer delivered again", 5*time.Second, func() bool { return len(rec.got["refused-once"]) >= 2 })
	time.Sleep(quiet)
	per := map[int]int{}
	refusedBatch := map[string]bool{} // refused along with refused-once: delivered twice
	if ds := rec.deliveries("refused-once"); len(ds) > 0 {
		rec.mu.Lock()
		for key, kds := range rec.got {
			for _, d := range kds {
				if d.Attempt == 2 {
					refusedBatch[key] = true
				}
			}
		}
		rec.mu.Unlock()
	}
	for _, key := range keys {
		ds := rec.deliveries(key)
		want := 1
		if refusedBatch[key] {
			want = 2
		}
		if len(ds) != want {
			t.Errorf("%s: delivered %d times, want %d", key, len(ds), want)
			continue
		}
		per[ds[0].Consumer]++
	}
	ds := rec.deliveries("refused-once")
	if len(ds) != 2 {
		t.Fatalf("refused-once: delivered %d times, want twice", len(ds))
	}
	if ds[0].Attempt != 1 || ds[1].Attempt != 2 {
		t.Errorf("refused-once: attempts %d, %d, want 1, 2", ds[0].Attempt, ds[1].Attempt)
	}
	if gap, backoff := ds[1].At.Sub(ds[0].At), timer.Backoff(1); gap < backoff {
		t.Errorf("refused-once: delivered again %v after the refusal, before the backoff of %v", gap, backoff)
	}
	if per[1] == 0 || per[2] == 0 {
		t.Errorf("timers per instance %v: want both to take some", per)
	}
	if st := a.Stats(); st.Retried == 0 && b.Stats().Retried == 0 {
		t.Error("no instance counted the retried timers")
	}
	t.Logf("timers per instance %v; the refused batch held %d timers", per, len(refusedBatch))
}

// Unschedule removes nothing and says so in Stats; the timer is delivered.
func TestUnscheduleIsCounted(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix})
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	ctx := context.Background()
	if err := s.Schedule(ctx, "paid", time.Now().Add(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := s.Unschedule(ctx, "paid"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unschedule(ctx, ""); err == nil {
		t.Error("Unschedule of an empty key: no error")
	}
	rec.waitDelivered(t, 5*time.Second, "paid")
	if got := s.Stats().Unscheduled; got != 1 {
		t.Errorf("Stats.Unscheduled %d, want 1", got)
	}
}

// With a lead, timers leave the ladder before their due time and Run holds
// them until it: each is delivered once, never before its due time, and
// the held ones are counted. (Run cannot hold a timer the broker delivered
// later than its lead, so the count is only checked to be above 0: the lead
// is applied.)
func TestLeadHoldsTimersUntilDue(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, Base: 10 * time.Millisecond, Lead: 300 * time.Millisecond, BatchSize: 7, Prefetch: 40})
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	ctx := context.Background()
	const n = 60
	want := map[string]time.Time{}
	var keys []string
	var last time.Time
	for i := range n {
		key := fmt.Sprintf("lead-%02d", i)
		due := time.Now().Add(500*time.Millisecond + rand.N(time.Second))
		if err := s.Schedule(ctx, key, due); err != nil {
			t.Fatal(err)
		}
		want[key], keys, last = due, append(keys, key), later(last, due)
	}
	rec.waitDelivered(t, time.Until(last)+5*time.Second, keys...)
	time.Sleep(quiet)
	for _, key := range keys {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", key, len(ds))
			continue
		}
		if ds[0].At.Before(want[key]) {
			t.Errorf("%s: delivered %v before its due time", key, want[key].Sub(ds[0].At))
		}
	}
	st := s.Stats()
	if st.Held == 0 || st.Held > n {
		t.Errorf("Stats.Held %d: want 1 to %d (the timers left the ladder %v early)", st.Held, n, 300*time.Millisecond)
	}
	if st.Republished != 0 {
		t.Errorf("Stats.Republished %d: a timer inside its lead was sent again", st.Republished)
	}
	t.Logf("held %d of %d", st.Held, n)
}
