package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
	"github.com/lapsehq/lapse/timer/redis"
)

// The service on Redis timers: orders created under load, Redis loses every
// key of the deployment mid-way, and every order is still cancelled within a
// few seconds of its deadline, never before, with the fallback sweep off so
// that the reseed is what saves them.
func TestServiceCancelsEveryOrderAcrossADataLoss(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx := context.Background()
		st := servicetest.SQLite(t)
		const n = 100
		storetest.Stock(t, st, n, "sku")
		prefix := newPrefix(t, rdb)
		logs := &logBuffer{}
		logger := slog.New(slog.NewTextHandler(logs, nil))
		timers := mustNew(t, rdb, redis.Config{Prefix: prefix, Lease: 2 * time.Second, LossCheck: 200 * time.Millisecond, Logger: logger})
		svc, err := lapse.New(lapse.Config{Store: st, Scheduler: timers, SweepInterval: -1, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		servicetest.Run(t, svc)

		// n orders from 4 clients, with deadlines spread over two seconds
		// from base; SQLite under the race detector creates a few dozen
		// orders a second, so base leaves time to create them first.
		start := time.Now()
		base := start.Add(2500 * time.Millisecond)
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() {
				for i := c; i < n; i += 4 {
					deadline := base.Add(time.Duration(i) * 2 * time.Second / n)
					_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
						ID: fmt.Sprintf("o-%04d", i), Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100,
						Timeout: max(time.Until(deadline), time.Millisecond),
					})
					if err != nil {
						t.Errorf("create o-%04d: %v", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		t.Logf("created %d orders in %v", n, time.Since(start).Round(time.Millisecond))
		time.Sleep(time.Until(base.Add(time.Second)))
		purge(t, rdb, prefix) // what a FLUSHALL does to the deployment
		lost := time.Now()

		waitFor(t, "every order cancelled", 10*time.Second, func() bool {
			rep, err := svc.List(ctx, store.ListOrdersParams{Status: order.Pending, Limit: 1})
			return err == nil && len(rep.Orders) == 0
		})
		var maxLate time.Duration
		for i := range n {
			o, err := svc.Get(ctx, fmt.Sprintf("o-%04d", i))
			if err != nil {
				t.Fatal(err)
			}
			if o.Status != order.Cancelled {
				t.Errorf("%s: %s", o.ID, o.Status)
				continue
			}
			if o.CancelledAt.Before(o.CancelAfter) {
				t.Errorf("%s: cancelled %v before cancel_after", o.ID, o.CancelAfter.Sub(o.CancelledAt))
			}
			late := o.CancelledAt.Sub(o.CancelAfter)
			if o.CreatedAt.After(o.CancelAfter) {
				late = o.CancelledAt.Sub(o.CreatedAt)
			}
			maxLate = max(maxLate, late)
			if late > 3*time.Second {
				t.Errorf("%s: cancelled %v after cancel_after (due %v after the loss)", o.ID, late, o.CancelAfter.Sub(lost).Round(time.Millisecond))
			}
		}
		t.Logf("%d orders due over 2s, Redis data lost 1s in: latest cancel %v after its deadline", n, maxLate.Round(time.Millisecond))
		if logs.count("seed markers missing") < 2 {
			t.Errorf("the loss was not logged:\n%s", logs.b.String())
		}
		storetest.AuditOK(t, st)
	})
}
