package amqp_test

import (
	"context"
	"log"
	"time"

	"github.com/lapsehq/lapse/timer"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// A scheduler on RabbitMQ whose exchanges and queues are named shop.timers.*,
// on replicated quorum queues. lapse.Config{Scheduler: s} is how the service
// uses it; here a handler prints the due timers.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := amqptimer.Open(ctx, "amqp://lapse:secret@127.0.0.1:5672/shop?prefix=shop.timers&queue_type=quorum", amqptimer.Config{})
	if err != nil {
		log.Fatal(err) // among others: another base, levels or queue_type on an existing prefix
	}
	defer s.Close()
	if err := s.Schedule(ctx, "order-42", time.Now().Add(15*time.Minute)); err != nil {
		log.Fatal(err)
	}
	_ = s.Run(ctx, func(_ context.Context, due []timer.Timer) error {
		for _, t := range due {
			log.Printf("cancel %s (due %s, attempt %d)", t.Key, t.Due.Format(time.RFC3339Nano), t.Attempt)
		}
		return nil // acknowledged: never delivered again
	})
}
