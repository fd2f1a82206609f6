package nats

import (
	"context"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RawType is the event type of RawPublishRate's messages: they go to
// <prefix>.lapse.bench.raw, for consumers of a stream shared with a
// benchmark to skip them.
const RawType = "lapse.bench.raw"

// RawBatch is how many messages RawPublishRate publishes before it waits
// for their PubAcks: the outbox relay's default batch size, so that the raw
// rate and the sink's are measured alike.
const RawBatch = 500

// RawPublishRate measures the server's own JetStream publish rate, the
// yardstick of the sink's in a benchmark report: how many messages a second
// a plain jetstream publisher gets PubAcks for, with what the sink sends
// and nothing else — n messages of size bytes, each with a Nats-Msg-Id of
// its own, on <prefix>.RawType of rawURL (a --sink URL), published
// asynchronously in batches of RawBatch, each batch published in full and
// then waited for. The stream must exist (a sink's New creates it).
// Connecting is not timed.
//
// The messages are stored in the stream: point it at a benchmark's prefix,
// not one that consumers read in production.
func RawPublishRate(ctx context.Context, rawURL string, n, size int) (float64, error) {
	if n < 1 || size < 0 {
		return 0, fmt.Errorf("nats raw publish rate: %d messages of %d bytes: want at least 1 message, 0 bytes or more", n, size)
	}
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (float64, error) {
		return 0, fmt.Errorf("nats raw publish rate on %s: %w", cfg.name(), err)
	}
	urls := ""
	for i, h := range cfg.Servers {
		if i > 0 {
			urls += ","
		}
		urls += "nats://" + h
	}
	opts := []natsgo.Option{natsgo.Name("lapse raw publish rate")}
	switch {
	case cfg.Token != "":
		opts = append(opts, natsgo.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, natsgo.UserInfo(cfg.User, cfg.Password))
	}
	nc, err := natsgo.Connect(urls, opts...)
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	subject := cfg.prefix() + "." + RawType
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	futures := make([]jetstream.PubAckFuture, 0, RawBatch)
	start := time.Now()
	for sent := 0; sent < n; {
		futures = futures[:0]
		for ; sent < n && len(futures) < RawBatch; sent++ {
			m := natsgo.NewMsg(subject)
			m.Data = body
			m.Header.Set("Content-Type", "application/json")
			m.Header.Set(jetstream.MsgIDHeader, "raw-"+run+"-"+strconv.Itoa(sent))
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				return fail(err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fail(err)
			case <-ctx.Done():
				return fail(ctx.Err())
			}
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
