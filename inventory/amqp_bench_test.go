package inventory_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
)

// BenchmarkAMQPSend measures Send round trips (publish confirmed, applied
// by an in-memory ledger, answer back) through the real broker, with 1 and
// 64 Sends in flight. It reports p50 and p99 latency beside ns/op, which at
// concurrency 64 is the inverse of the throughput.
//
//	go test -run '^$' -bench AMQPSend -benchtime 3s ./inventory/
func BenchmarkAMQPSend(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			c := startAMQP(b, newMemLedger(), "", "", inventory.AMQPPrefetch(64)).client
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range conc {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						start := time.Now()
						if _, err := c.Send(context.Background(), amqpCommand(inventory.Release, fmt.Sprintf("r%d", i))); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(start)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
	}
}
