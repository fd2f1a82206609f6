package redistest

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The setup really fails over: with the master SIGKILLed, the sentinels
// promote the replica, and a failover client writes to it.
func TestSentinelFailsOver(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	rdb := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Sentinels})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.KillMaster(t)
	took := s.WaitFailover(t, 20*time.Second)
	t.Logf("failed over %v after the kill", took.Round(time.Millisecond))
	for {
		err := rdb.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no write after the failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	replica := goredis.NewClient(&goredis.Options{Addr: s.Replica})
	defer replica.Close()
	role, err := replica.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		t.Errorf("the replica's ROLE %v (%v), want master", role, err)
	}
}
