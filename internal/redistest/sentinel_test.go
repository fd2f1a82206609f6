package redistest

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The setup really fails over, and loses what the replica missed: with the
// replication cut and the master SIGKILLed, the sentinels promote the
// replica, which has the writes made before the cut and not those after,
// and a failover client writes to it.
func TestSentinelFailsOver(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	rdb := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Sentinels})
	defer rdb.Close()
	replica := goredis.NewClient(&goredis.Options{Addr: s.Replica})
	defer replica.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the write replicated", func() bool {
		v, err := replica.Get(ctx, "k").Result()
		return err == nil && v == "before"
	})
	s.CutReplication(t)
	if err := rdb.Set(ctx, "lost", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.KillMaster(t)
	took := s.WaitFailover(t, 20*time.Second)
	t.Logf("failed over %v after the kill", took.Round(time.Millisecond))
	waitFor(t, ctx, "a write through the failover client", func() bool { return rdb.Set(ctx, "k", "after", 0).Err() == nil })
	if n, err := replica.Exists(ctx, "lost").Result(); err != nil || n != 0 {
		t.Errorf("the write after the cut: EXISTS %d (%v), want 0: it never reached the replica", n, err)
	}
	if v, err := replica.Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Errorf("the promoted replica holds k=%q (%v), want the write made through the failover client", v, err)
	}
	role, err := replica.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		t.Errorf("the replica's ROLE %v (%v), want master", role, err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("%s: not in time", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
