package mysql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// BenchmarkCancelDue measures the timeout cancel: one CancelDue transaction
// per op, each cancelling a batch of due orders of two items (stock released,
// ledger rows and events written). Orders are created before the timer
// starts; orders/s is the figure to compare with BENCHMARKS.md.
//
//	LAPSE_TEST_MYSQL=mysql://root@127.0.0.1:3306/test go test -run '^$' -bench CancelDue ./store/mysql/
func BenchmarkCancelDue(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch int
		claim bool
	}{
		{"batch=1", 1, false},
		{"batch=50", 50, false},
		{"batch=200", 200, false},
		{"claim=200", 200, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			s, _ := open(b, clk)
			ctx := context.Background()
			const skus = 20
			for i := range skus {
				if _, err := s.SetStock(ctx, fmt.Sprintf("sku-%02d", i), 1<<40); err != nil {
					b.Fatal(err)
				}
			}
			ids := createOrders(b, s, b.N*c.batch, skus)
			clk.Advance(time.Hour) // every order is due
			b.ResetTimer()
			for i := range b.N {
				p := store.CancelDueParams{Claim: c.batch}
				if !c.claim {
					p = store.CancelDueParams{IDs: ids[i*c.batch : (i+1)*c.batch]}
				}
				res, err := s.CancelDue(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Cancelled) != c.batch {
					b.Fatalf("cancelled %d of %d", len(res.Cancelled), c.batch)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "orders/s")
		})
	}
}

// createOrders places n orders of two SKUs each, due in 11 minutes, from a
// few goroutines, and returns their ids.
func createOrders(b *testing.B, s store.Store, n, skus int) []string {
	b.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%08d", i)
	}
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				_, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
					ID: ids[i], AmountCents: 100, Currency: "EUR", Timeout: 10 * time.Minute, Grace: time.Minute,
					Items: []order.Item{{SKU: fmt.Sprintf("sku-%02d", i%skus), Qty: 1}, {SKU: fmt.Sprintf("sku-%02d", (i+1)%skus), Qty: 2}},
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return ids
}
