package amqp_test

import (
	"context"
	"testing"
	"time"

	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// TestQuorum runs the timertest suite on quorum queues (queue_type=quorum),
// without its many-timers test, after TestConformance.
func TestQuorum(t *testing.T) {
	exercise(t, amqptimer.QueueQuorum, 0)
}

// On quorum queues the ladder holds a long timer in its top level and
// delivers a short one on time, and a timer whose queue is purged comes
// back from the store.
func TestQuorumLadderAndPurge(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, QueueType: amqptimer.QueueQuorum, LossCheck: lossCheck})
	store := newFakeStore()
	s.SetSeed(store.seed(s))
	rec := newRecorder(store.handler)
	run(t, s, rec.handler(1))
	waitStats(t, s, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })
	ctx := context.Background()
	if err := s.Schedule(ctx, "week", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(1300 * time.Millisecond)
	if err := s.Schedule(ctx, "short", due); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, time.Until(due)+5*time.Second, "short")
	d := rec.deliveries("short")[0]
	if d.At.Before(due) {
		t.Errorf("short: fired %v before its due time", due.Sub(d.At))
	}
	if late := d.At.Sub(due); late > lateBound {
		t.Errorf("short: fired %v after its due time, over %v", late, lateBound)
	}
	levels, _, _, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	if got := depth(t, conn, levels[22]); got != 1 {
		t.Errorf("level 22 holds %d timers, want the week's", got)
	}

	keys, last := scheduleSpread(t, s, store, 20)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range levels[:22] {
		if _, err := ch.QueuePurge(q, false); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, s, "the loss seen and the timers seeded again", 5*time.Second, func(st amqptimer.Stats) bool {
		return st.Losses >= 1 && st.Seeds >= 2
	})
	checkDelivered(t, rec, store, keys, last)
}
