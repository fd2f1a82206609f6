package redis

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"
)

func TestKeyNames(t *testing.T) {
	t.Parallel()
	k := newKeys("lapse", 16)
	if got, want := k.shards[7], (shardKeys{
		due: "lapse:{s07}:due", lease: "lapse:{s07}:lease", claims: "lapse:{s07}:claims", meta: "lapse:{s07}:meta", seeded: "lapse:{s07}:seeded",
	}); got != want {
		t.Errorf("shard 7's keys %+v, want %+v", got, want)
	}
	if k.seedLock != "lapse:seedlock" {
		t.Errorf("seed lock %q", k.seedLock)
	}
	// Every key of a shard hashes to its shard's slot: its first {…} is the tag.
	for i, sk := range newKeys("a-b.c:d", 100).shards {
		for _, key := range []string{sk.due, sk.lease, sk.claims, sk.meta, sk.seeded} {
			open, end := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
			if tag := key[open+1 : end]; tag != fmt.Sprintf("s%02d", i) {
				t.Errorf("%s: hash tag %q, want s%02d", key, tag, i)
			}
		}
	}
}

// The shard of a key must never change: every instance on a prefix, of any
// version, has to find a timer where another put it.
func TestShardOfAKeyIsStable(t *testing.T) {
	t.Parallel()
	k := newKeys("lapse", 16)
	for key, want := range map[string]int{
		"":                                     5,
		"order-1":                              13,
		"0198a3c2-7d4e-7b1a-9f3e-2c5d8e1f4a6b": 9,
	} {
		if got := k.shard(key); got != want {
			t.Errorf("shard(%q) = %d, want %d", key, got, want)
		}
		h := fnv.New32a()
		h.Write([]byte(key))
		if got, want := k.shard(key), int(h.Sum32()%16); got != want {
			t.Errorf("shard(%q) = %d, FNV-1a says %d", key, got, want)
		}
	}
	// And keys spread evenly.
	counts := make([]int, 16)
	const n = 160_000
	for i := range n {
		counts[k.shard(fmt.Sprintf("0198a3c2-7d4e-7b1a-9f3e-%012x", i))]++
	}
	for sh, c := range counts {
		if c < n/16*9/10 || c > n/16*11/10 {
			t.Errorf("shard %d holds %d of %d keys; want about %d", sh, c, n, n/16)
		}
	}
}

func TestScoreIsTheDueTimeRoundedUpToTheMillisecond(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{base, base.UnixMilli()},
		{base.Add(time.Nanosecond), base.UnixMilli() + 1},
		{base.Add(999_999), base.UnixMilli() + 1},
		{base.Add(time.Millisecond), base.UnixMilli() + 1},
		{base.Add(time.Millisecond + 1), base.UnixMilli() + 2},
		{time.Unix(0, -1), 0},
		{time.Unix(0, -1_000_001), -1},
		{time.Unix(-1, 0), -1000},
	} {
		if got := ceilMs(tc.at); got != tc.want {
			t.Errorf("ceilMs(%v) = %d, want %d", tc.at.UnixNano(), got, tc.want)
		}
		if ms := time.UnixMilli(ceilMs(tc.at)); ms.Before(tc.at) || ms.Sub(tc.at) >= time.Millisecond {
			t.Errorf("ceilMs(%v) = %v: want at or after it, by less than 1ms", tc.at.UnixNano(), ms.UnixNano())
		}
	}
}
