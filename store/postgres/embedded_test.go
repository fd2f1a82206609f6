package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// embedded returns a migrated store on a caller's pool in a new schema, and
// that pool.
func embedded(t *testing.T, clk clock.Clock) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	u := newSchema(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.FromPool(pool, postgres.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

// callerBegin begins the caller's transactions on pool at iso.
func callerBegin(s *postgres.Store, pool *pgxpool.Pool, iso pgx.TxIsoLevel) storetest.Begin {
	return func(ctx context.Context) (store.Tx, func(context.Context) error, func(context.Context), error) {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			return nil, nil, nil, err
		}
		commit := func(ctx context.Context) error {
			err := tx.Commit(ctx)
			if err != nil && postgres.IsSerializationFailure(err) {
				return errors.Join(store.ErrRetryable, err) // a caller's commit may lose too
			}
			return err
		}
		return s.InTx(tx), commit, func(ctx context.Context) { _ = tx.Rollback(ctx) }, nil
	}
}

// The whole conformance suite with lapse on the caller's pool (FromPool)
// and every transition in a transaction of the caller's own (InTx), at
// READ COMMITTED and at REPEATABLE READ (where a lost conflict is
// store.ErrRetryable, run again by the caller, never a wrong state).
func TestConformanceEmbedded(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
				s, pool := embedded(t, clk)
				return storetest.InCallerTx(s, callerBegin(s, pool, iso))
			})
		})
	}
}

// A create in a caller's transaction that rolls back leaves nothing of
// lapse's: no order, no stock held, no event; one that commits is lapse's
// order, with the caller's own row in the same commit. Close leaves the
// caller's pool open.
func TestCreateOrderTxCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := embedded(t, clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	if _, err := pool.Exec(ctx, "CREATE TABLE shop_orders (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, s, 1, "tee")
	checkout := func(id string, commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO shop_orders (id, status) VALUES ($1, 'pending')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateOrderTx(ctx, s.InTx(tx), store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
			AmountCents: 100, Currency: "EUR", Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkout("rolled-back", false)
	if _, err := s.GetOrder(ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back create: %v, want ErrNotFound", err)
	}
	if sku, _ := s.GetSKU(ctx, "tee"); sku.Available != 1 || sku.Locked != 0 {
		t.Fatalf("after a rolled-back create: %+v, want nothing held", sku)
	}
	checkout("committed", true)
	if o, err := s.GetOrder(ctx, "committed"); err != nil || o.Status != order.Pending {
		t.Fatalf("a committed create: %+v %v", o, err)
	}
	var shop int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM shop_orders").Scan(&shop); err != nil || shop != 1 {
		t.Fatalf("shop rows %d %v, want the committed one", shop, err)
	}
	storetest.AuditOK(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool after Close: %v", err)
	}
}

// A transaction bound to one store is refused by another.
func TestInTxOfAnotherStoreIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, pool := embedded(t, clock.Real{})
	b, _ := embedded(t, clock.Real{})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := b.CancelOrderTx(ctx, a.InTx(tx), "x"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("another store's transaction: %v, want ErrInvalid", err)
	}
}
