package main

import (
	"strings"
	"testing"
)

// Every Redis URL the redis timers parse is a --timers value lapse serve
// takes (a unix socket and a TLS Cluster were refused as unsupported), and
// a scheme no backend knows is refused naming the ones that are.
func TestTimersTakeEveryRedisScheme(t *testing.T) {
	for _, spec := range []string{
		"redis://127.0.0.1:6379/0",
		"rediss://127.0.0.1:6380/0",
		"unix:///run/redis/redis.sock?db=2",
		"redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
		"rediss-cluster://127.0.0.1:7000,127.0.0.1:7001",
		"redis-sentinel://127.0.0.1:26379/0?master=shop",
		"rediss-sentinel://127.0.0.1:26379/0?master=shop",
	} {
		if err := checkTimers(spec); err != nil {
			t.Errorf("--timers %s: %v", spec, err)
		}
	}
	if err := checkTimers("memcached://127.0.0.1:11211"); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("--timers memcached://…: %v, want unsupported", err)
	}
}
