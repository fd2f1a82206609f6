package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	lnats "github.com/lapsehq/lapse/outbox/nats"
)

// BenchmarkPublish compares, in one run and against the same server, the
// rate of a plain JetStream publisher waiting for PubAcks with the sink's,
// for the same messages: a lapse event of about 200 bytes on
// <prefix>.order.cancelled with its Nats-Msg-Id and Content-Type headers,
// into a file-storage stream with a two-minute duplicate window (what the
// sink creates).
//
//   - raw: every message published asynchronously at once, then all
//     PubAcks awaited (the server's pipelined ceiling);
//   - raw-batch500: RawPublishRate, messages of the same size in batches
//     of 500, each batch's PubAcks awaited (what a relay with a 500-event
//     batch can reach at best);
//   - sink-batch500: the same batches through Sink.Publish.
//
// Each sub-benchmark has a stream of its own, deleted at its end.
//
//	go test -run '^$' -bench Publish -benchtime 20000x ./outbox/nats/
func BenchmarkPublish(b *testing.B) {
	js := admin(b)
	ctx := context.Background()

	b.Run("raw", func(b *testing.B) {
		prefix := benchStream(b, js)
		b.ResetTimer()
		for i := range b.N {
			if _, err := js.PublishMsgAsync(rawMsg(prefix, benchEvent(i)), jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("PubAcks not all in after a minute")
		}
		reportRate(b)
		checkStored(b, js, prefix)
	})

	b.Run("raw-batch500", func(b *testing.B) {
		prefix := benchStream(b, js)
		body, _, _, _ := outbox.FormatJSON.Binary(benchEvent(0), "")
		rate, err := lnats.RawPublishRate(ctx, "nats://"+serverAddr(b)+"/"+prefix, b.N, len(body))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "events/s")
		checkStored(b, js, prefix)
	})

	b.Run("sink-batch500", func(b *testing.B) {
		prefix := benchStream(b, js)
		s := newSink(b, lnats.Config{Prefix: prefix})
		evs := make([]order.Event, 0, 500)
		b.ResetTimer()
		for done := 0; done < b.N; {
			evs = evs[:0]
			for i := done; i < min(done+500, b.N); i++ {
				evs = append(evs, benchEvent(i))
			}
			for _, err := range s.Publish(ctx, evs) {
				if err != nil {
					b.Fatal(err)
				}
			}
			done += len(evs)
		}
		reportRate(b)
		checkStored(b, js, prefix)
	})
}

// benchStream creates the stream the sink would for a new prefix.
func benchStream(b *testing.B, js jetstream.JetStream) string {
	prefix := newPrefix(b, js)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: lnats.StreamName(prefix), Subjects: []string{prefix + ".>"},
		Storage: jetstream.FileStorage, Duplicates: lnats.DefaultDedupeWindow,
	}); err != nil {
		b.Fatal(err)
	}
	return prefix
}

// checkStored fails b unless the stream holds b.N messages: every PubAck
// was a new message, none deduplicated away.
func checkStored(b *testing.B, js jetstream.JetStream, prefix string) {
	b.StopTimer()
	if n := streamInfo(b, js, lnats.StreamName(prefix)).State.Msgs; n != uint64(b.N) {
		b.Fatalf("the stream holds %d messages after %d publishes", n, b.N)
	}
}

// benchEvent is the i-th event of a run, of order i, payload like lapse's.
func benchEvent(i int) order.Event {
	id := fmt.Sprintf("ord_%012d", i)
	return order.Event{
		ID: fmt.Sprintf("0198c0de-0000-7000-8000-%012d", i), Type: order.EventCancelled, OrderID: id,
		Payload:   []byte(`{"schema_version":1,"id":"` + id + `","status":"CANCELLED","reason":"payment_timeout"}`),
		CreatedAt: time.Now().UTC(),
	}
}

// rawMsg is what the sink publishes for e in FormatJSON, built by hand.
func rawMsg(prefix string, e order.Event) *natsgo.Msg {
	body, contentType, _, _ := outbox.FormatJSON.Binary(e, "")
	m := natsgo.NewMsg(prefix + "." + e.Type)
	m.Data = body
	m.Header.Set("Content-Type", contentType)
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	return m
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
