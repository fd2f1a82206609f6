package rabbitmq_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/outbox/sinktest"
)

// BenchmarkPublish compares the broker's raw publish rate (RawPublishRate:
// a plain amqp091 publisher with confirms) with the sink's, for messages of
// the same size published in batches of the same size (RawBatch) to one
// exchange with a durable queue bound with #. Each reports msgs/s:
//
//	go test -run '^$' -bench Publish -benchtime 20000x ./outbox/rabbitmq/
func BenchmarkPublish(b *testing.B) {
	admin := rabbittest.Admin(b)
	exchange := rabbittest.Name("bench")
	rabbittest.DeleteExchangeAtEnd(b, admin, exchange)
	sinkURL := withExchange(rabbittest.URL(b), exchange)
	ctx := context.Background()
	sink, err := rabbitmq.New(ctx, sinkURL, outbox.FormatJSON, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sink.Close() })
	ch := rabbittest.Channel(b, admin)
	q := rabbittest.Name("bench")
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if ch, err := admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	})
	if err := ch.QueueBind(q, "#", exchange, false, nil); err != nil {
		b.Fatal(err)
	}
	body, _, _, err := outbox.FormatJSON.Binary(sinktest.Events("size", 1, order.EventCancelled)[0], rabbitmq.HeaderPrefix)
	if err != nil {
		b.Fatal(err)
	}
	size := len(body)

	b.Run("raw", func(b *testing.B) {
		rate, err := rabbitmq.RawPublishRate(ctx, sinkURL, b.N, size)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "msgs/s")
		b.ReportMetric(float64(size), "bytes/msg")
	})
	b.Run("sink", func(b *testing.B) {
		evs := sinktest.Events("bench", b.N, order.EventCancelled)
		start := time.Now()
		for lo := 0; lo < len(evs); lo += rabbitmq.RawBatch {
			batch := evs[lo:min(lo+rabbitmq.RawBatch, len(evs))]
			for i, err := range sink.Publish(ctx, batch) {
				if err != nil {
					b.Fatalf("event %s: %v", batch[i].ID, err)
				}
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		b.ReportMetric(float64(size), "bytes/msg")
	})
}
