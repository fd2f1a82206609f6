package redis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

// scriptHook counts the script calls a client sends and the pipelines that
// carry them, and holds the first script call until release is closed.
type scriptHook struct {
	mu        sync.Mutex
	calls     int   // EVAL and EVALSHA commands
	pipelines []int // script calls per pipeline
	held      chan struct{}
	release   chan struct{}
	once      sync.Once
}

func isScript(c goredis.Cmder) bool {
	n := strings.ToLower(c.Name())
	return n == "evalsha" || n == "eval"
}

func (h *scriptHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *scriptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, c goredis.Cmder) error {
		if isScript(c) {
			h.once.Do(func() { close(h.held); <-h.release })
			h.mu.Lock()
			h.calls++
			h.mu.Unlock()
		}
		return next(ctx, c)
	}
}

func (h *scriptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cs []goredis.Cmder) error {
		n := 0
		for _, c := range cs {
			if isScript(c) {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.calls += n
			h.pipelines = append(h.pipelines, n)
			h.mu.Unlock()
		}
		return next(ctx, cs)
	}
}

var _ goredis.Hook = (*scriptHook)(nil)

// Schedule and ScheduleMany calls made while another is written go together:
// one schedule.lua call per shard for the timers of all of them, in one
// pipeline, each timer stored with its score.
func TestConcurrentSchedulesShareOneCallPerShard(t *testing.T) {
	u := os.Getenv("LAPSE_TEST_REDIS")
	if u == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 to run")
	}
	rdb, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	h := &scriptHook{held: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	s, err := New(rdb, Config{Prefix: "lapsetest-group-" + randomID(), Shards: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() {
		for _, k := range s.keys.shards {
			rdb.Del(ctx, k.due, k.lease, k.claims, k.meta)
		}
	}()
	// Load the script, so that EVALSHA finds it and no call falls back.
	if err := scheduleScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}

	due := time.Now().Add(time.Hour)
	want := map[string]int64{"lead": ceilMs(due)}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() { errs <- s.Schedule(ctx, "lead", due) }) // written alone; held in the hook
	<-h.held
	const groups, perGroup, singles = 8, 25, 8
	for g := range groups {
		var ts []timer.Timer
		for i := range perGroup {
			k := fmt.Sprintf("g%d-%02d", g, i)
			d := due.Add(time.Duration(g*perGroup+i) * time.Millisecond)
			ts = append(ts, timer.Timer{Key: k, Due: d})
			want[k] = ceilMs(d)
		}
		wg.Go(func() { errs <- s.ScheduleMany(ctx, ts) })
	}
	for i := range singles {
		k := fmt.Sprintf("one-%d", i)
		d := due.Add(-time.Duration(i) * time.Millisecond)
		want[k] = ceilMs(d)
		wg.Go(func() { errs <- s.Schedule(ctx, k, d) })
	}
	// Every call queued behind the one being written: then let it go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.commit.mu.Lock()
		n := len(s.commit.queue)
		s.commit.mu.Unlock()
		if n == groups+singles {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", n, groups+singles)
		}
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	shards := map[int]bool{}
	for k := range want {
		if k != "lead" {
			shards[s.keys.shard(k)] = true
		}
	}
	h.mu.Lock()
	calls, pipelines := h.calls, h.pipelines
	h.mu.Unlock()
	if calls != 1+len(shards) {
		t.Errorf("%d script calls, want 1 for the lead and 1 per shard (%d) for the %d calls queued behind it",
			calls, len(shards), groups+singles)
	}
	if len(pipelines) != 1 || pipelines[0] != len(shards) {
		t.Errorf("script calls per pipeline %v, want one pipeline of %d", pipelines, len(shards))
	}
	for k, score := range want {
		got, err := rdb.ZScore(ctx, s.keys.shards[s.keys.shard(k)].due, k).Result()
		if err != nil || int64(got) != score {
			t.Errorf("%s: score %v (%v), want %d", k, got, err, score)
		}
	}
}
