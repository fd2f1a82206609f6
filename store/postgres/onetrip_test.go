package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// The whole conformance suite with every create alone (create_group=1): each
// is sent in one round trip in lapse's own transaction (core.CreateExecutor),
// where a refused or replayed create is undone by the rollback, not a
// savepoint.
func TestConformanceLoneCreates(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s := openURL(t, newSchema(t)+"&create_group=1", clk)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// shopTx begins a caller's transaction on pool with a row of the shop's own
// in it, as a checkout does before it calls CreateOrderTx.
func shopTx(t *testing.T, pool *pgxpool.Pool, shopID string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS shop_orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	shopInsert(t, tx, shopID)
	return tx
}

// shopInsert writes a row of the shop's: it fails if tx is not usable.
func shopInsert(t *testing.T, tx pgx.Tx, id string) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), "INSERT INTO shop_orders (id) VALUES ($1)", id); err != nil {
		t.Fatalf("the shop's insert of %s: %v", id, err)
	}
}

// count runs a count(*) query on the pool.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func createParams(id, key string, items ...order.Item) store.CreateOrderParams {
	return store.CreateOrderParams{ID: id, Items: items, AmountCents: 100, Currency: "EUR", Timeout: time.Minute,
		Grace: time.Second, IdempotencyKey: key, RequestHash: "h-" + key}
}

// withClocks runs fn on an embedded store on the database's clock (as in
// production: the create's statement reads it) and on a configured one.
func withClocks(t *testing.T, fn func(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, dbClock bool)) {
	for name, clk := range map[string]clock.Clock{"database clock": nil, "configured clock": clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC))} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := embedded(t, clk)
			fn(t, s, pool, clk == nil)
		})
	}
}

// A create refused for want of stock in a caller's transaction writes
// nothing — not the order, not the units of the SKUs that had them, not its
// idempotency key — and leaves the transaction usable: the shop's next
// statement and a second create in it commit.
func TestCreateOrderTxShortOfStockLeavesTheCallersTransactionUsable(t *testing.T) {
	t.Parallel()
	withClocks(t, func(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, dbClock bool) {
		ctx := context.Background()
		storetest.Stock(t, s, 5, "a")
		storetest.Stock(t, s, 0, "b")
		tx := shopTx(t, pool, "s1")
		_, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("o1", "k1", order.Item{SKU: "a", Qty: 1}, order.Item{SKU: "b", Qty: 1}))
		if !errors.Is(err, store.ErrInsufficientStock) || !strings.Contains(err.Error(), `"b"`) {
			t.Fatalf("short on b: %v, want ErrInsufficientStock naming b", err)
		}
		_, err = s.CreateOrderTx(ctx, s.InTx(tx), createParams("o2", "", order.Item{SKU: "a", Qty: 1}, order.Item{SKU: "nope", Qty: 1}))
		if !errors.Is(err, store.ErrInsufficientStock) || !strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("unknown sku: %v, want ErrInsufficientStock naming nope", err)
		}
		shopInsert(t, tx, "s2")
		if _, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("o3", "k3", order.Item{SKU: "a", Qty: 2})); err != nil {
			t.Fatalf("a create after the refusals, in the same transaction: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("the caller's commit: %v", err)
		}
		for _, id := range []string{"o1", "o2"} {
			if _, err := s.GetOrder(ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("refused %s: %v, want ErrNotFound", id, err)
			}
		}
		if o, err := s.GetOrder(ctx, "o3"); err != nil || o.Status != order.Pending {
			t.Fatalf("o3: %+v %v", o, err)
		}
		if a, _ := s.GetSKU(ctx, "a"); a.Available != 3 || a.Locked != 2 {
			t.Fatalf("a: %+v, want 3 available and o3's 2 locked", a)
		}
		if b, _ := s.GetSKU(ctx, "b"); b.Available != 0 || b.Locked != 0 {
			t.Fatalf("b: %+v, want untouched", b)
		}
		for sql, want := range map[string]int{
			"SELECT count(*) FROM shop_orders":                                      2,
			"SELECT count(*) FROM lapse_order_items":                                1,
			"SELECT count(*) FROM lapse_stock_ledger":                               1,
			"SELECT count(*) FROM lapse_outbox":                                     1,
			"SELECT count(*) FROM lapse_idempotency_keys WHERE key = 'k1'":          0,
			"SELECT count(*) FROM lapse_idempotency_keys WHERE order_id = 'o3'":     1,
			"SELECT count(*) FROM lapse_outbox WHERE order_id IN ('o1', 'o2')":      0,
			"SELECT count(*) FROM lapse_stock_ledger WHERE order_id IN ('o1','o2')": 0,
		} {
			if n := count(t, pool, sql); n != want {
				t.Errorf("%s = %d, want %d", sql, n, want)
			}
		}
		// The refused order's key was given back: its retry, with the
		// stock there now, creates it.
		storetest.Stock(t, s, 1, "b")
		tx = shopTx(t, pool, "s3")
		res, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("o1", "k1", order.Item{SKU: "a", Qty: 1}, order.Item{SKU: "b", Qty: 1}))
		if err != nil || res.Replayed {
			t.Fatalf("the retry of o1: %+v %v, want it created", res, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		storetest.AuditOK(t, s)
	})
}

// An order id that is taken is ErrOrderExists in a caller's transaction:
// nothing written (no key taken, no stock held), the transaction usable.
func TestCreateOrderTxOfATakenIDLeavesTheCallersTransactionUsable(t *testing.T) {
	t.Parallel()
	withClocks(t, func(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, dbClock bool) {
		ctx := context.Background()
		storetest.Stock(t, s, 5, "a")
		storetest.Create(t, s, "dup", "a")
		tx := shopTx(t, pool, "s1")
		for _, key := range []string{"", "k-new"} {
			_, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("dup", key, order.Item{SKU: "a", Qty: 2}))
			if !errors.Is(err, store.ErrOrderExists) {
				t.Fatalf("key %q: %v, want ErrOrderExists", key, err)
			}
		}
		shopInsert(t, tx, "s2")
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("the caller's commit: %v", err)
		}
		if a, _ := s.GetSKU(ctx, "a"); a.Available != 4 || a.Locked != 1 {
			t.Fatalf("a: %+v, want the first create's unit only", a)
		}
		if n := count(t, pool, "SELECT count(*) FROM lapse_idempotency_keys"); n != 0 {
			t.Errorf("%d keys taken, want none", n)
		}
		if n := count(t, pool, "SELECT count(*) FROM lapse_outbox"); n != 1 {
			t.Errorf("%d events, want the first create's", n)
		}
		if n := count(t, pool, "SELECT count(*) FROM shop_orders"); n != 2 {
			t.Errorf("%d shop rows, want 2", n)
		}
		storetest.AuditOK(t, s)
	})
}

// A create whose idempotency key an earlier request took replays that
// request's order (under another id too), or refuses another request with
// ErrIdempotencyMismatch, writing nothing either way; while the first
// request's transaction is open, the second waits for it.
func TestCreateOrderTxReplaysItsKey(t *testing.T) {
	t.Parallel()
	withClocks(t, func(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, dbClock bool) {
		ctx := context.Background()
		storetest.Stock(t, s, 10, "a")
		p := createParams("o1", "k", order.Item{SKU: "a", Qty: 3})
		first := shopTx(t, pool, "s1")
		created, err := s.CreateOrderTx(ctx, s.InTx(first), p)
		if err != nil || created.Replayed {
			t.Fatalf("first: %+v %v", created, err)
		}
		// A retry while the first transaction is open waits for it.
		type result struct {
			res store.CreateOrderResult
			err error
		}
		done := make(chan result, 1)
		retry := shopTx(t, pool, "s2")
		var retryPID uint32
		if err := retry.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&retryPID); err != nil {
			t.Fatal(err)
		}
		go func() {
			q := p
			q.ID = "o1-again" // a retry whose id was generated again
			res, err := s.CreateOrderTx(ctx, s.InTx(retry), q)
			done <- result{res, err}
		}()
		waitUntil(t, 30*time.Second, "the retry waits for the first's key", func() bool {
			return count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", retryPID) == 1
		})
		select {
		case r := <-done:
			t.Fatalf("the retry answered before the first committed: %+v %v", r.res, r.err)
		default:
		}
		if err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the retry still waits after the first committed")
		}
		if r.err != nil || !r.res.Replayed || r.res.Order.ID != "o1" || !r.res.Order.CreatedAt.Equal(created.Order.CreatedAt) ||
			!r.res.Order.ExpiresAt.Equal(created.Order.ExpiresAt) {
			t.Fatalf("the retry: %+v %v, want o1 replayed (%+v)", r.res, r.err, created.Order)
		}
		shopInsert(t, retry, "s2b")
		if err := retry.Commit(ctx); err != nil {
			t.Fatalf("the retry's commit: %v", err)
		}
		other := shopTx(t, pool, "s3")
		q := p
		q.RequestHash = "another request"
		if _, err := s.CreateOrderTx(ctx, s.InTx(other), q); !errors.Is(err, store.ErrIdempotencyMismatch) {
			t.Fatalf("another request under the key: %v, want ErrIdempotencyMismatch", err)
		}
		shopInsert(t, other, "s3b")
		if err := other.Commit(ctx); err != nil {
			t.Fatalf("the caller's commit after a mismatch: %v", err)
		}
		if a, _ := s.GetSKU(ctx, "a"); a.Available != 7 || a.Locked != 3 {
			t.Fatalf("a: %+v, want o1's 3 units held once", a)
		}
		for sql, want := range map[string]int{
			"SELECT count(*) FROM lapse_orders":       1,
			"SELECT count(*) FROM lapse_outbox":       1,
			"SELECT count(*) FROM lapse_stock_ledger": 1,
			"SELECT count(*) FROM shop_orders":        5,
		} {
			if n := count(t, pool, sql); n != want {
				t.Errorf("%s = %d, want %d", sql, n, want)
			}
		}
		storetest.AuditOK(t, s)
	})
}

// A shop's pool may run its statements in any of pgx's modes (a pool behind
// PgBouncer's transaction pooling runs without prepared statements): the
// create's pipeline, its parameters (an interval, arrays, a NULL clock) and
// its undo work in each.
func TestCreateOrderTxInEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pc, err := pgxpool.ParseConfig(newSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := postgres.FromPool(pool, postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			storetest.Stock(t, s, 1, "a")
			tx := shopTx(t, pool, "s1")
			res, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("o1", "k", order.Item{SKU: "a", Qty: 1}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateOrderTx(ctx, s.InTx(tx), createParams("o2", "", order.Item{SKU: "a", Qty: 1})); !errors.Is(err, store.ErrInsufficientStock) {
				t.Fatalf("o2: %v, want ErrInsufficientStock", err)
			}
			shopInsert(t, tx, "s2")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if o, err := s.GetOrder(ctx, "o1"); err != nil || !sameOrder(o, res.Order) {
				t.Fatalf("o1: %+v %v, want %+v", o, err, res.Order)
			}
			storetest.AuditOK(t, s)
		})
	}
}

// What a create sent in one round trip writes is what it answers: the order
// read back, its times on the one clock (the ledger's, the key's, the SKU's
// updated_at and the event's all the order's created_at), and its event's
// payload byte for byte the one createIn writes (core.EventPayload). On the
// database's clock, created_at is the database's now, to the millisecond.
func TestCreateOrderTxWritesWhatItAnswers(t *testing.T) {
	t.Parallel()
	withClocks(t, func(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, dbClock bool) {
		ctx := context.Background()
		storetest.Stock(t, s, 10, "a", "b")
		var before time.Time
		if err := pool.QueryRow(ctx, "SELECT date_trunc('milliseconds', clock_timestamp())").Scan(&before); err != nil {
			t.Fatal(err)
		}
		for _, p := range []store.CreateOrderParams{
			createParams("o1", "k1", order.Item{SKU: "b", Qty: 2}, order.Item{SKU: "a", Qty: 1}),
			func() store.CreateOrderParams {
				p := createParams(`remote "stock" é`, "", order.Item{SKU: "x", Qty: 3})
				p.ReservationID, p.Timeout, p.Grace = "res-1", 36*time.Hour+time.Millisecond, 0
				return p
			}(),
		} {
			tx := shopTx(t, pool, "s-"+p.ID)
			res, err := s.CreateOrderTx(ctx, s.InTx(tx), p)
			if err != nil {
				t.Fatalf("%s: %v", p.ID, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			o := res.Order
			want := p.NewOrder(o.CreatedAt)
			want.Items = store.ItemsBySKU(p.Items)
			if !sameOrder(o, want) || o.CreatedAt.Nanosecond()%1e6 != 0 {
				t.Fatalf("answered %+v, want NewOrder at its created_at %+v", o, want)
			}
			if d := o.CreatedAt.Sub(before); dbClock && (d < 0 || d > 30*time.Second) {
				t.Fatalf("created_at %v, %v after the database's clock read just before", o.CreatedAt, d)
			}
			if got, err := s.GetOrder(ctx, p.ID); err != nil || !sameOrder(got, o) || got.ReservationID != p.ReservationID {
				t.Fatalf("read back %+v %v, want %+v", got, err, o)
			}
			var payload string
			var evAt time.Time
			if err := pool.QueryRow(ctx, "SELECT payload::text, created_at FROM lapse_outbox WHERE order_id = $1 AND type = $2",
				p.ID, order.EventCreated).Scan(&payload, &evAt); err != nil {
				t.Fatal(err)
			}
			if want, _ := core.EventPayload(o); payload != string(want) || !evAt.Equal(o.CreatedAt) {
				t.Fatalf("event at %v:\n%s\nwant at %v:\n%s", evAt, payload, o.CreatedAt, want)
			}
			local := p.ReservationID == ""
			wantLedger := 0
			if local {
				wantLedger = len(p.Items)
			}
			if n := count(t, pool, "SELECT count(*) FROM lapse_stock_ledger WHERE order_id = $1 AND action = 'reserve' AND created_at = $2",
				p.ID, o.CreatedAt); n != wantLedger || n != count(t, pool, "SELECT count(*) FROM lapse_stock_ledger WHERE order_id = $1", p.ID) {
				t.Fatalf("%d reserve ledger rows at created_at, want %d", n, wantLedger)
			}
			if p.IdempotencyKey != "" && count(t, pool, "SELECT count(*) FROM lapse_idempotency_keys WHERE key = $1 AND order_id = $2 AND created_at = $3",
				p.IdempotencyKey, p.ID, o.CreatedAt) != 1 {
				t.Fatal("the key is not the order's, taken at its created_at")
			}
			if local && count(t, pool, "SELECT count(*) FROM lapse_skus WHERE updated_at = $1", o.CreatedAt) != 2 {
				t.Fatal("the reserved SKUs were not updated at created_at")
			}
		}
		if a, _ := s.GetSKU(ctx, "a"); a.Available != 9 || a.Locked != 1 {
			t.Fatalf("a: %+v", a)
		}
		if b, _ := s.GetSKU(ctx, "b"); b.Available != 8 || b.Locked != 2 {
			t.Fatalf("b: %+v", b)
		}
		if _, err := s.GetSKU(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a remote SKU: %v, want no row of lapse's", err)
		}
		storetest.AuditOK(t, s)
	})
}

func sameOrder(a, b order.Order) bool {
	return a.ID == b.ID && a.Status == b.Status && a.AmountCents == b.AmountCents && a.Currency == b.Currency &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) && a.CancelAfter.Equal(b.CancelAfter) &&
		a.Version == b.Version && a.ReservationID == b.ReservationID && slices.Equal(a.Items, b.Items)
}

// waitUntil polls cond until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not yet %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// In lapse's own transaction a create alone is two round trips: its BEGIN
// and its statement in one, then COMMIT — every create with create_group=1,
// a create whose stock a remote inventory holds, and a group of one (light
// load; the pipelined group took five). (Step by step a lone create was
// eight for an order of two items with an idempotency key — BEGIN, the
// clock, the key, the order and its items, a reservation per SKU, the ledger
// and event, COMMIT — and five for one of remote stock.)
func TestACreateAloneIsTwoRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lone := openURL(t, newSchema(t)+"&create_group=1", nil)
	grouped, _ := open(t, nil)
	for _, s := range []*postgres.Store{lone, grouped} {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		storetest.Stock(t, s, 100, "a", "b")
	}
	trips := func(s *postgres.Store, p store.CreateOrderParams) int64 {
		t.Helper()
		before := s.RoundTrips()
		if _, err := s.CreateOrder(ctx, p); err != nil {
			t.Fatal(err)
		}
		return s.RoundTrips() - before
	}
	for i := range 3 {
		p := createParams(fmt.Sprintf("o%d", i), fmt.Sprintf("k%d", i), order.Item{SKU: "a", Qty: 1}, order.Item{SKU: "b", Qty: 1})
		if n := trips(lone, p); n != 2 {
			t.Errorf("a lone create of two items: %d round trips, want 2", n)
		}
		if n := trips(grouped, p); n != 2 {
			t.Errorf("a group of one create of two items: %d round trips, want 2", n)
		}
		p = createParams(fmt.Sprintf("r%d", i), "", order.Item{SKU: "x", Qty: 1})
		p.ReservationID = fmt.Sprintf("res-%d", i)
		if n := trips(grouped, p); n != 2 {
			t.Errorf("a create of remote stock: %d round trips, want 2", n)
		}
	}
	if groups, orders, fallbacks := grouped.GroupStats(); groups != 3 || orders != 3 || fallbacks != 0 {
		t.Errorf("%d groups of %d orders, %d fallbacks: want 3 groups of one", groups, orders, fallbacks)
	}
	storetest.AuditOK(t, grouped)
}

// A group of one answers as a pipelined group does: a refusal is the
// order's own (the group commits nothing), and an order the server refuses
// (a CHECK constraint) sends the group down the lone path, which answers the
// server's error.
func TestGroupOfOneAnswersAsAGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 1, "a")
	p := createParams("o1", "k1", order.Item{SKU: "a", Qty: 2})
	if _, err := s.CreateOrder(ctx, p); !errors.Is(err, store.ErrInsufficientStock) {
		t.Fatalf("short: %v, want ErrInsufficientStock", err)
	}
	if groups, _, fallbacks := s.GroupStats(); groups != 1 || fallbacks != 0 {
		t.Fatalf("%d groups, %d fallbacks: want the refusal decided in its group", groups, fallbacks)
	}
	bad := createParams("bad", "", order.Item{SKU: "a", Qty: 1})
	bad.AmountCents = -1
	var pe *pgconn.PgError
	if _, err := s.CreateOrder(ctx, bad); !errors.As(err, &pe) || pe.Code != "23514" {
		t.Fatalf("a negative amount: %v, want the server's check violation", err)
	}
	if _, _, fallbacks := s.GroupStats(); fallbacks != 1 {
		t.Fatalf("%d fallbacks: want the refused group down the lone path", fallbacks)
	}
	p.Items[0].Qty = 1
	if res, err := s.CreateOrder(ctx, p); err != nil || res.Replayed {
		t.Fatalf("o1 with the stock there: %+v %v, want it created (its key given back)", res, err)
	}
	storetest.AuditOK(t, s)
}
