package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
)

// BenchmarkPublish compares, in one run and on one kfake cluster (three
// brokers, ten partitions, in this process), the rate of a plain franz-go
// producer with the sink's own settings (acks=all, idempotent) against the
// sink's, for the same records: a lapse event of about 200 bytes keyed by
// its order id.
//
//   - raw: every record produced at once, then one flush (the broker's
//     pipelined ceiling);
//   - raw-batch500: RawPublishRate, records of the same size in batches
//     of 500, each waited for (what a relay with a 500-event batch can
//     reach at best);
//   - sink-batch500: the same batches through Sink.Publish.
//
// kfake is not Kafka: these figures compare the sink with the client on the
// same fake broker, not with a real cluster.
//
//	go test -run '^$' -bench Publish -benchtime 20000x ./outbox/kafka/
func BenchmarkPublish(b *testing.B) {
	c := newCluster(b, 10)
	evs := benchEvents(500)
	ctx := context.Background()

	b.Run("raw", func(b *testing.B) {
		cl := rawProducer(b, c)
		b.ResetTimer()
		errs := make(chan error, 1)
		for i := range b.N {
			cl.Produce(ctx, rawRecord(evs[i%len(evs)]), func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		reportRate(b)
	})

	b.Run("raw-batch500", func(b *testing.B) {
		body, _, _, _ := outbox.FormatJSON.Binary(evs[0], "")
		rate, err := kafka.RawPublishRate(ctx, "kafka://"+strings.Join(c.ListenAddrs(), ",")+"/"+topic, b.N, len(body))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "events/s")
	})

	b.Run("sink-batch500", func(b *testing.B) {
		s := newSink(b, c, outbox.FormatJSON, 0)
		b.ResetTimer()
		for done := 0; done < b.N; {
			n := min(len(evs), b.N-done)
			for _, err := range s.Publish(ctx, evs[:n]) {
				if err != nil {
					b.Fatal(err)
				}
			}
			done += n
		}
		reportRate(b)
	})
}

func rawProducer(b *testing.B, c interface{ ListenAddrs() []string }) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// rawRecord is what the sink writes for e in FormatJSON, built by hand.
func rawRecord(e order.Event) *kgo.Record {
	body, contentType, _, _ := outbox.FormatJSON.Binary(e, "")
	return &kgo.Record{Key: []byte(e.OrderID), Value: body, Headers: []kgo.RecordHeader{
		{Key: "id", Value: []byte(e.ID)}, {Key: "type", Value: []byte(e.Type)}, {Key: "content-type", Value: []byte(contentType)},
	}}
}

// benchEvents are n events of n orders, payloads like lapse's.
func benchEvents(n int) []order.Event {
	evs := make([]order.Event, n)
	for i := range evs {
		id := fmt.Sprintf("ord_%012d", i)
		evs[i] = order.Event{
			ID: fmt.Sprintf("0198c0de-0000-7000-8000-%012d", i), Type: order.EventCancelled, OrderID: id,
			Payload:   []byte(`{"schema_version":1,"id":"` + id + `","status":"CANCELLED","reason":"payment_timeout"}`),
			CreatedAt: time.Now().UTC(),
		}
	}
	return evs
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
