package redis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

// A claim leaves meta a hash table, however few timers it took: as a
// listpack, a batch's lookups and inserts each scan the hash. The field that
// keeps it so is never delivered and survives the acknowledgement of every
// timer; the claim's own entries in lease and claims go with its
// acknowledgement.
func TestClaimKeepsMetaOutOfAListpack(t *testing.T) {
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
	defer rdb.Del(ctx, k.due, k.lease, k.claims, k.meta)
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
	if enc, err := rdb.ObjectEncoding(ctx, k.meta).Result(); err != nil || enc != "hashtable" {
		t.Errorf("%s: encoding %q (%v), want hashtable", k.meta, enc, err)
	}
	if n, err := rdb.ZCard(ctx, k.lease).Result(); err != nil || n != 1 {
		t.Errorf("lease holds %d (%v), want the claim's one entry", n, err)
	}
	s.ackAll(ctx, []claimed{c})
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.lease, k.claims, k.due} {
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s exists (%v) after the ack, want it gone with the claim", key, err)
		}
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
		rdb.Del(context.Background(), k.due, k.lease, k.claims, k.meta, k.seeded)
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
	if _, err := rdb.ZScore(ctx, k.lease, first.id).Result(); err != goredis.Nil {
		t.Errorf("first claim: still leased (%v) after its acknowledgement", err)
	}
	if ok, err := rdb.HExists(ctx, k.claims, first.id).Result(); err != nil || ok {
		t.Errorf("first claim: still in claims (%v) after its acknowledgement", err)
	}
	for _, tm := range first.timers {
		if _, err := rdb.HGet(ctx, k.meta, tm.Key).Result(); err != goredis.Nil {
			t.Errorf("%s: still in meta (%v) after its acknowledgement", tm.Key, err)
		}
	}
	if _, err := rdb.ZScore(ctx, k.lease, second.id).Result(); err != nil {
		t.Errorf("second claim: not leased after it was made: %v", err)
	}
	if held := heldBy(t, rdb, k, second); len(held) != len(second.timers) {
		t.Errorf("second claim holds %v, want its %d timers", held, len(second.timers))
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
		leases, err := rdb.ZCard(ctx, k.lease).Result()
		_, metaErr := rdb.HGet(ctx, k.meta, "last").Result()
		if err == nil && leases == 0 && metaErr == goredis.Nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s on the delivered timer's claim is still leased (%d leases, %v) or it is in meta (%v): not acknowledged", leases, err, metaErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scheduleAt schedules keys at due.
func scheduleAt(t *testing.T, s *Scheduler, due time.Time, keys ...string) {
	t.Helper()
	ts := make([]timer.Timer, len(keys))
	for i, key := range keys {
		ts[i] = timer.Timer{Key: key, Due: due}
	}
	if err := s.ScheduleMany(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
}

// mustClaim claims up to 100 timers of shard 0 as of now (a claim as of an
// hour ago holds a lease that ran out long ago) and checks that it took the
// keys want, in any order.
func mustClaim(t *testing.T, s *Scheduler, now time.Time, want ...string) claimed {
	t.Helper()
	c, err := s.claim(context.Background(), 0, now, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tm := range c.timers {
		got = append(got, tm.Key)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("claim as of %v took %v, want %v", now.Format(time.TimeOnly), got, want)
	}
	return c
}

// heldBy returns the timer keys whose meta names claim c, sorted: those c
// may still acknowledge, requeue or have recovered.
func heldBy(t *testing.T, rdb goredis.UniversalClient, k shardKeys, c claimed) []string {
	t.Helper()
	all, err := rdb.HGetAll(context.Background(), k.meta).Result()
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for key, v := range all {
		if strings.HasSuffix(v, ":"+c.id) {
			held = append(held, key)
		}
	}
	slices.Sort(held)
	return held
}

// dueScores returns the members of due with their scores.
func dueScores(t *testing.T, rdb goredis.UniversalClient, k shardKeys) map[string]int64 {
	t.Helper()
	zs, err := rdb.ZRangeWithScores(context.Background(), k.due, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]int64, len(zs))
	for _, z := range zs {
		m[z.Member.(string)] = int64(z.Score)
	}
	return m
}

// A timer scheduled again while a claim holds it is the new schedule's: the
// old claim's acknowledgement, requeue or recovery (its lease ran out) leaves
// it alone, whether it waits in due or another claim took it meanwhile, and it
// is delivered at its new due time as a first attempt. The claim's other
// timers are acknowledged, requeued or recovered as usual.
func TestScheduleVoidsTheOldClaimOfATimer(t *testing.T) {
	for _, end := range []string{"ack", "retry", "recover"} {
		t.Run(end, func(t *testing.T) {
			s, _, rdb := newTestScheduler(t, Config{})
			ctx := context.Background()
			k := s.keys.shards[0]
			long := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
			scheduleAt(t, s, long, "kept", "moved", "reclaimed")
			old := mustClaim(t, s, time.Now().Add(-time.Hour), "kept", "moved", "reclaimed")
			later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			scheduleAt(t, s, later, "moved")
			scheduleAt(t, s, long.Add(time.Hour), "reclaimed")
			other := mustClaim(t, s, time.Now(), "reclaimed")
			if a := other.timers[0].Attempt; a != 1 {
				t.Errorf("reclaimed: attempt %d after its new schedule, want 1", a)
			}
			switch end {
			case "ack":
				s.ackAll(ctx, []claimed{old})
			case "retry":
				s.retry(ctx, old, time.Now())
			case "recover":
				if err := s.recover(ctx, 0); err != nil {
					t.Fatal(err)
				}
			}
			if held := heldBy(t, rdb, k, old); len(held) != 0 {
				t.Errorf("after its %s the old claim still holds %v", end, held)
			}
			if held := heldBy(t, rdb, k, other); !slices.Equal(held, []string{"reclaimed"}) {
				t.Errorf("after the old claim's %s the other claim holds %v, want [reclaimed]", end, held)
			}
			due := dueScores(t, rdb, k)
			if due["moved"] != later.UnixMilli() {
				t.Errorf("moved: due at %d, want its new due time %d", due["moved"], later.UnixMilli())
			}
			if _, ok := due["reclaimed"]; ok {
				t.Errorf("reclaimed: back in due after the old claim's %s; the other claim holds it", end)
			}
			if meta, err := rdb.HGet(ctx, k.meta, "moved").Result(); err != goredis.Nil {
				t.Errorf("moved: meta %q (%v) after the old claim's %s, want none (never delivered since)", meta, err, end)
			}
			_, kept := due["kept"]
			if kept != (end != "ack") {
				t.Errorf("kept: in due %v after the claim's %s", kept, end)
			}
			again := mustClaim(t, s, later, map[bool][]string{true: {"moved"}, false: {"kept", "moved"}}[end == "ack"]...)
			for _, tm := range again.timers {
				if tm.Key == "moved" && (tm.Attempt != 1 || !tm.Due.Equal(later)) {
					t.Errorf("moved: delivered as attempt %d due %v, want attempt 1 due %v", tm.Attempt, tm.Due, later)
				}
				if tm.Key == "kept" && (tm.Attempt != 2 || !tm.Due.Equal(long)) {
					t.Errorf("kept: delivered as attempt %d due %v, want attempt 2 due %v", tm.Attempt, tm.Due, long)
				}
			}
		})
	}
}

// A claim whose lease ran out (its consumer died) comes back once, however
// often recovery runs, as a further attempt with its original due time; an
// acknowledgement, requeue or extension by the dead claim that comes late
// leaves the new claim's timers alone.
func TestExpiredClaimComesBackOnce(t *testing.T) {
	s, _, rdb := newTestScheduler(t, Config{})
	ctx := context.Background()
	k := s.keys.shards[0]
	long := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	keys := []string{"e0", "e1", "e2", "e3", "e4"}
	scheduleAt(t, s, long, keys...)
	dead := mustClaim(t, s, time.Now().Add(-time.Hour), keys...)
	for range 2 {
		if err := s.recover(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if due := dueScores(t, rdb, k); len(due) != len(keys) {
		t.Fatalf("due after recovery: %v, want the %d timers of the dead claim", due, len(keys))
	}
	next := mustClaim(t, s, time.Now(), keys...)
	for _, tm := range next.timers {
		if tm.Attempt != 2 || !tm.Due.Equal(long) {
			t.Errorf("%s: redelivered as attempt %d due %v, want attempt 2 due %v", tm.Key, tm.Attempt, tm.Due, long)
		}
	}
	mustClaim(t, s, time.Now())
	s.ackAll(ctx, []claimed{dead})
	s.retry(ctx, dead, time.Now())
	if err := s.extend(ctx, dead, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if held := heldBy(t, rdb, k, next); !slices.Equal(held, keys) {
		t.Errorf("after the dead claim's late ack, retry and extension the new claim holds %v, want %v", held, keys)
	}
	if due := dueScores(t, rdb, k); len(due) != 0 {
		t.Errorf("due after the dead claim's late retry: %v, want nothing", due)
	}
	s.ackAll(ctx, []claimed{next})
	if held := heldBy(t, rdb, k, next); len(held) != 0 {
		t.Errorf("after its ack the new claim holds %v", held)
	}
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if due := dueScores(t, rdb, k); len(due) != 0 {
		t.Errorf("due after the ack and a recovery: %v, want nothing", due)
	}
}

// Extending a claim's lease keeps recovery from taking its timers, until the
// extended lease runs out too; once recovered, the claim cannot extend it
// back.
func TestExtendKeepsAClaimFromRecovery(t *testing.T) {
	s, _, rdb := newTestScheduler(t, Config{})
	ctx := context.Background()
	k := s.keys.shards[0]
	keys := []string{"x0", "x1", "x2"}
	scheduleAt(t, s, time.Now().Add(-2*time.Hour), keys...)
	slow := mustClaim(t, s, time.Now().Add(-time.Hour), keys...) // its lease ran out
	if err := s.extend(ctx, slow, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if held := heldBy(t, rdb, k, slow); !slices.Equal(held, keys) {
		t.Errorf("after an extension and a recovery the claim holds %v, want %v", held, keys)
	}
	if due := dueScores(t, rdb, k); len(due) != 0 {
		t.Errorf("due after an extension and a recovery: %v, want nothing", due)
	}
	if err := s.extend(ctx, slow, time.Now().Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.extend(ctx, slow, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if held := heldBy(t, rdb, k, slow); len(held) != 0 {
		t.Errorf("after its lease ran out and was recovered the claim holds %v", held)
	}
	mustClaim(t, s, time.Now(), keys...)
}

// Recovery takes expired claims whole, a bounded number of timers per script
// call, and calls again until every expired claim is back.
func TestRecoverBringsBackManyClaims(t *testing.T) {
	s, _, rdb := newTestScheduler(t, Config{BatchSize: maxBatchSize})
	ctx := context.Background()
	k := s.keys.shards[0]
	const claims, size = 3, 600 // more than recoverLimit in all
	var keys []string
	for i := range claims * size {
		keys = append(keys, fmt.Sprintf("many-%04d", i))
	}
	scheduleAt(t, s, time.Now().Add(-2*time.Hour), keys...)
	for i := range claims {
		c, err := s.claim(ctx, 0, time.Now().Add(-time.Hour), size, nil)
		if err != nil || len(c.timers) != size {
			t.Fatalf("claim %d: %d timers (%v), want %d", i, len(c.timers), err, size)
		}
	}
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if due := dueScores(t, rdb, k); len(due) != len(keys) {
		t.Errorf("due after recovery: %d timers, want %d", len(due), len(keys))
	}
	if n, err := rdb.Exists(ctx, k.lease, k.claims).Result(); err != nil || n != 0 {
		t.Errorf("%d of lease and claims left (%v) after recovery, want none", n, err)
	}
}

// A timer leased by a lapse of the layout before claims (its key a lease
// member of its own) is recovered as such, unless a claim of today's layout
// took it since.
func TestRecoverOldLayoutLease(t *testing.T) {
	s, _, rdb := newTestScheduler(t, Config{})
	ctx := context.Background()
	k := s.keys.shards[0]
	past := time.Now().Add(-time.Hour).UnixMilli()
	scheduleAt(t, s, time.Now().Add(-2*time.Hour), "taken")
	c := mustClaim(t, s, time.Now(), "taken")
	if err := rdb.ZAdd(ctx, k.lease, goredis.Z{Score: float64(past), Member: "old"}, goredis.Z{Score: float64(past), Member: "taken"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.meta, "old", "2:123:0123456789abcdef-1f").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.recover(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if due := dueScores(t, rdb, k); len(due) != 1 || due["old"] == 0 {
		t.Errorf("due after recovery: %v, want only old", due)
	}
	if v, err := rdb.HGet(ctx, k.meta, "old").Result(); err != nil || v != "2:123:" {
		t.Errorf("old: meta %q (%v), want 2:123: (its claim cleared)", v, err)
	}
	if held := heldBy(t, rdb, k, c); !slices.Equal(held, []string{"taken"}) {
		t.Errorf("the claim holds %v after recovery, want [taken]", held)
	}
	if ids, err := rdb.ZRange(ctx, k.lease, 0, -1).Result(); err != nil || !slices.Equal(ids, []string{c.id}) {
		t.Errorf("lease after recovery: %v (%v), want only the claim's", ids, err)
	}
}
