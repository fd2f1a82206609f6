package redis_test

import (
	"context"
	"log"
	"time"

	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/redis"
)

// A scheduler on a Redis Cluster (or redis://host:6379/0 for a standalone
// Redis). lapse.Config{Scheduler: s} is how the service uses it; here a
// handler prints the due timers.
func Example() {
	rdb, err := redis.ParseURL("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	s, err := redis.New(rdb, redis.Config{Prefix: "shop"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Schedule(ctx, "order-42", time.Now().Add(time.Second)); err != nil {
		log.Fatal(err)
	}
	_ = s.Run(ctx, func(_ context.Context, due []timer.Timer) error {
		for _, t := range due {
			log.Printf("cancel %s (due %s, attempt %d)", t.Key, t.Due.Format(time.RFC3339Nano), t.Attempt)
		}
		return nil // acknowledged: never delivered again
	})
}
