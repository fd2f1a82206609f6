package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// BenchmarkCancelDueHook compares the timeout cancel of the service mode
// (Open, no hook) with the embedded mode (FromPool on the shop's pool,
// without a hook, and with an OnCancelled hook that moves the shop's own
// row with its guarded UPDATE, docs/embedding.md), all in batches of 200
// by id, on orders of the same shape (two items, one of 50 SKUs and one shared), created outside the
// timer. It reports orders/s; it asserts only that every order is cancelled
// (and, with the hook, that every shop row followed).
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench CancelDueHook -benchtime 4000x -count 3 ./store/postgres/
func BenchmarkCancelDueHook(b *testing.B) {
	b.Run("service/batch=200", func(b *testing.B) { benchCancelDueHook(b, false, hookNone) })
	b.Run("embedded/batch=200", func(b *testing.B) { benchCancelDueHook(b, true, hookNone) })
	b.Run("embedded-hook/batch=200", func(b *testing.B) { benchCancelDueHook(b, true, hookEach) })
	b.Run("embedded-hook-many/batch=200", func(b *testing.B) { benchCancelDueHook(b, true, hookMany) })
}

// The shop's cancel hook in a benchmark: none, OnCancelled (a statement per
// order) or OnCancelledMany (one per batch).
const (
	hookNone = iota
	hookEach
	hookMany
)

// benchCancelDueHook cancels b.N orders on a store of Open, or of FromPool
// (embedded) with or without the shop's hook.
func benchCancelDueHook(b *testing.B, embedded bool, hook int) {
	const batch, skus = 200, 50
	ctx := context.Background()
	u := newSchema(b)
	var s *postgres.Store
	var pool *pgxpool.Pool
	if embedded {
		var err error
		if pool, err = pgxpool.New(ctx, u); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		var hooks postgres.Hooks
		switch hook {
		case hookEach:
			hooks.OnCancelled = func(ctx context.Context, tx pgx.Tx, o order.Order) error {
				_, err := tx.Exec(ctx, "UPDATE orders_of_the_shop SET status = 'cancelled' WHERE id = $1 AND status = 'pending'", o.ID)
				return err
			}
		case hookMany:
			hooks.OnCancelledMany = func(ctx context.Context, tx pgx.Tx, os []order.Order) error {
				ids := make([]string, len(os))
				for i, o := range os {
					ids[i] = o.ID
				}
				_, err := tx.Exec(ctx, "UPDATE orders_of_the_shop SET status = 'cancelled' WHERE id = ANY($1) AND status = 'pending'", ids)
				return err
			}
		}
		s, err = postgres.FromPool(pool, postgres.Config{Hooks: hooks})
		if err != nil {
			b.Fatal(err)
		}
	} else {
		s = openURL(b, u, nil)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	n := b.N
	for i := range skus {
		storetest.Stock(b, s, int64(2*n), fmt.Sprintf("sku-%02d", i))
	}
	storetest.Stock(b, s, int64(2*n), "shared")
	ids := make([]string, n)
	var wg sync.WaitGroup
	const creators = 8
	for w := range creators {
		wg.Go(func() {
			for i := w; i < n; i += creators {
				ids[i] = fmt.Sprintf("bench-%07d", i)
				_, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: ids[i], AmountCents: 100, Currency: "EUR",
					Items: []order.Item{{SKU: fmt.Sprintf("sku-%02d", i%skus), Qty: 1}, {SKU: "shared", Qty: 1}}})
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
	conn := connect(b, u)
	if hook != hookNone {
		if _, err := conn.Exec(ctx, "CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO orders_of_the_shop SELECT 'bench-' || lpad(i::text, 7, '0'), 'pending' FROM generate_series(0, $1::int - 1) i", n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil { // as autovacuum would have by now
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	done := 0
	for lo := 0; lo < n; lo += batch {
		res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids[lo:min(lo+batch, n)]})
		if err != nil {
			b.Fatal(err)
		}
		done += len(res.Cancelled)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("cancelled %d of %d", done, n)
	}
	if hook != hookNone {
		var moved int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders_of_the_shop WHERE status = 'cancelled'").Scan(&moved); err != nil {
			b.Fatal(err)
		}
		if moved != n {
			b.Fatalf("%d of %d shop rows cancelled by the hook", moved, n)
		}
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "orders/s")
}
