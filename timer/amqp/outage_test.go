package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// The connection to the broker is cut while timers wait in the ladder:
// Schedule fails meanwhile (after its bounded retries) and Ping says why;
// once the broker is reachable again the scheduler reconnects by itself, the
// consumer subscribes again, every timer scheduled before the cut and after
// it is delivered, none early, and the reconnection is not taken for a loss.
func TestOutage(t *testing.T) {
	t.Parallel()
	proxy := rabbittest.NewProxy(t, brokerURL(t))
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := amqptimer.Open(ctx, proxy.URL, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	want := map[string]time.Time{}
	var keys []string
	schedule := func(i int, in time.Duration) {
		t.Helper()
		key, due := fmt.Sprintf("t%02d", i), time.Now().Add(in)
		if err := s.Schedule(context.Background(), key, due); err != nil {
			t.Fatalf("Schedule %s: %v", key, err)
		}
		want[key], keys = due, append(keys, key)
	}
	for i := range 20 {
		schedule(i, 1500*time.Millisecond+time.Duration(i)*50*time.Millisecond)
	}

	proxy.Cut()
	start := time.Now()
	err = s.Schedule(context.Background(), "during", time.Now())
	if err == nil {
		t.Fatal("Schedule succeeded while the broker was unreachable")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Schedule took %v to fail: want its bounded retries only", took)
	}
	if err := s.Ping(context.Background()); err == nil {
		t.Error("Ping: nil while the broker was unreachable")
	}
	proxy.Restore(t)

	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not reconnected within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 20; i < 30; i++ {
		schedule(i, 300*time.Millisecond)
	}
	last := time.Time{}
	for _, due := range want {
		last = later(last, due)
	}
	rec.waitDelivered(t, time.Until(last)+10*time.Second, keys...)
	time.Sleep(quiet)
	for _, key := range keys {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", key, len(ds))
		}
		for _, d := range ds {
			if d.At.Before(want[key]) {
				t.Errorf("%s: delivered %v before its due time", key, want[key].Sub(d.At))
			}
		}
	}
	if n := len(rec.deliveries("during")); n != 0 {
		t.Errorf("the timer whose Schedule failed was delivered %d times", n)
	}
	if st := s.Stats(); st.Losses != 0 {
		t.Errorf("%d data losses seen where the connection was only cut", st.Losses)
	}
}

// A timer that the ladder cannot route (a waiting queue was deleted, with
// its binding, and no Run repairs the topology) is an error, which says so;
// once Run's check has declared the topology again, the same timer goes
// through.
func TestUnroutable(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	s := mustOpen(t, amqptimer.Config{Prefix: prefix, LossCheck: lossCheck})
	levels, _, _, _ := amqptimer.Names(prefix, amqptimer.DefaultLevels)
	conn := admin(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(levels[22], false, false, false); err != nil {
		t.Fatal(err)
	}
	week := time.Now().Add(7 * 24 * time.Hour) // level 22 first
	err = s.Schedule(context.Background(), "week", week)
	if !errors.Is(err, rabbit.ErrReturned) {
		t.Fatalf("Schedule through a deleted queue: %v, want an error matching rabbit.ErrReturned", err)
	}
	run(t, s, newRecorder(nil).handler(1))
	waitStats(t, s, "the deleted queue seen", 5*time.Second, func(st amqptimer.Stats) bool { return st.Losses >= 1 })
	if err := s.Schedule(context.Background(), "week", week); err != nil {
		t.Fatalf("Schedule once the topology was declared again: %v", err)
	}
	if got := depth(t, conn, levels[22]); got != 1 {
		t.Errorf("level 22 holds %d timers, want 1", got)
	}
}

// An instance started with another Base on a prefix in use is refused at
// once, with the way out in the error: the queues' TTLs are their
// arguments, which the broker does not let a declaration change.
func TestOtherSettingsRefused(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	mustOpen(t, amqptimer.Config{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	s, err := amqptimer.Open(ctx, brokerURL(t), amqptimer.Config{Prefix: prefix, Base: 50 * time.Millisecond, Logger: discard})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with another Base on the same prefix: no error")
	}
	if !strings.Contains(err.Error(), "PRECONDITION_FAILED") || !strings.Contains(err.Error(), "new prefix") {
		t.Errorf("Open with another Base: %v, want PRECONDITION_FAILED and the advice to use a new prefix", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("refused after %v: want at once", took)
	}
}

// Timers held for their due time (arrived within the lead) when the
// connection is cut are delivered again by the broker on the new channel;
// the copies held from the lost channel must not reach the handler too
// (their acknowledgement would fail anyway). Each key is handed over
// once. A sentinel scheduled after the reconnection, due after every other
// timer, comes out of the held heap after all of them (it is ordered by due
// time), so once it is delivered any second copy would have been as well.
func TestHeldTimersAfterChannelLossDeliveredOnce(t *testing.T) {
	t.Parallel()
	proxy := rabbittest.NewProxy(t, brokerURL(t))
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const lead = 3 * time.Second
	s, err := amqptimer.Open(ctx, proxy.URL, amqptimer.Config{Prefix: prefix, Lead: lead, LossCheck: time.Minute, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))

	const n = 20
	var keys []string
	last := time.Time{}
	for i := range n {
		key, due := fmt.Sprintf("held%02d", i), time.Now().Add(lead+500*time.Millisecond+time.Duration(i)*10*time.Millisecond)
		if err := s.Schedule(context.Background(), key, due); err != nil {
			t.Fatalf("Schedule %s: %v", key, err)
		}
		keys, last = append(keys, key), later(last, due)
	}
	// All of them leave the ladder at once (their lead is longer than
	// their delay) and are held.
	waitStats(t, s, "the timers held", 5*time.Second, func(st amqptimer.Stats) bool { return st.Held >= n })
	if got := len(rec.deliveries(keys[0])); got != 0 {
		t.Fatalf("a held timer was delivered %d times before its due time", got)
	}

	proxy.Cut()
	proxy.Restore(t)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not reconnected within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The publishing connection may notice the cut after Ping's did: a
	// schedule is tried again until it lands, as the service's would be.
	for {
		err := s.Schedule(context.Background(), "sentinel", last.Add(200*time.Millisecond))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Schedule sentinel: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec.waitDelivered(t, time.Until(last)+15*time.Second, append(keys, "sentinel")...)
	for _, key := range keys {
		if got := len(rec.deliveries(key)); got != 1 {
			t.Errorf("%s: delivered %d times, want once", key, got)
		}
	}
}
