package redis_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/redis"
	"github.com/lapsehq/lapse/timer/timertest"
)

// The servers the tests run against. CI sets both and fails on a skip:
//
//	bash scripts/redis-cluster.sh start /tmp/lapse-redis-cluster
//	LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 \
//	LAPSE_TEST_REDIS_CLUSTER=redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \
//	go test -race ./timer/redis/
var servers = []struct{ name, env, example string }{
	{"standalone", "LAPSE_TEST_REDIS", "redis://127.0.0.1:6379/0"},
	{"cluster", "LAPSE_TEST_REDIS_CLUSTER", "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"},
}

// forEachServer runs test as a parallel subtest per server, each with one
// client shared by its subtests.
func forEachServer(t *testing.T, test func(t *testing.T, rdb goredis.UniversalClient)) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			test(t, connect(t, srv.env, srv.example))
		})
	}
}

// connect returns a client for the server named by env, closed when t ends.
func connect(t *testing.T, env, example string) goredis.UniversalClient {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("set %s=%s to run", env, example)
	}
	if !strings.Contains(u, "pool_size=") { // parallel subtests, several Run loops each
		u += map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")] + "pool_size=64"
	}
	rdb, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return rdb
}

// newPrefix returns a key prefix of t's own; its keys are deleted when t ends.
func newPrefix(t *testing.T, rdb goredis.UniversalClient) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lapsetest-" + hex.EncodeToString(b)
	t.Cleanup(func() { purge(t, rdb, prefix) })
	return prefix
}

// purge deletes every key of prefix, on every master of a Cluster: what a
// FLUSHALL does to a lapse deployment, without disturbing the tests that run
// beside this one. The keys are listed first and then deleted in one round
// trip per node, so that a scheduler checking its seed markers meanwhile does
// not see a loss that is only half done (and seed twice, once in between).
func purge(t *testing.T, rdb goredis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, c *goredis.Client) error {
		var keys []string
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) == 0 {
			return err
		}
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range keys { // one DEL each: a Cluster node refuses keys of several slots in one
				p.Del(ctx, k)
			}
			return nil
		})
		return err
	}
	var err error
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *goredis.Client:
		err = del(ctx, c)
	default:
		err = fmt.Errorf("purge: unexpected client %T", rdb)
	}
	if err != nil {
		t.Errorf("delete the keys of %s: %v", prefix, err)
	}
}

func mustNew(t *testing.T, rdb goredis.UniversalClient, cfg redis.Config) *redis.Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := redis.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance is not parallel with the other tests of the package: it
// runs first, alone, so that the CPU-heavy ones (SQLite under the race
// detector, thousands of timers across a data loss) do not slow down its
// timing-sensitive subtests on a small machine. Its own subtests, and both
// servers, run in parallel.
func TestConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) { exercise(t, rdb, 100_000) })
}

// exercise runs the timertest suite on rdb with a lease of 1 s; every
// instance a test asks for shares that test's prefix.
func exercise(t *testing.T, rdb goredis.UniversalClient, largeN int) {
	const lease = time.Second
	var (
		mu       sync.Mutex
		prefixes = map[*testing.T]string{}
	)
	timertest.Exercise(t, timertest.Features{
		Durable: true, MultiConsumer: true, CanUnschedule: true,
		Lease: lease, BatchSize: 200, LargeN: largeN,
	}, func(t *testing.T) timer.Scheduler {
		mu.Lock()
		prefix, ok := prefixes[t]
		if !ok {
			prefix = newPrefix(t, rdb)
			prefixes[t] = prefix
		}
		mu.Unlock()
		return mustNew(t, rdb, redis.Config{Prefix: prefix, Lease: lease, BatchSize: 200})
	})
}

// recorder records the deliveries of a test's Run loops.
type recorder struct {
	mu   sync.Mutex
	got  map[string][]delivery
	next func(ctx context.Context, due []timer.Timer) error // after recording; nil acknowledges
}

type delivery struct {
	timer.Timer
	At time.Time
}

func newRecorder(next func(context.Context, []timer.Timer) error) *recorder {
	return &recorder{got: map[string][]delivery{}, next: next}
}

func (r *recorder) handle(ctx context.Context, due []timer.Timer) error {
	at := time.Now()
	r.mu.Lock()
	for _, tm := range due {
		r.got[tm.Key] = append(r.got[tm.Key], delivery{Timer: tm, At: at})
	}
	r.mu.Unlock()
	if r.next == nil {
		return nil
	}
	return r.next(ctx, due)
}

func (r *recorder) deliveries(key string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[key])
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run is timertest.Run for this package's Scheduler.
func run(t *testing.T, s *redis.Scheduler, h timer.Handler) (stop func()) {
	return timertest.Run(t, s, h)
}

func TestScoresAreMillisecondsRoundedUp(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		prefix := newPrefix(t, rdb)
		s := mustNew(t, rdb, redis.Config{Prefix: prefix})
		ctx := context.Background()
		base := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
		type planned struct {
			due   time.Time
			score int64
		}
		want := map[string]planned{}
		for i, off := range []time.Duration{0, time.Nanosecond, 400 * time.Microsecond, 999_999 * time.Nanosecond, time.Millisecond} {
			want[fmt.Sprintf("edge-%d", i)] = planned{base.Add(off), base.Add(off + 999_999).Truncate(time.Millisecond).UnixMilli()}
		}
		// A dense run of sub-millisecond due times, 37 µs apart.
		for i := range 200 {
			due := base.Add(time.Duration(i)*37*time.Microsecond + time.Nanosecond)
			want[fmt.Sprintf("dense-%03d", i)] = planned{due, due.Truncate(time.Millisecond).UnixMilli() + 1}
		}
		for key, p := range want {
			if err := s.Schedule(ctx, key, p.due); err != nil {
				t.Fatal(err)
			}
		}
		// The score, read from the shard the key went to, is the due time in
		// milliseconds rounded up.
		for _, key := range []string{"edge-0", "edge-1", "edge-2", "edge-3", "edge-4", "dense-007"} {
			var scores []float64
			for sh := range 16 {
				if sc, err := rdb.ZScore(ctx, fmt.Sprintf("%s:{s%02d}:due", prefix, sh), key).Result(); err == nil {
					scores = append(scores, sc)
				}
			}
			if len(scores) != 1 || int64(scores[0]) != want[key].score {
				t.Errorf("%s (due %s): scores %v in the shards, want exactly one, %d", key,
					want[key].due.Format("15:04:05.000000000"), scores, want[key].score)
			}
		}
		r := newRecorder(nil)
		run(t, s, r.handle)
		waitFor(t, "every timer delivered", 5*time.Second, func() bool {
			for key := range want {
				if len(r.deliveries(key)) == 0 {
					return false
				}
			}
			return true
		})
		for key, p := range want {
			ds := r.deliveries(key)
			if len(ds) != 1 {
				t.Errorf("%s: delivered %d times", key, len(ds))
			}
			if d := ds[0]; d.At.Before(p.due) {
				t.Errorf("%s: delivered %v before its due time", key, p.due.Sub(d.At))
			} else if d.Due.UnixMilli() != p.score || d.Due.Before(p.due) {
				t.Errorf("%s: delivered with Due %v, want its due time rounded up to the ms (%d)", key, d.Due, p.score)
			}
		}
	})
}

func TestScheduleOfATimerInFlightWins(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		s := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb), Lease: time.Second})
		var (
			mu    sync.Mutex
			seen  = map[string]bool{}
			moved time.Time
		)
		// Every timer's first delivery fails; while it is in hand, "moved" is
		// scheduled again and "dropped" unscheduled.
		r := newRecorder(func(ctx context.Context, due []timer.Timer) error {
			mu.Lock()
			defer mu.Unlock()
			fail := false
			for _, tm := range due {
				if seen[tm.Key] {
					continue
				}
				seen[tm.Key], fail = true, true
				switch tm.Key {
				case "moved":
					moved = time.Now().Add(300 * time.Millisecond)
					if err := s.Schedule(ctx, "moved", moved); err != nil {
						t.Error(err)
					}
				case "dropped":
					if err := s.Unschedule(ctx, "dropped"); err != nil {
						t.Error(err)
					}
				}
			}
			if fail {
				return errors.New("refused")
			}
			return nil
		})
		now := time.Now()
		for _, key := range []string{"kept", "moved", "dropped"} {
			if err := s.Schedule(context.Background(), key, now); err != nil {
				t.Fatal(err)
			}
		}
		run(t, s, r.handle)
		waitFor(t, "kept redelivered and moved delivered again", 5*time.Second, func() bool {
			return len(r.deliveries("kept")) >= 2 && len(r.deliveries("moved")) >= 2
		})
		time.Sleep(timer.Backoff(2) + time.Second) // past any requeue and the lease
		attempts := func(key string) []int {
			var as []int
			for _, d := range r.deliveries(key) {
				as = append(as, d.Attempt)
			}
			return as
		}
		if got := attempts("kept"); !slices.Equal(got, []int{1, 2}) {
			t.Errorf("kept: attempts %v, want [1 2] (failed, then redelivered)", got)
		}
		if got := attempts("moved"); !slices.Equal(got, []int{1, 1}) {
			t.Errorf("moved: attempts %v, want [1 1] (the new schedule, not the failed claim, decides)", got)
		} else if d := r.deliveries("moved")[1]; d.At.Before(moved) {
			t.Errorf("moved: delivered %v before its new due time", moved.Sub(d.At))
		}
		if got := attempts("dropped"); !slices.Equal(got, []int{1}) {
			t.Errorf("dropped: attempts %v, want [1] (unscheduled in flight: never requeued)", got)
		}
	})
}

// A timer scheduled again while its handler runs is delivered again at its
// new due time, although the handler succeeds: the acknowledgement of the
// batch it came in does not remove the new schedule.
func TestScheduleWhileTheHandlerRunsOutlivesItsAck(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		s := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb), Lease: time.Second})
		var (
			mu    sync.Mutex
			moved time.Time
		)
		r := newRecorder(func(ctx context.Context, due []timer.Timer) error {
			mu.Lock()
			defer mu.Unlock()
			for _, tm := range due {
				if tm.Key == "moved" && moved.IsZero() {
					moved = time.Now().Add(300 * time.Millisecond)
					if err := s.Schedule(ctx, "moved", moved); err != nil {
						t.Error(err)
					}
				}
			}
			return nil
		})
		if err := s.Schedule(context.Background(), "moved", time.Now()); err != nil {
			t.Fatal(err)
		}
		run(t, s, r.handle)
		waitFor(t, "moved delivered again", 5*time.Second, func() bool { return len(r.deliveries("moved")) >= 2 })
		mu.Lock()
		defer mu.Unlock()
		ds := r.deliveries("moved")
		if ds[1].At.Before(moved) {
			t.Errorf("moved: delivered again %v before its new due time", moved.Sub(ds[1].At))
		}
		if ds[1].Attempt != 1 || ds[1].Due.Before(moved) {
			t.Errorf("moved: delivered again as attempt %d due %v, want attempt 1 due %v", ds[1].Attempt, ds[1].Due, moved)
		}
	})
}

func TestLeaseIsKeptWhileTheHandlerRuns(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		const lease = 200 * time.Millisecond
		prefix := newPrefix(t, rdb)
		a := mustNew(t, rdb, redis.Config{Prefix: prefix, Lease: lease})
		b := mustNew(t, rdb, redis.Config{Prefix: prefix, Lease: lease})
		slow := func(context.Context, []timer.Timer) error {
			time.Sleep(5 * lease)
			return nil
		}
		r := newRecorder(slow)
		if err := a.Schedule(context.Background(), "slow", time.Now()); err != nil {
			t.Fatal(err)
		}
		run(t, a, r.handle)
		run(t, b, r.handle)
		waitFor(t, "delivered", 5*time.Second, func() bool { return len(r.deliveries("slow")) > 0 })
		time.Sleep(8 * lease) // the handler takes 5 leases; then well past the last one
		if n := len(r.deliveries("slow")); n != 1 {
			t.Errorf("delivered %d times; a running handler's lease must be extended", n)
		}
	})
}

func TestScheduleMany(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		s := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb)})
		ctx := context.Background()
		// 2500 timers over 16 shards: several 1000-timer chunks for some.
		const n = 2500
		base := time.Now().Add(200 * time.Millisecond)
		var ts []timer.Timer
		for i := range n {
			ts = append(ts, timer.Timer{Key: fmt.Sprintf("many-%04d", i), Due: base.Add(time.Duration(i%100) * time.Millisecond)})
		}
		if err := s.ScheduleMany(ctx, ts); err != nil {
			t.Fatal(err)
		}
		if err := s.ScheduleMany(ctx, []timer.Timer{{Key: "ok"}, {Key: ""}}); err == nil {
			t.Error("ScheduleMany accepted an empty key")
		}
		r := newRecorder(nil)
		run(t, s, r.handle)
		waitFor(t, "every timer delivered", 5*time.Second, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.got) == n
		})
		for _, tm := range ts {
			switch ds := r.deliveries(tm.Key); {
			case len(ds) != 1:
				t.Errorf("%s: delivered %d times, want once", tm.Key, len(ds))
			case ds[0].At.Before(tm.Due):
				t.Errorf("%s: delivered %v before its due time", tm.Key, tm.Due.Sub(ds[0].At))
			}
		}
	})
}

// Two deployments on one Redis database, each with a prefix of its own,
// schedule timers with the same keys (order ids are only unique within a
// deployment): each gets every one of its own timers once, and none of the
// other's.
func TestPrefixesKeepDeploymentsApart(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		const n = 50
		due := time.Now().Add(300 * time.Millisecond)
		type deployment struct {
			s *redis.Scheduler
			r *recorder
		}
		var ds []deployment
		for range 2 {
			d := deployment{s: mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb), LossCheck: time.Hour}), r: newRecorder(nil)}
			for i := range n {
				if err := d.s.Schedule(context.Background(), fmt.Sprintf("order-%02d", i), due); err != nil {
					t.Fatal(err)
				}
			}
			ds = append(ds, d)
		}
		for _, d := range ds {
			run(t, d.s, d.r.handle)
		}
		for i, d := range ds {
			waitFor(t, fmt.Sprintf("deployment %d's timers delivered", i), 5*time.Second, func() bool {
				d.r.mu.Lock()
				defer d.r.mu.Unlock()
				return len(d.r.got) == n
			})
		}
		for i, d := range ds {
			for k := range n {
				if got := len(d.r.deliveries(fmt.Sprintf("order-%02d", k))); got != 1 {
					t.Errorf("deployment %d: order-%02d delivered %d times, want once", i, k, got)
				}
			}
		}
	})
}

func TestPing(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		if err := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb)}).Ping(context.Background()); err != nil {
			t.Errorf("Ping of a Redis that answers: %v", err)
		}
	})
	dead, err := redis.ParseURL("redis://127.0.0.1:1/0?dial_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	if err := mustNew(t, dead, redis.Config{}).Ping(context.Background()); err == nil {
		t.Error("Ping of a Redis that is not there: nil")
	}
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{"lapse": true, "shop-eu:prod": true, "": false, "a{b": false, "a}b": false} {
		if err := redis.ValidatePrefix(p); (err == nil) != ok {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
}

func TestOneRunAtATime(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		s := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb)})
		r := newRecorder(nil)
		stop := run(t, s, r.handle)
		time.Sleep(50 * time.Millisecond)
		if err := s.Run(context.Background(), r.handle); err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("a second Run on one Scheduler: %v, want an error", err)
		}
		stop()
		run(t, s, r.handle)
		if err := s.Schedule(context.Background(), "after", time.Now()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "delivered by the second Run", 5*time.Second, func() bool { return len(r.deliveries("after")) == 1 })
	})
}

// fakeStore is a fake of lapse's store: the pending orders' deadlines, which the
// seed function schedules again.
type fakeStore struct {
	mu      sync.Mutex
	pending map[string]time.Time
	seeds   atomic.Int32
}

func (st *fakeStore) add(key string, due time.Time) {
	st.mu.Lock()
	st.pending[key] = due
	st.mu.Unlock()
}

// seed is what lapse hands the scheduler: schedule every pending order,
// earliest first, one Schedule call each.
func (st *fakeStore) seed(s *redis.Scheduler) func(context.Context) error {
	return func(ctx context.Context) error {
		st.mu.Lock()
		var pending []timer.Timer
		for k, v := range st.pending {
			pending = append(pending, timer.Timer{Key: k, Due: v})
		}
		st.mu.Unlock()
		slices.SortFunc(pending, func(a, b timer.Timer) int { return a.Due.Compare(b.Due) })
		for _, p := range pending {
			if err := s.Schedule(ctx, p.Key, p.Due); err != nil {
				return err
			}
		}
		st.seeds.Add(1)
		return nil
	}
}

// cancel is the handler: a delivered order is no longer pending.
func (st *fakeStore) cancel(_ context.Context, due []timer.Timer) error {
	st.mu.Lock()
	for _, tm := range due {
		delete(st.pending, tm.Key)
	}
	st.mu.Unlock()
	return nil
}

func (st *fakeStore) left() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.pending)
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func TestDataLossIsReseeded(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		const lossCheck = 100 * time.Millisecond
		prefix := newPrefix(t, rdb)
		logs := &logBuffer{}
		cfg := redis.Config{Prefix: prefix, Lease: time.Second, LossCheck: lossCheck,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		st := &fakeStore{pending: map[string]time.Time{}}
		r := newRecorder(st.cancel)

		// 1. Orders pending before the scheduler ever ran: the first Run finds
		// no seed marker and seeds them.
		start := time.Now()
		for i := range 20 {
			st.add(fmt.Sprintf("before-%02d", i), start.Add(time.Duration(i)*10*time.Millisecond))
		}
		s := mustNew(t, rdb, cfg)
		s.SetSeed(st.seed(s))
		stop := run(t, s, r.handle)
		waitFor(t, "the orders pending before the first start cancelled", 5*time.Second, func() bool { return st.left() == 0 })
		if n := st.seeds.Load(); n != 1 {
			t.Fatalf("seeded %d times at the first start, want once", n)
		}

		// 2. Under load: 2000 orders due over the next two seconds, scheduled
		// as they are created. A second in, Redis loses every key of the
		// deployment, seed markers included (a FLUSHALL, or a restart
		// without persistence).
		const n = 2000
		base := time.Now().Add(200 * time.Millisecond)
		dues := map[string]time.Time{}
		for i := range n {
			key := fmt.Sprintf("order-%04d", i)
			due := base.Add(time.Duration(i) * 2 * time.Second / n)
			dues[key] = due
			st.add(key, due)
			if err := s.Schedule(context.Background(), key, due); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Until(base.Add(time.Second)))
		purge(t, rdb, prefix)
		lost := time.Now()
		// A seed ends when its markers say so, just before it logs it.
		waitFor(t, "the loss detected and the timers seeded again", 2*time.Second+lossCheck, func() bool { return logs.count("seeded from the store") == 2 })
		seeded := time.Now()
		t.Logf("seeded again %v after the loss", seeded.Sub(lost).Round(time.Millisecond))
		waitFor(t, "every order cancelled", 5*time.Second+time.Until(base.Add(2*time.Second)), func() bool { return st.left() == 0 })
		var maxLate time.Duration
		dups := 0
		for key, due := range dues {
			ds := r.deliveries(key)
			if len(ds) == 0 {
				t.Errorf("%s: never delivered", key)
				continue
			}
			dups += len(ds) - 1
			if ds[0].At.Before(due) {
				t.Errorf("%s: delivered %v before its due time", key, due.Sub(ds[0].At))
			}
			late := ds[0].At.Sub(due)
			maxLate = max(maxLate, late)
			// Within 2 s of its due time, or — due before the seed had
			// put it back — within a second of the seed: the loss is
			// found and the store read again first, and on a loaded
			// machine that alone can take over a second.
			bound := 2 * time.Second
			if due.Before(seeded) {
				bound = max(bound, seeded.Sub(due)+time.Second)
			}
			if late > bound {
				t.Errorf("%s: delivered %v after its due time, across the loss (bound %v)", key, late, bound)
			}
		}
		t.Logf("%d orders across the loss: latest %v after its due time; %d duplicate deliveries", n, maxLate.Round(time.Millisecond), dups)
		if c := logs.count("seed markers missing"); c != 2 {
			t.Errorf("%d log lines reporting missing seed markers, want 2 (first start, loss):\n%s", c, logs.b.String())
		}
		if c := logs.count("seeded from the store"); c != 2 {
			t.Errorf("%d log lines reporting a seed, want 2", c)
		}

		// 3. A restart on a Redis that kept its data (and markers) does not
		// seed; a timer scheduled before it fires after it.
		due := time.Now().Add(300 * time.Millisecond)
		st.add("across-restart", due)
		if err := s.Schedule(context.Background(), "across-restart", due); err != nil {
			t.Fatal(err)
		}
		stop()
		s2 := mustNew(t, rdb, cfg)
		s2.SetSeed(st.seed(s2))
		run(t, s2, r.handle)
		waitFor(t, "the timer set before the restart delivered", 5*time.Second, func() bool { return st.left() == 0 })
		time.Sleep(3 * lossCheck)
		if n := st.seeds.Load(); n != 2 {
			t.Errorf("seeded %d times; a restart on intact data must not seed", n)
		}
	})
}

func TestAnotherInstanceSeeding(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		prefix := newPrefix(t, rdb)
		cfg := redis.Config{Prefix: prefix, LossCheck: 50 * time.Millisecond}
		release := make(chan struct{})
		var seeds atomic.Int32
		slowSeed := func(context.Context) error {
			seeds.Add(1)
			<-release
			return nil
		}
		for range 3 {
			s := mustNew(t, rdb, cfg)
			s.SetSeed(slowSeed)
			run(t, s, func(context.Context, []timer.Timer) error { return nil })
		}
		waitFor(t, "one instance seeding", 5*time.Second, func() bool { return seeds.Load() > 0 })
		time.Sleep(300 * time.Millisecond)
		close(release)
		time.Sleep(300 * time.Millisecond)
		if n := seeds.Load(); n != 1 {
			t.Errorf("%d instances seeded an empty Redis at once, want 1 (the seed lock)", n)
		}
	})
}

// Redis loses its data while instance A seeds; instance B finds the markers
// missing, takes the seed lock and starts a seed of its own; A finishes, and
// B dies before it does. A's seed began before the loss, so it vouches for
// nothing: the markers must not read "seeded", and the timers must be
// seeded again. (A used to set every existing marker to "ok" over B's, and
// the timers the loss took were never seeded again.)
func TestSeedOverlappingALossIsDoneAgain(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		prefix := newPrefix(t, rdb)
		logs := &logBuffer{}
		cfg := redis.Config{Prefix: prefix, Lease: time.Second, LossCheck: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		st := &fakeStore{pending: map[string]time.Time{}}
		for i := range 20 {
			st.add(fmt.Sprintf("order-%02d", i), time.Now().Add(100*time.Millisecond))
		}

		// A's first seed schedules every pending order, then is slow.
		a := mustNew(t, rdb, cfg)
		aSeeded, aGo := make(chan struct{}), make(chan struct{})
		var aSeeds atomic.Int32
		a.SetSeed(func(ctx context.Context) error {
			if err := st.seed(a)(ctx); err != nil {
				return err
			}
			if aSeeds.Add(1) == 1 {
				close(aSeeded)
				<-aGo
			}
			return nil
		})
		r := newRecorder(nil) // A cancels nothing: its orders stay pending in the store
		run(t, a, r.handle)
		<-aSeeded
		purge(t, rdb, prefix) // the loss: A's timers, the markers and the lock
		lost := time.Now()

		// B takes the seed over and is in the middle of it.
		bCfg := cfg
		bCfg.Logger = slog.New(slog.DiscardHandler)
		b := mustNew(t, rdb, bCfg)
		bSeeding := make(chan struct{})
		b.SetSeed(func(ctx context.Context) error {
			close(bSeeding)
			<-ctx.Done() // B dies mid-seed
			return ctx.Err()
		})
		stopB := run(t, b, func(context.Context, []timer.Timer) error { return nil })
		<-bSeeding

		close(aGo)
		waitFor(t, "A's seed to end", 5*time.Second, func() bool {
			return logs.count("seeded from the store")+logs.count("seed markers changed during the seed") > 0
		})
		stopB()
		waitFor(t, "every order delivered after the loss", 10*time.Second, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			after := 0
			for _, ds := range r.got {
				if ds[len(ds)-1].At.After(lost) {
					after++
				}
			}
			return after == 20
		})
		if n := aSeeds.Load(); n < 2 {
			t.Errorf("A seeded %d times, want a second seed after B died", n)
		}
	})
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url     string
		cluster []string // the cluster's seed addresses; nil for a standalone client
		addr    string   // a standalone client's address
		db      int
		err     string
	}{
		{url: "redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379"},
		{url: "redis://:secret@cache.internal:6380/3?dial_timeout=2s", addr: "cache.internal:6380", db: 3},
		{url: "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", cluster: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}},
		{url: "redis-cluster://user:pw@h1:7000,h2:7001/0?read_timeout=1s", cluster: []string{"h1:7000", "h2:7001"}},
		{url: "rediss-cluster://h1:7000", cluster: []string{"h1:7000"}},
		{url: "redis-cluster://h1:7000,h2:7001/2", err: "only database 0"},
		{url: "redis-cluster://h1:7000,,h2:7001", err: "want host:port"},
		{url: "redis-cluster://h1:7000?no_such_option=1", err: "no_such_option"},
		{url: "memcached://h1:11211", err: "scheme"},
		{url: "127.0.0.1:6379", err: "without a scheme"},
		{url: "redis://:secret@h1:6379/x", err: "invalid database"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			rdb, err := redis.ParseURL(tc.url)
			if tc.err != "" {
				if err == nil {
					_ = rdb.Close()
					t.Fatalf("no error, want one mentioning %q", tc.err)
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q, want it to mention %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			switch c := rdb.(type) {
			case *goredis.ClusterClient:
				if tc.cluster == nil {
					t.Fatalf("a cluster client for a standalone URL")
				}
				if got := c.Options().Addrs; !slices.Equal(got, tc.cluster) {
					t.Errorf("cluster addresses %v, want %v", got, tc.cluster)
				}
			case *goredis.Client:
				if tc.cluster != nil {
					t.Fatalf("a standalone client for a cluster URL")
				}
				if o := c.Options(); o.Addr != tc.addr || o.DB != tc.db {
					t.Errorf("addr %s db %d, want %s db %d", o.Addr, o.DB, tc.addr, tc.db)
				}
			default:
				t.Fatalf("client %T", rdb)
			}
		})
	}
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	for _, tc := range []struct {
		cfg   redis.Config
		field string
	}{
		{redis.Config{Prefix: "a{b}"}, "Config.Prefix"},
		{redis.Config{Shards: -1}, "Config.Shards"},
		{redis.Config{Shards: 1001}, "Config.Shards"},
		{redis.Config{Shards: 2, Workers: 3}, "Config.Workers"},
		{redis.Config{BatchSize: 1001}, "Config.BatchSize"},
		{redis.Config{Lease: time.Millisecond}, "Config.Lease"},
		{redis.Config{MaxSleep: time.Microsecond}, "Config.MaxSleep"},
		{redis.Config{LossCheck: time.Millisecond}, "Config.LossCheck"},
	} {
		if _, err := redis.New(rdb, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v): error %v, want one naming %s", tc.cfg, err, tc.field)
		}
	}
	s, err := redis.New(rdb, redis.Config{})
	if err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	if !s.Durable() {
		t.Error("not Durable")
	}
	if err := s.Schedule(context.Background(), "", time.Now()); err == nil {
		t.Error("Schedule accepted an empty key")
	}
	if _, err := redis.New(nil, redis.Config{}); err == nil {
		t.Error("New accepted a nil client")
	}
}

func TestRunWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // nothing listens there
	defer rdb.Close()
	logs := &logBuffer{}
	s := mustNew(t, rdb, redis.Config{Prefix: "down", MaxSleep: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	s.SetSeed(func(context.Context) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Run(ctx, func(context.Context, []timer.Timer) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run returned %v, want context.DeadlineExceeded: Redis errors must not end it", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Run returned %v after its ctx's deadline of 500ms", took)
	}
	// Each worker reports the outage once, not every retry; the data-loss
	// check backs off.
	if n := logs.count("level=ERROR"); n == 0 || n > 10 {
		t.Errorf("%d error lines in 500ms of outage, want a few:\n%s", n, logs.b.String())
	}
	if err := s.Schedule(context.Background(), "k", time.Now()); err == nil {
		t.Error("Schedule reported success with Redis down")
	}
}

// A worker hands the due timers of all its shards to the handler in one call
// (for lapse: one cancel transaction), up to BatchSize, and a failed call puts
// every claim of it back.
func TestOneCallForTheDueShardsOfAWorker(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		s := mustNew(t, rdb, redis.Config{Prefix: newPrefix(t, rdb), Shards: 8, Workers: 1, BatchSize: 20,
			Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
		ctx := context.Background()
		var ts []timer.Timer
		for i := range 30 { // over the 8 shards, more than one batch
			ts = append(ts, timer.Timer{Key: fmt.Sprintf("k-%02d", i), Due: time.Now().Add(-time.Second)})
		}
		if err := s.ScheduleMany(ctx, ts); err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			calls []int
		)
		r := newRecorder(func(_ context.Context, due []timer.Timer) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, len(due))
			if len(calls) == 1 {
				return errors.New("the first call fails")
			}
			return nil
		})
		run(t, s, r.handle)
		waitFor(t, "every timer acknowledged", 5*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, c := range calls[min(1, len(calls)):] {
				n += c
			}
			return n == 30
		})
		mu.Lock()
		defer mu.Unlock()
		if calls[0] != 20 {
			t.Errorf("first call: %d timers, want a full batch of 20 from several shards (calls %v)", calls[0], calls)
		}
		if len(calls) > 4 { // 20 (failed), 10, and the 20 again in one or two
			t.Errorf("%d handler calls for 30 timers (+ 20 redelivered) in batches of 20: %v", len(calls), calls)
		}
		for _, tm := range ts {
			if ds := r.deliveries(tm.Key); len(ds) == 0 || len(ds) > 2 {
				t.Errorf("%s delivered %d times", tm.Key, len(ds))
			}
		}
	})
}
