package lapse_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
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
	r := newCheckoutRig(b)
	storetest.Stock(b, r.st, int64(b.N)+1, "tee")
	// the run's own prefix: b.N grows over the runs in one schema
	prefix := fmt.Sprintf("c%d-", time.Now().UnixNano())

	r.trips.reset()
	b.ResetTimer()
	for i := range b.N {
		if err := r.checkout(ctx, fmt.Sprintf("%s%08d", prefix, i), "tee", embedded); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(r.trips.trips.Load())/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(r.trips.statements.Load())/float64(b.N), "statements/op")
	b.ReportMetric(float64(r.trips.prepares.Load())/float64(b.N), "prepares/op")
}

// A checkout costs one round trip more than the shop's own: BEGIN, the
// shop's INSERT and COMMIT, and lapse's CreateOrderTx in one (its savepoint
// and its create in one pipeline), on the database's clock as in production.
// A create refused for want of stock costs one more, to undo itself, and
// the shop's transaction commits its own row all the same.
func TestCheckoutRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newCheckoutRig(t)
	storetest.Stock(t, r.st, 100, "tee")
	storetest.Stock(t, r.st, 0, "gone")
	trips := func(id, sku string, embedded bool) (int64, error) {
		r.trips.reset()
		err := r.checkout(ctx, id, sku, embedded)
		return r.trips.trips.Load(), err
	}
	for i := range 5 {
		if n, err := trips(fmt.Sprintf("shop-%d", i), "", false); err != nil || n != 3 {
			t.Fatalf("the shop's checkout alone: %d round trips (%v), want 3: BEGIN, INSERT, COMMIT", n, err)
		}
		if n, err := trips(fmt.Sprintf("lapse-%d", i), "tee", true); err != nil || n > 4 {
			t.Fatalf("a checkout with CreateOrderTx: %d round trips (%v), want at most 4: one more than the shop's", n, err)
		}
	}
	n, err := trips("refused", "gone", true)
	if !errors.Is(err, lapse.ErrInsufficientStock) || n > 5 {
		t.Fatalf("a checkout refused for want of stock: %d round trips (%v), want ErrInsufficientStock in at most 5", n, err)
	}
	var shop int
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM orders_of_the_shop WHERE id = 'refused'").Scan(&shop); err != nil || shop != 1 {
		t.Fatalf("the shop's row of the refused checkout: %d (%v), want it committed", shop, err)
	}
	if _, err := r.st.GetOrder(ctx, "refused"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused order: %v, want ErrNotFound", err)
	}
	storetest.AuditOK(t, r.st)
}

// checkoutRig is a shop on PostgreSQL: its pool, counted by a tracer, lapse
// on it (FromPool, migrated, the database's clock) and the shop's own table.
type checkoutRig struct {
	pool  *pgxpool.Pool
	st    *postgres.Store
	svc   *lapse.Service
	trips *tripCounter
}

func newCheckoutRig(tb testing.TB) *checkoutRig {
	tb.Helper()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testdb.PostgresSchema(tb))
	if err != nil {
		tb.Fatal(err)
	}
	r := &checkoutRig{trips: &tripCounter{}}
	pc.ConnConfig.Tracer = r.trips
	if r.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.pool.Close)
	if r.st, err = postgres.FromPool(r.pool, postgres.Config{}); err != nil {
		tb.Fatal(err)
	}
	if err := r.st.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := r.pool.Exec(ctx, "CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		tb.Fatal(err)
	}
	if r.svc, err = lapse.New(lapse.Config{Store: r.st, Logger: quiet}); err != nil {
		tb.Fatal(err)
	}
	return r
}

// checkout is one checkout of the shop's: its transaction, its row, with
// embedded lapse's order of one unit of sku in it, and its COMMIT — which
// commits the shop's row even when lapse refused the order (the error is
// then lapse's).
func (r *checkoutRig) checkout(ctx context.Context, id, sku string, embedded bool) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after the commit, a no-op
	if _, err := tx.Exec(ctx, "INSERT INTO orders_of_the_shop (id, status) VALUES ($1, 'pending')", id); err != nil {
		return err
	}
	var lapseErr error
	if embedded {
		_, lapseErr = r.svc.CreateOrderTx(ctx, r.st.InTx(tx), lapse.CreateOrderRequest{ID: id,
			Items: []order.Item{{SKU: sku, Qty: 1}}, AmountCents: 1299, Timeout: 15 * time.Minute})
	}
	if err := tx.Commit(ctx); err != nil {
		return errors.Join(lapseErr, err)
	}
	return lapseErr
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
