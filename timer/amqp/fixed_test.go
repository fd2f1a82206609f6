package amqp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// fixedPrefix is newPrefix for a scheduler with fixed delays: the queues
// of fixed (with the default lead, base and span) are deleted too when t
// ends.
func fixedPrefix(t *testing.T, fixed ...time.Duration) string {
	t.Helper()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	conn := admin(t)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("delete the fixed queues of %s: %v", prefix, err)
			return
		}
		defer ch.Close()
		for _, q := range amqptimer.FixedQueues(amqptimer.Config{Prefix: prefix, Fixed: fixed}) {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("delete the fixed queue %s: %v", q, err)
			}
		}
	})
	return prefix
}

// Timers due one of the fixed delays from now wait in that delay's queue
// (one hop: counted in Stats.Fixed and found there), those set late in a
// shorter queue of its comb, and the others ride the ladder; every one is delivered once, none before its due time, none
// late by more than the broker's lag.
func TestFixedDelayTakesOneQueue(t *testing.T) {
	t.Parallel()
	const fixed = 2 * time.Second
	prefix := fixedPrefix(t, fixed)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, Fixed: []time.Duration{fixed}})
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	ctx := context.Background()
	var fixedKeys, ladderKeys []string
	start := time.Now()
	for i := range 150 {
		key := fmt.Sprintf("fixed-%03d", i)
		// As lapse schedules an order's timer: right after the order was
		// written with a deadline of the payment window from then.
		if err := s.Schedule(ctx, key, time.Now().Add(fixed)); err != nil {
			t.Fatal(err)
		}
		fixedKeys = append(fixedKeys, key)
	}
	for i := range 50 {
		// Set 800 ms late (a slow broker, a seed): a shorter queue of the
		// delay's comb takes it.
		key := fmt.Sprintf("late-%03d", i)
		if err := s.Schedule(ctx, key, time.Now().Add(fixed-800*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		fixedKeys = append(fixedKeys, key)
	}
	for i := range 50 {
		// Longer than the fixed delay: the ladder.
		key := fmt.Sprintf("ladder-%03d", i)
		if err := s.Schedule(ctx, key, time.Now().Add(2600*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		ladderKeys = append(ladderKeys, key)
	}
	if st := s.Stats(); st.Fixed != 200 || st.Scheduled != 250 {
		t.Fatalf("stats %+v: want 200 of 250 timers on the fast path", st)
	}
	// The on-time ones wait in the delay's longest queue for its TTL
	// (1.5 s) from their publish: looked at while the first of them must
	// still be there.
	n := depth(t, admin(t), amqptimer.FixedQueue(prefix, fixed, amqptimer.DefaultLead, amqptimer.DefaultBase))
	if took := time.Since(start); took < fixed-amqptimer.DefaultLead-amqptimer.DefaultBase && n != 150 {
		t.Fatalf("the fixed queue holds %d timers %v after the first was scheduled, want 150", n, took)
	}
	rec.waitDelivered(t, fixed+10*time.Second, append(fixedKeys, ladderKeys...)...)
	var worst time.Duration
	for _, key := range append(fixedKeys, ladderKeys...) {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times", key, len(ds))
		}
		for _, d := range ds {
			if d.At.Before(d.Due) {
				t.Errorf("%s: delivered %v before its due time", key, d.Due.Sub(d.At))
			}
			worst = max(worst, d.At.Sub(d.Due))
		}
	}
	t.Logf("worst lateness %v", worst)
}

// The fixed queue is purged, then deleted, while timers wait in it: the
// loss check sees each (the queue holds fewer timers than were published
// to it; the queue is missing and is declared again), the timers are
// seeded again from the store, and every one is delivered, none early.
func TestFixedQueueLossReseeds(t *testing.T) {
	t.Parallel()
	const fixed = 4 * time.Second
	prefix := fixedPrefix(t, fixed)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck, Fixed: []time.Duration{fixed}})
	store := newFakeStore()
	s.SetSeed(store.seed(s))
	rec := newRecorder(store.handler)
	run(t, s, rec.handler(1))
	waitStats(t, s, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })
	q := amqptimer.FixedQueue(prefix, fixed, amqptimer.DefaultLead, amqptimer.DefaultBase)
	conn := admin(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	schedule := func(tag string, n int) (keys []string, last time.Time) {
		for i := range n {
			key := fmt.Sprintf("%s-%03d", tag, i)
			due := time.Now().Add(fixed)
			store.add(key, due)
			if err := s.Schedule(context.Background(), key, due); err != nil {
				t.Fatal(err)
			}
			keys, last = append(keys, key), due
		}
		return keys, last
	}

	keys, last := schedule("purged", 40)
	if n, err := ch.QueuePurge(q, false); err != nil || n == 0 {
		t.Fatalf("purge %s: %d timers, %v", q, n, err)
	}
	waitStats(t, s, "the purge seen and the timers seeded again", 5*time.Second, func(st amqptimer.Stats) bool {
		return st.Losses >= 1 && st.Seeds >= 2
	})
	checkDelivered(t, rec, store, keys, last)

	keys, last = schedule("deleted", 40)
	if _, err := ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s, "the deletion seen and the timers seeded again", 5*time.Second, func(st amqptimer.Stats) bool {
		return st.Losses >= 2 && st.Seeds >= 3
	})
	checkDelivered(t, rec, store, keys, last)
	// The queue is back: a timer of the fixed delay takes it again.
	before := s.Stats().Fixed
	if err := s.Schedule(context.Background(), "after", time.Now().Add(fixed)); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Fixed; got != before+1 {
		t.Fatalf("after the queue was declared again, %d timers took the fast path, want 1", got-before)
	}
	rec.waitDelivered(t, fixed+5*time.Second, "after")
}

// Fixed delays are validated: each longer than lead + base, at most 16;
// the URL's fixed= adds delays, and a malformed one is refused.
func TestFixedDelaysValidated(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fixed []time.Duration
		want  string
	}{
		{[]time.Duration{500 * time.Millisecond}, "want more than lead + base"},
		{[]time.Duration{-time.Second}, "want more than lead + base"},
		{make([]time.Duration, 17), "at most 16"},
	} {
		_, err := amqptimer.Open(ctx, "amqp://guest:guest@127.0.0.1:1/", amqptimer.Config{Fixed: tc.fixed})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Fixed %v: %v, want %q", tc.fixed, err, tc.want)
		}
	}
	_, cfg, err := amqptimer.ParseURL("amqp://guest:guest@host/?fixed=15m,30m")
	if err != nil || len(cfg.Fixed) != 2 || cfg.Fixed[0] != 15*time.Minute || cfg.Fixed[1] != 30*time.Minute {
		t.Fatalf("fixed=15m,30m: %+v, %v", cfg.Fixed, err)
	}
	for _, bad := range []string{"fixed=", "fixed=15x", "fixed=15m,,30m", "fixed=-1m"} {
		if _, _, err := amqptimer.ParseURL("amqp://guest:guest@host/?" + bad); err == nil || !strings.Contains(err.Error(), "fixed") {
			t.Errorf("%s: %v, want refused", bad, err)
		}
	}
}

// TestConformanceFixed runs the timertest suite with fixed delays that
// most of its timers match (600 ms: a queue of 100 ms, for timers due 100
// to 600 ms ahead; 1.5 s), so the suite's guarantees hold on the fast path
// too.
func TestConformanceFixed(t *testing.T) {
	exerciseWith(t, amqptimer.Config{QueueType: amqptimer.QueueClassic, BatchSize: 200,
		Fixed: []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond}}, 1000)
}
