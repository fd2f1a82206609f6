package ordersvc_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/ordersvc"
)

// BenchmarkAMQPSend measures Send round trips through the real broker —
// signed, published confirmed, verified and applied by the reference
// receiver, answered — with 1 and 64 Sends in flight. It reports p50 and
// p99 latency beside ns/op, which at concurrency 64 is the inverse of the
// throughput.
//
//	go test -run '^$' -bench AMQPSend -benchtime 3s ./ordersvc/
func BenchmarkAMQPSend(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			shop := newMemShop()
			prefix := amqpPrefix(b)
			url := rabbittest.URL(b)
			opts := []ordersvc.AMQPOption{ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld), ordersvc.AMQPPrefetch(64)}
			startReceiver(b, url, shop, opts...)
			c := dialClient(b, url, opts...)
			ds := make([]ordersvc.Delivery, b.N)
			for i := range ds {
				ds[i] = amqpDelivery(fmt.Sprintf("bench-%d", i))
				shop.add(ds[i].Command.OrderID, "pending")
			}
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
						if _, err := c.Send(context.Background(), ds[i]); err != nil {
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
