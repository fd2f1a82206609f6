package lapse_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// BenchmarkCheckoutParallel is BenchmarkCheckout with 16 checkouts at once
// on a pool of 10 connections (each a transaction of its own: the shop's
// INSERT, then lapse's CreateOrderTx for embedded), SKUs spread over 1,000:
// it reports checkouts/s. embedded-no-notify disables the NOTIFY a create
// sends at commit (postgres.Config.DisableDueNotify): PostgreSQL commits the
// transactions that notify one at a time, so the difference is the price of
// telling the other instances.
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench CheckoutParallel -benchtime 5000x .
func BenchmarkCheckoutParallel(b *testing.B) {
	b.Run("shop", func(b *testing.B) { benchCheckoutParallel(b, false, false) })
	b.Run("embedded", func(b *testing.B) { benchCheckoutParallel(b, true, false) })
	b.Run("embedded-no-notify", func(b *testing.B) { benchCheckoutParallel(b, true, true) })
}

func benchCheckoutParallel(b *testing.B, embedded, noNotify bool) {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testdb.PostgresSchema(b))
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	st, err := postgres.FromPool(pool, postgres.Config{DisableDueNotify: noNotify})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	const skus = 1000
	for i := range skus {
		storetest.Stock(b, st, int64(b.N)+1, fmt.Sprintf("sku-%04d", i))
	}
	svc, err := lapse.New(lapse.Config{Store: st, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("p%d-", time.Now().UnixNano())
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			id := fmt.Sprintf("%s%08d", prefix, i)
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := tx.Exec(ctx, "INSERT INTO orders_of_the_shop (id, status) VALUES ($1, 'pending')", id); err != nil {
				b.Error(err)
				_ = tx.Rollback(ctx)
				return
			}
			if embedded {
				if _, err := svc.CreateOrderTx(ctx, st.InTx(tx), lapse.CreateOrderRequest{ID: id,
					Items: []order.Item{{SKU: fmt.Sprintf("sku-%04d", i%skus), Qty: 1}}, AmountCents: 1299, Timeout: 15 * time.Minute}); err != nil {
					b.Error(err)
					_ = tx.Rollback(ctx)
					return
				}
			}
			if err := tx.Commit(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checkouts/s")
}
