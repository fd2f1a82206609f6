package lapse_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// BenchmarkCheckout measures a shop's checkout on PostgreSQL, one at a
// time on the shop's own pool: shop is its transaction alone (BEGIN, the
// INSERT of its order row, COMMIT); embedded adds lapse's CreateOrderTx in
// it (docs/embedding.md). A tracer on the pool counts what crossed the wire
// per checkout: round-trips/op (a statement alone or a batch is one),
// statements/op, and prepares/op (pgx's Parse/Describe of a statement the
// first time a connection runs it: it tends to 0 as b.N grows). The service
// is not running: nothing but the checkouts uses the pool.
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench Checkout -benchtime 2000x -count 3 .
func BenchmarkCheckout(b *testing.B) {
	b.Run("shop", func(b *testing.B) { benchCheckout(b, false) })
	b.Run("embedded", func(b *testing.B) { benchCheckout(b, true) })
}

func benchCheckout(b *testing.B, embedded bool) {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testdb.PostgresSchema(b))
	if err != nil {
		b.Fatal(err)
	}
	tr := &tripCounter{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	st, err := postgres.FromPool(pool, postgres.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	storetest.Stock(b, st, int64(b.N)+1, "tee")
	svc, err := lapse.New(lapse.Config{Store: st, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	items := []order.Item{{SKU: "tee", Qty: 1}}
	// the run's own prefix: b.N grows over the runs in one schema
	prefix := fmt.Sprintf("c%d-", time.Now().UnixNano())

	tr.reset()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("%s%08d", prefix, i)
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders_of_the_shop (id, status) VALUES ($1, 'pending')", id); err != nil {
			b.Fatal(err)
		}
		if embedded {
			if _, err := svc.CreateOrderTx(ctx, st.InTx(tx), lapse.CreateOrderRequest{ID: id, Items: items, AmountCents: 1299,
				Timeout: 15 * time.Minute}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tr.trips.Load())/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(tr.statements.Load())/float64(b.N), "statements/op")
	b.ReportMetric(float64(tr.prepares.Load())/float64(b.N), "prepares/op")
}

// tripCounter counts, as store/postgres's statementCounter does, the
// statements and round trips on a pool, and the prepares pgx makes.
type tripCounter struct{ trips, statements, prepares atomic.Int64 }

func (c *tripCounter) reset() { c.trips.Store(0); c.statements.Store(0); c.prepares.Store(0) }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	c.statements.Add(1)
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *tripCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (c *tripCounter) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		c.prepares.Add(1)
	}
}
