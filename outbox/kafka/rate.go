package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RawType is the "type" header of RawPublishRate's records, for consumers
// of a topic shared with a benchmark to skip them.
const RawType = "lapse.bench.raw"

// RawBatch is how many records RawPublishRate produces before it waits for
// their acknowledgements: the outbox relay's default batch size, so that
// the raw rate and the sink's are measured alike.
const RawBatch = 500

// RawPublishRate measures the cluster's own produce rate, the yardstick of
// the sink's in a benchmark report: how many records a second a plain
// franz-go producer gets acknowledged with the sink's settings (acks=all,
// idempotent, no linger) and nothing else — n records of size bytes, keyed
// over n keys like events over orders, to the topic of rawURL (a --sink
// URL), in batches of RawBatch, each batch produced in full and then waited
// for. The values are random letters, which compress about as well as
// JSON. Connecting is not timed.
//
// The records land in the topic, with the header type=RawType: point it at
// a benchmark's topic, not one that consumers read in production.
func RawPublishRate(ctx context.Context, rawURL string, n, size int) (float64, error) {
	if n < 1 || size < 0 {
		return 0, fmt.Errorf("kafka raw publish rate: %d records of %d bytes: want at least 1 record, 0 bytes or more", n, size)
	}
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return 0, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
	}
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	if cfg.SASL != nil {
		opts = append(opts, kgo.SASL(cfg.SASL))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("kafka raw publish rate on %s: %w", cfg.name(), err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return 0, fmt.Errorf("kafka raw publish rate on %s: %w", cfg.name(), err)
	}
	// Random letters, a different value for each record of a batch: the
	// producer compresses batches (snappy by default), and repeated bytes
	// would shrink to nothing and flatter the rate.
	values := make([]byte, size*RawBatch)
	for i := range values {
		values[i] = 'a' + byte(rand.IntN(26))
	}
	headers := []kgo.RecordHeader{{Key: "type", Value: []byte(RawType)}}
	recs := make([]*kgo.Record, 0, RawBatch)
	start := time.Now()
	for sent := 0; sent < n; {
		recs = recs[:0]
		for ; sent < n && len(recs) < RawBatch; sent++ {
			j := len(recs) * size
			recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(sent)), Value: values[j : j+size], Headers: headers})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return 0, fmt.Errorf("kafka raw publish rate on %s: %w", cfg.name(), err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
