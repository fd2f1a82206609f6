package nats_test

import (
	"context"
	"log"
	"time"

	"github.com/lapsehq/lapse/timer"
	natstimer "github.com/lapsehq/lapse/timer/nats"
)

// A scheduler on a nats-server 2.12 or later with JetStream, its timers in
// the stream shop_timers on subjects under "shop.". lapse.Config{Scheduler: s}
// is how the service uses it; here a handler prints the due timers.
func Example() {
	s, err := natstimer.Open("nats://127.0.0.1:4222?prefix=shop", natstimer.Config{})
	if err != nil {
		log.Fatal(err) // among others: a server older than natstimer.MinServerVersion
	}
	defer s.Close()
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
