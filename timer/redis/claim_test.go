package redis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

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
