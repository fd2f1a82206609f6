package redis

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial (TestRunWhileRedisIsDown makes
	// hundreds); the tests check what the scheduler logs and does instead.
	goredis.SetLogger(silent{})
	code := m.Run()
	fixture.close()
	os.Exit(code)
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// fixture is BenchmarkClaim's Redis state, loaded once for all its runs (the
// benchmark is run several times with growing b.N) and deleted by TestMain.
var fixture benchFixture

type benchFixture struct {
	once    sync.Once
	err     error
	rdb     goredis.UniversalClient
	s       *Scheduler
	ids     []string
	due     time.Time
	pending []int // per shard, timers in due
	perKey  float64
	loadFor time.Duration
}

// setup loads n timers, all due, and measures the memory they take.
func (f *benchFixture) setup(n int) error {
	f.once.Do(func() {
		u := os.Getenv("LAPSE_TEST_REDIS")
		if u == "" {
			f.err = fmt.Errorf("set LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 to run")
			return
		}
		if f.rdb, f.err = ParseURL(u); f.err != nil {
			return
		}
		f.s, f.err = New(f.rdb, Config{Prefix: "lapsebench-" + randomID(), Logger: slog.New(slog.DiscardHandler)})
		if f.err != nil {
			return
		}
		// Order ids as lapse makes them: UUIDv7 strings, 36 bytes.
		rng := rand.New(rand.NewPCG(1, 2))
		f.ids = make([]string, n)
		ms := time.Now().UnixMilli()
		for i := range f.ids {
			f.ids[i] = fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16, ms&0xffff, rng.IntN(1<<12), 0x8000|rng.IntN(1<<14), rng.Int64N(1<<48))
		}
		f.due = time.Now().Add(-time.Hour)
		ctx := context.Background()
		before, err := usedMemory(ctx, f.rdb)
		if err != nil {
			f.err = err
			return
		}
		start := time.Now()
		if f.err = f.load(ctx); f.err != nil {
			return
		}
		f.loadFor = time.Since(start)
		after, err := usedMemory(ctx, f.rdb)
		if err != nil {
			f.err = err
			return
		}
		f.perKey = float64(after-before) / float64(n)
	})
	return f.err
}

// load schedules every id, pipelined 10,000 at a time.
func (f *benchFixture) load(ctx context.Context) error {
	const chunk = 10_000
	ts := make([]timer.Timer, 0, chunk)
	for i, id := range f.ids {
		// Due times a millisecond apart, in the past: all due, in order.
		ts = append(ts, timer.Timer{Key: id, Due: f.due.Add(time.Duration(i) * time.Microsecond)})
		if len(ts) == chunk || i == len(f.ids)-1 {
			if err := f.s.ScheduleMany(ctx, ts); err != nil {
				return err
			}
			ts = ts[:0]
		}
	}
	f.pending = make([]int, len(f.s.keys.shards))
	for _, id := range f.ids {
		f.pending[f.s.keys.shard(id)]++
	}
	return nil
}

func (f *benchFixture) close() {
	if f.s == nil {
		return
	}
	ctx := context.Background()
	for _, k := range f.s.keys.shards {
		for _, key := range []string{k.due, k.lease, k.claims, k.meta, k.seeded} {
			f.rdb.Del(ctx, key)
		}
	}
	_ = f.rdb.Close()
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb goredis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// BenchmarkClaim is the hot path on a Redis holding a million pending timers
// (100,000 with -short): one op claims a batch of 200 due timers from a shard
// (the claim script), hands it to a handler that returns nil, and
// acknowledges it (the ack script) in the round trip of the next claim, as
// Run does. It reports Redis memory per pending
// timer (used_memory before and after loading, divided by their number), the
// claim script's own time per batch, and timers delivered per second.
//
//	LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 go test -run '^$' -bench Claim -benchtime 2000x ./timer/redis/
func BenchmarkClaim(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	if err := fixture.setup(n); err != nil {
		b.Skip(err)
	}
	f := &fixture
	ctx := context.Background()
	ack := func(context.Context, []timer.Timer) error { return nil }
	var claimFor time.Duration
	delivered := 0
	sh := 0
	var handled []claimed
	b.ResetTimer()
	for range b.N {
		if f.pending[sh] < f.s.cfg.BatchSize { // the shard runs dry: top up
			b.StopTimer()
			if err := f.load(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		start := time.Now()
		c, err := f.s.claim(ctx, sh, time.Now(), f.s.cfg.BatchSize, handled)
		handled = nil
		claimFor += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.timers) != f.s.cfg.BatchSize {
			b.Fatalf("claimed %d timers from shard %d, want %d", len(c.timers), sh, f.s.cfg.BatchSize)
		}
		if f.s.deliver(ctx, []claimed{c}, ack) {
			handled = []claimed{c} // acknowledged with the next claim, as Run does
		}
		f.pending[sh] -= len(c.timers)
		delivered += len(c.timers)
		sh = (sh + 1) % len(f.s.keys.shards)
	}
	f.s.ackAll(ctx, handled)
	b.ReportMetric(f.perKey, "redis-B/timer")
	b.ReportMetric(float64(claimFor.Microseconds())/float64(b.N), "µs-claim/batch")
	b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "timers/s")
	b.Logf("%d pending timers loaded in %v (%.0f/s, pipelined); %.0f bytes of Redis memory each",
		len(f.ids), f.loadFor.Round(time.Millisecond), float64(len(f.ids))/f.loadFor.Seconds(), f.perKey)
}
