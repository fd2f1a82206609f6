package redis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

// A claim leaves lease a skiplist and meta a hash table, however few timers
// it took: as listpacks, a batch's lookups and inserts each scan the set. The
// member that keeps them so is never delivered, never expires and survives
// the acknowledgement of every timer.
func TestClaimKeepsLeaseAndMetaOutOfListpacks(t *testing.T) {
	u := os.Getenv("LAPSE_TEST_REDIS")
	if u == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 to run")
	}
	rdb, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	s, err := New(rdb, Config{Prefix: "lapsetest-pad-" + randomID(), Shards: 1, Lease: minLease, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := s.keys.shards[0]
	defer rdb.Del(ctx, k.due, k.lease, k.meta)
	var ts []timer.Timer
	for i := range 3 {
		ts = append(ts, timer.Timer{Key: fmt.Sprintf("pad-%d", i), Due: time.Now().Add(-time.Second)})
	}
	if err := s.ScheduleMany(ctx, ts); err != nil {
		t.Fatal(err)
	}
	c, err := s.claim(ctx, 0, time.Now(), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.timers) != len(ts) {
		t.Fatalf("claimed %v, want the %d timers", c.timers, len(ts))
	}
	for key, want := range map[string]string{k.lease: "skiplist", k.meta: "hashtable"} {
		if enc, err := rdb.ObjectEncoding(ctx, key).Result(); err != nil || enc != want {
			t.Errorf("%s: encoding %q (%v), want %s", key, enc, err, want)
		}
	}
	s.ackAll(ctx, []claimed{c})
	// The pad's lease never expires: recovering moves nothing back to due.
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	lease, err := rdb.ZRangeWithScores(ctx, k.lease, 0, -1).Result()
	if err != nil || len(lease) != 1 || lease[0].Score < 1e300 {
		t.Errorf("lease after the ack: %v (%v), want only the pad, scored +inf", lease, err)
	}
	if n, err := rdb.ZCard(ctx, k.due).Result(); err != nil || n != 0 {
		t.Errorf("due holds %d (%v), want nothing", n, err)
	}
	if n, err := rdb.HLen(ctx, k.meta).Result(); err != nil || n != 1 {
		t.Errorf("meta holds %d fields (%v), want only the pad", n, err)
	}
	again, err := s.claim(ctx, 0, time.Now().Add(time.Hour), 10, nil)
	if err != nil || len(again.timers) != 0 {
		t.Errorf("a claim an hour on took %v (%v), want nothing", again.timers, err)
	}
}

// newTestScheduler is a one-shard scheduler on LAPSE_TEST_REDIS with a hook
// counting its script calls; its keys are deleted when t ends.
func newTestScheduler(t *testing.T, cfg Config) (*Scheduler, *scriptHook, goredis.UniversalClient) {
	t.Helper()
	u := os.Getenv("LAPSE_TEST_REDIS")
	if u == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 to run")
	}
	rdb, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	h := &scriptHook{held: make(chan struct{}), release: make(chan struct{})}
	close(h.release) // hold nothing
	rdb.AddHook(h)
	cfg.Prefix, cfg.Shards, cfg.Logger = "lapsetest-ack-"+randomID(), 1, slog.New(slog.DiscardHandler)
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k := s.keys.shards[0]
		rdb.Del(context.Background(), k.due, k.lease, k.meta, k.seeded)
		_ = rdb.Close()
	})
	return s, h, rdb
}

// The acknowledgement of a handled batch goes in the round trip of the next
// claim, before it: one pipeline of two script calls.
func TestAckRidesOnTheNextClaim(t *testing.T) {
	s, h, rdb := newTestScheduler(t, Config{})
	ctx := context.Background()
	k := s.keys.shards[0]
	var ts []timer.Timer
	for i := range 6 {
		ts = append(ts, timer.Timer{Key: fmt.Sprintf("ack-%d", i), Due: time.Now().Add(-time.Second)})
	}
	if err := s.ScheduleMany(ctx, ts); err != nil {
		t.Fatal(err)
	}
	first, err := s.claim(ctx, 0, time.Now(), 3, nil)
	if err != nil || len(first.timers) != 3 {
		t.Fatalf("first claim: %v (%v), want 3 timers", first.timers, err)
	}
	h.mu.Lock()
	h.calls, h.pipelines = 0, nil
	h.mu.Unlock()
	second, err := s.claim(ctx, 0, time.Now(), 3, []claimed{first})
	if err != nil || len(second.timers) != 3 {
		t.Fatalf("second claim: %v (%v), want 3 timers", second.timers, err)
	}
	h.mu.Lock()
	calls, pipelines := h.calls, h.pipelines
	h.mu.Unlock()
	if calls != 2 || len(pipelines) != 1 || pipelines[0] != 2 {
		t.Errorf("%d script calls in pipelines %v, want the ack and the claim in one", calls, pipelines)
	}
	for _, tm := range first.timers {
		if _, err := rdb.ZScore(ctx, k.lease, tm.Key).Result(); err != goredis.Nil {
			t.Errorf("%s: still leased (%v) after its acknowledgement", tm.Key, err)
		}
		if _, err := rdb.HGet(ctx, k.meta, tm.Key).Result(); err != goredis.Nil {
			t.Errorf("%s: still in meta (%v) after its acknowledgement", tm.Key, err)
		}
	}
	for _, tm := range second.timers {
		if _, err := rdb.ZScore(ctx, k.lease, tm.Key).Result(); err != nil {
			t.Errorf("%s: not leased after its claim: %v", tm.Key, err)
		}
	}
}

// A worker with nothing more to claim acknowledges its last batch at once,
// not when a later claim comes (or its lease runs out).
func TestLastBatchIsAcknowledgedBeforeTheWorkerSleeps(t *testing.T) {
	s, _, rdb := newTestScheduler(t, Config{Workers: 1, MaxSleep: time.Hour, LossCheck: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	k := s.keys.shards[0]
	if err := s.Schedule(ctx, "last", time.Now()); err != nil {
		t.Fatal(err)
	}
	delivered := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Run(ctx, func(context.Context, []timer.Timer) error {
			close(delivered)
			return nil
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	<-delivered
	deadline := time.Now().Add(5 * time.Second) // well before the 10 s lease
	for {
		_, err := rdb.ZScore(ctx, k.lease, "last").Result()
		if err == goredis.Nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivered timer is still leased 5 s on (%v): not acknowledged", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
