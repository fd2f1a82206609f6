package kafka_test

import (
	"context"
	"log"
	"time"

	"github.com/lapsehq/lapse/timer"
	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
)

// A scheduler on a three-broker Kafka whose topics are named shop.delay.*
// and shop.due, replicated three times, with doubling levels (fewer forwards
// per timer than the default ×10 ones). lapse.Config{Scheduler: s} is how
// the service uses it; here a handler prints the due timers.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kafkatimer.Open(ctx, "kafka://k1:9092,k2:9092,k3:9092/shop?replication=3&partitions=12&levels=1s,2s,4s,8s,16s,32s,64s,128s,256s,512s,1024s", kafkatimer.Config{})
	if err != nil {
		log.Fatal(err) // among others: brokers that do not answer within ctx
	}
	defer s.Close()
	if err := s.Schedule(ctx, "order-42", time.Now().Add(15*time.Minute)); err != nil {
		log.Fatal(err)
	}
	_ = s.Run(ctx, func(_ context.Context, due []timer.Timer) error {
		for _, t := range due {
			log.Printf("cancel %s (due %s, attempt %d)", t.Key, t.Due.Format(time.RFC3339Nano), t.Attempt)
		}
		return nil // acknowledged: committed, never delivered again
	})
}
