package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// serverURL is the database the tests run in, each in a schema of its own.
func serverURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("LAPSE_TEST_POSTGRES")
	if u == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	return u
}

// admin runs one statement on the test server's own database, on a
// connection of its own (CREATE/DROP of schemas and databases).
func admin(t testing.TB, base, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", base, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// uniqueName is prefix and 12 random hex digits.
func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// newSchema creates an empty schema, dropped when the test ends, and returns
// a URL whose connections use it (search_path is sent as a run-time parameter).
func newSchema(t testing.TB) string {
	t.Helper()
	base := serverURL(t)
	schema := uniqueName("lapse_t_")
	ident := pgx.Identifier{schema}.Sanitize()
	admin(t, base, "CREATE SCHEMA "+ident)
	t.Cleanup(func() { admin(t, base, "DROP SCHEMA "+ident+" CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return u.String()
}

// open returns a migrated store in a new schema, and the schema's URL.
func open(t testing.TB, clk clock.Clock) (*postgres.Store, string) {
	t.Helper()
	u := newSchema(t)
	s := openURL(t, u, clk)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, u
}

func openURL(t testing.TB, u string, clk clock.Clock) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: u, Clock: clk, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// connect opens one connection to the schema of u, for looking behind the store.
func connect(t testing.TB, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, _ := open(t, clk)
		return s
	})
}

// The core's general path for groups of creates, one savepoint per create,
// on PostgreSQL: the savepoints this driver has though it pipelines groups.
func TestConformanceWithSavepointGroups(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, _ := open(t, clk)
		return s.WithSavepoints()
	})
}

// This driver writes a cancel's commands claimed for the caller when asked
// (order-service mode's handoff: core.CommandClaimer).
func TestCancelWritesCommandsClaimedForTheCaller(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	storetest.RequireClaimAtWrite(t, s)
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
}

// Several instances starting at once on an empty schema: the advisory lock
// makes them queue, and each finds the work done by the first.
func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	const instances = 4
	errs := make(chan error, instances)
	var wg sync.WaitGroup
	for range instances {
		s := openURL(t, u, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Migrate(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent migrate: %v", err)
		}
	}
	var n int
	if err := connect(t, u).QueryRow(context.Background(), `SELECT count(*) FROM lapse_schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	ms, err := fs.Glob(postgres.Files, "migrations/*.up.sql")
	if err != nil || n != len(ms) {
		t.Fatalf("%d migrations recorded, want %d (%v)", n, len(ms), err)
	}
}

// A migration that fails half-way leaves nothing of itself behind.
func TestFailedMigrationLeavesTheSchemaAsItWas(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := openURL(t, u, nil)
	first, err := fs.ReadFile(postgres.Files, "migrations/009_lapse_tables.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"m/009_lapse_tables.up.sql": {Data: first},
		"m/010_broken.up.sql": {Data: []byte(`CREATE TABLE extra (x int);
ALTER TABLE lapse_orders ADD COLUMN y int;
SELECT 1 / 0;`)},
	}
	ctx := context.Background()
	if err := s.MigrateFrom(ctx, fsys, "m"); err == nil || !strings.Contains(err.Error(), "010_broken") {
		t.Fatalf("broken migration: err = %v", err)
	}
	var extra, y bool
	var version int
	err = connect(t, u).QueryRow(ctx, `SELECT to_regclass('extra') IS NOT NULL,
		EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'lapse_orders' AND column_name = 'y'),
		(SELECT max(version) FROM lapse_schema_migrations)`).Scan(&extra, &y, &version)
	if err != nil {
		t.Fatal(err)
	}
	if extra || y || version != 9 {
		t.Fatalf("after the failed step: table extra %v, column y %v, version %d", extra, y, version)
	}
	storetest.Stock(t, s, 1, "a") // version 9 still works
}

// The ledger's primary key is what makes a second release impossible even if
// a guard were wrong: check it at the database.
func TestLedgerRefusesASecondRelease(t *testing.T) {
	t.Parallel()
	s, u := open(t, clock.Real{})
	storetest.Stock(t, s, 5, "a")
	storetest.Create(t, s, "o", "a")
	if _, err := s.CancelOrder(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	_, err := connect(t, u).Exec(context.Background(),
		`INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at) VALUES ('o', 'a', 'release', 1, now())`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("a second release row: err = %v, want a unique violation", err)
	}
}

// Two transactions taking the same SKU rows in opposite orders deadlock;
// PostgreSQL aborts one with deadlock_detected, and the store runs it again
// rather than failing the request.
func TestDeadlockedTransactionRunsAgain(t *testing.T) {
	t.Parallel()
	s, _ := open(t, clock.Real{})
	ctx := context.Background()
	storetest.Stock(t, s, 5, "a", "b")
	var runs [2]int
	var held sync.WaitGroup // each holds its first row before taking the second
	held.Add(2)
	var wg sync.WaitGroup
	for i, skus := range [2][2]string{{"a", "b"}, {"b", "a"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Tx(ctx, func(tx postgres.TxConn) error {
				runs[i]++
				for k, sku := range skus {
					if _, err := tx.Exec(ctx, `UPDATE lapse_skus SET available = available + 1 WHERE sku = $1`, sku); err != nil {
						return err
					}
					if k == 0 && runs[i] == 1 {
						held.Done()
						held.Wait()
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("transaction %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	// At least one ran again; under load the retry can meet the other
	// transaction again and deadlock once more, and is run again too.
	if runs[0]+runs[1] < 3 {
		t.Fatalf("runs %v: want one of the two run again", runs)
	}
	for _, sku := range []string{"a", "b"} {
		if k, err := s.GetSKU(ctx, sku); err != nil || k.Available != 7 {
			t.Fatalf("sku %s: %+v %v, want both increments once", sku, k, err)
		}
	}
}

// Audit must be able to fail: corrupt each invariant and see its check fire.
func TestAuditDetectsViolations(t *testing.T) {
	t.Parallel()
	cases := []storetest.Corruption{
		{Check: "stock_conserved", SQL: `UPDATE lapse_skus SET available = available + 1`},
		{Check: "locked_matches_open_orders", SQL: `UPDATE lapse_skus SET locked = locked + 1, total = total + 1`},
		{Check: "sold_matches_commits", SQL: `UPDATE lapse_skus SET sold = sold + 1, total = total + 1`},
		{Check: "ledger_matches_status", SQL: `DELETE FROM lapse_stock_ledger WHERE action = 'reserve'`},
		{Check: "paid_xor_cancelled", SQL: `UPDATE lapse_orders SET cancelled_at = now() WHERE status = 'PAID'`},
		{Check: "timeout_not_early", SQL: `UPDATE lapse_orders SET status = 'CANCELLED', cancel_reason = 'timeout',
			cancelled_at = cancel_after - interval '1 millisecond' WHERE id = 'open'`},
		{Check: "refund_matches_payments", SQL: `UPDATE lapse_orders SET refund_required = true WHERE status = 'PAID'`},
		{Check: "events_once_per_transition", SQL: `DELETE FROM lapse_outbox WHERE type = 'order.paid'`},
		{Check: "pending_past_deadline", SQL: `UPDATE lapse_orders SET cancel_after = 'epoch' WHERE id = 'open'`},
		{Check: "commanded_unanswered", SQL: `UPDATE lapse_orders SET status = 'CANCELLING', cancel_after = 'epoch' WHERE id = 'open'`},
		{Check: "commands_dead", Warning: true, SQL: `INSERT INTO lapse_order_commands (id, order_id, cancel_after, status, next_at, since, created_at, dead_at, last_error)
			VALUES ('cmd_x', 'open', now(), 'DEAD', now(), now(), now(), now(), '400 Bad Request')`},
		// A refund recorded DONE whose attempt is not REFUNDED, and an
		// attempt REFUNDED with no DONE refund.
		{Check: "refunds_match_attempts", SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, done_at)
			VALUES ('p', 'paid', 1000, 'EUR', 'DONE', now(), now(), now(), now())`},
		{Check: "refunds_match_attempts", Name: "refunded_without_its_refund", SQL: `UPDATE lapse_payments SET status = 'REFUNDED' WHERE payment_id = 'p'`},
		{Check: "refunds_not_done", Warning: true, SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, dead_at)
			VALUES ('p', 'paid', 1000, 'EUR', 'DEAD', now(), now(), now(), now())`},
	}
	var handles sync.Map // store → what exec needs to reach its database
	factory := func(t *testing.T, clk clock.Clock) store.Store {
		s, u := open(t, clk)
		handles.Store(store.Store(s), u)
		return s
	}
	storetest.AuditCatches(t, factory, func(t *testing.T, s store.Store, stmt string) {
		h, _ := handles.Load(s)
		if _, err := connect(t, h.(string)).Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}, cases)
}

// Without a configured clock, the database's clock decides every guard, and
// the times the store reports are the ones it used.
func TestDatabaseClockDecides(t *testing.T) {
	t.Parallel()
	s, u := open(t, nil)
	ctx := context.Background()
	storetest.Stock(t, s, 10, "a")
	create := func(id string, timeout time.Duration) order.Order {
		t.Helper()
		res, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "a", Qty: 1}},
			AmountCents: 1, Currency: "EUR", Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return res.Order
	}
	var dbNow time.Time
	if err := connect(t, u).QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	due := create("due", 0)
	later := create("later", time.Hour)
	if d := due.CreatedAt.Sub(dbNow); d < -time.Second || d > 5*time.Second {
		t.Fatalf("created_at %v is %v away from the database's now %v", due.CreatedAt, d, dbNow)
	}
	if due.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 {
		t.Fatalf("created_at %v is finer than milliseconds", due.CreatedAt)
	}
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"due", "later"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 1 || res.Cancelled[0].ID != "due" || !res.Cancelled[0].CancelledAt.Equal(res.Now) {
		t.Fatalf("cancelled %+v at %v", res.Cancelled, res.Now)
	}
	if res.Now.Before(due.CancelAfter) || !res.Now.Before(later.CancelAfter) {
		t.Fatalf("now %v: due at %v, later at %v", res.Now, due.CancelAfter, later.CancelAfter)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].ID != "later" || res.Skipped[0].Status != order.Pending {
		t.Fatalf("skipped %+v", res.Skipped)
	}
	if got, err := s.GetOrder(ctx, "due"); err != nil || !got.CancelledAt.Equal(res.Now) {
		t.Fatalf("stored cancelled_at %v, reported now %v (%v)", got.CancelledAt, res.Now, err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "later"}); err != nil {
		t.Fatalf("start payment an hour before expiry: %v", err)
	}
	create("claimed", 0)
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10})
	if err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != "claimed" {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if n, err := s.CountStuck(ctx); err != nil || n != 0 {
		t.Fatalf("stuck = %d, %v", n, err)
	}
	storetest.AuditOK(t, s)
}

// The claim must cost O(due rows), not O(table): both the plan for the
// values at hand and the generic plan a cached statement may switch to walk
// the (status, cancel_after) index and stop at the LIMIT, in both forms of
// the claim (claim_due_clocked is the one a store without Config.Clock
// runs), with orders whose OnCancelled is failing among the due ones (a
// probe of lapse_hook_failures per row walked); and so does the next
// deadline a poller sleeps until.
func TestClaimWalksTheScheduleIndex(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	ctx := context.Background()
	conn := connect(t, u)
	// 100,000 orders, 1% of them due, 100 of those with a failing hook
	// retried in a minute; the rest pending in the future or done.
	_, err := conn.Exec(ctx, `
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
SELECT 'o' || g,
       CASE WHEN g % 3 = 0 THEN 'PAID' WHEN g % 3 = 1 THEN 'CANCELLED' ELSE 'PENDING' END,
       100, 'EUR', now(), now(),
       CASE WHEN g % 100 = 2 THEN now() - interval '1 minute' ELSE now() + g * interval '1 second' END
FROM generate_series(1, 100000) AS g;
INSERT INTO lapse_hook_failures (order_id, event, attempts, last_error, first_failed_at, last_failed_at, next_at)
SELECT 'o' || g, 'cancelled', 3, 'no', now(), now(), now() + interval '1 minute'
FROM generate_series(2, 100000, 100) AS g LIMIT 100;
ANALYZE lapse_orders;
ANALYZE lapse_hook_failures`)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx) // EXPLAIN alone does not run the UPDATE; roll back anyway
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	plan := func(sql string, args ...any) string {
		t.Helper()
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	walks := func(p string) bool {
		return (strings.Contains(p, "Index Scan on lapse_orders_status_cancel_after") || strings.Contains(p, "Index Scan using lapse_orders_status_cancel_after")) &&
			!strings.Contains(p, "Seq Scan on lapse_orders")
	}
	now := time.Now()
	plans := map[string]string{
		"claim_due":          plan("EXPLAIN "+postgres.ClaimDueSQL, now, now, 200, false),
		"claim_due_clocked":  plan("EXPLAIN "+postgres.Query("claim_due_clocked"), time.Duration(0), 200, false),
		"next_deadline":      plan("EXPLAIN "+postgres.Query("next_deadline"), false),
		"next_deadline/skip": plan("EXPLAIN "+postgres.Query("next_deadline"), true),
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]string{
		"PREPARE claim (timestamptz, timestamptz, int, boolean) AS ": postgres.ClaimDueSQL,
		"PREPARE clocked (interval, int, boolean) AS ":               postgres.Query("claim_due_clocked"),
		"PREPARE next (boolean) AS ":                                 postgres.Query("next_deadline"),
	} {
		if _, err := tx.Exec(ctx, name+q); err != nil {
			t.Fatal(err)
		}
	}
	plans["claim_due/generic"] = plan("EXPLAIN EXECUTE claim (now(), now(), 200, false)")
	plans["claim_due_clocked/generic"] = plan("EXPLAIN EXECUTE clocked ('0', 200, false)")
	plans["next_deadline/generic"] = plan("EXPLAIN EXECUTE next (false)")
	for name, p := range plans {
		claim := strings.HasPrefix(name, "claim")
		if !walks(p) || !strings.Contains(p, "Limit") || claim && (!strings.Contains(p, "Index Scan using lapse_orders_pkey") || !strings.Contains(p, "LockRows")) {
			t.Errorf("%s: the plan does not walk the schedule index:\n%s", name, p)
		}
	}
	// What they cost here, for the record.
	for _, name := range []string{"claim_due_clocked", "next_deadline"} {
		args := []any{time.Duration(0), 200, false}
		if name == "next_deadline" {
			args = []any{false}
		}
		t.Logf("%s:\n%s", name, plan("EXPLAIN (ANALYZE, COSTS OFF, TIMING ON) "+postgres.Query(name), args...))
	}
}

// BenchmarkCancelDue measures the timeout cancel of due orders, with the
// database's clock as in production: b.N orders of two items each are created
// outside the timer, then cancelled in batches of the given size by id (what
// a scheduler hands over) or by claim (the sql timer backend and the sweep).
func BenchmarkCancelDue(b *testing.B) {
	for _, batch := range []int{1, 50, 200} {
		b.Run(fmt.Sprintf("ids/batch=%d", batch), func(b *testing.B) { benchCancelDue(b, batch, false) })
	}
	b.Run("claim/batch=200", func(b *testing.B) { benchCancelDue(b, 200, true) })
	b.Run("claim/batch=200/claimers=2", func(b *testing.B) { benchCancelDue(b, 200, true, 2) })
}

// benchCancelDue cancels b.N orders; a claim runs claimers claim loops at
// once (the sql timers in a burst: poll.go's burstClaimers).
func benchCancelDue(b *testing.B, batch int, claim bool, claimers ...int) {
	s, u := open(b, nil)
	ctx := context.Background()
	n := b.N
	const skus = 50
	for i := range skus {
		storetest.Stock(b, s, int64(2*n), fmt.Sprintf("sku-%02d", i))
	}
	storetest.Stock(b, s, int64(2*n), "shared")
	ids := make([]string, n)
	var wg sync.WaitGroup
	const creators = 8
	for w := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += creators {
				ids[i] = fmt.Sprintf("bench-%07d", i)
				_, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: ids[i], AmountCents: 100, Currency: "EUR",
					Items: []order.Item{{SKU: fmt.Sprintf("sku-%02d", i%skus), Qty: 1}, {SKU: "shared", Qty: 1}}})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if _, err := connect(b, u).Exec(ctx, "ANALYZE"); err != nil { // as autovacuum would have by now
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	done := 0
	if claim {
		var mu sync.Mutex
		var wg sync.WaitGroup
		loops := 1
		if len(claimers) > 0 {
			loops = claimers[0]
		}
		for range loops {
			wg.Go(func() {
				for {
					res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: batch})
					if err != nil {
						b.Error(err)
						return
					}
					if len(res.Cancelled) == 0 {
						return
					}
					mu.Lock()
					done += len(res.Cancelled)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	} else {
		for lo := 0; lo < n; lo += batch {
			res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids[lo:min(lo+batch, n)]})
			if err != nil {
				b.Fatal(err)
			}
			done += len(res.Cancelled)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("cancelled %d of %d", done, n)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "orders/s")
}

// Statements (bench's db_statements_per_order) is counted by a pgx tracer,
// with the database's clock as in production (one more statement: its read).
func TestStatementsCountsACreateAndNothingWhenIdle(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	// A group of one, sent in one round trip (core.CreateExecutor): BEGIN,
	// the group's lock wait bound (group_lock_wait), the savepoint a refusal
	// is undone to and the create (the clock, the order, its items, the
	// reservation, ledger and event in one statement), the NOTIFY that
	// tells the other instances its deadline at commit (notify_created, in
	// the same pipeline); then COMMIT. (As a pipelined group it was 11:
	// BEGIN, the clock, the lock wait bound, the SKU lock and the read of
	// the existing ids, orders, items, reservation, ledger, event, COMMIT.)
	if n := storetest.CountsStatements(t, s); n != 6 {
		t.Errorf("one create of two items: %d statements, want 6", n)
	}
}

// The queries that read an order's items by a batch of order ids walk the
// primary key even before the table has statistics (a new database, or one
// where autovacuum is off): without them PostgreSQL takes "order_id = ANY of
// 200 ids" to match every row and would scan the whole table on every batch.
func TestItemQueriesWalkTheKeyWithoutStatistics(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	ctx := context.Background()
	conn := connect(t, u)
	_, err := conn.Exec(ctx, `
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
SELECT 'o' || g, 'PENDING', 100, 'EUR', now(), now(), now() FROM generate_series(1, 20000) AS g;
INSERT INTO lapse_order_items (order_id, sku, qty)
SELECT 'o' || g, s, 1 FROM generate_series(1, 20000) AS g, (VALUES ('a'), ('b')) AS v (s)`)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("o%d", i*97+1)
	}
	array := "'{" + strings.Join(ids, ",") + "}'"
	for _, c := range []struct{ name, types, args string }{
		{"get_items", "text[]", array},
		{"ledger_insert", "text[], text, timestamptz", array + ", 'release', now()"},
		{"get_orders", "text[]", array},
		{"group_existing", "text[]", array},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			tx, err := conn.Begin(ctx) // EXPLAIN does not run the INSERT; roll back anyway
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf("PREPARE q_%s_%s (%s) AS %s", c.name, mode, c.types, postgres.Query(c.name))); err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(ctx, fmt.Sprintf("EXPLAIN EXECUTE q_%s_%s (%s)", c.name, mode, c.args))
			if err != nil {
				t.Fatal(err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			tx.Rollback(ctx)
			table := "lapse_order_items"
			if strings.HasPrefix(c.name, "get_orders") || c.name == "group_existing" {
				table = "lapse_orders"
			}
			if p := strings.Join(lines, "\n"); strings.Contains(p, "Seq Scan on "+table+" ") || !strings.Contains(p, table+"_pkey") {
				t.Errorf("%s, %s: the plan does not walk %s_pkey:\n%s", c.name, mode, table, p)
			}
		}
	}
}

// SKU rows are locked, and items read, in byte order (Go's string order, the
// order a create reserves in) whatever the collation: here the SKU columns
// take ICU's en-US, which sorts "sku-a" < "sku-b" < "sku-B" where bytes sort
// "sku-B" first. Locking in the collation's order, a cancel (sku-a, then
// sku-B) and a create (sku-B, then sku-a) deadlocked.
func TestByteOrderWhateverTheCollation(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	// Lone creates (the reservation goes row by row), retries off.
	s, err := postgres.Open(context.Background(), postgres.Config{URL: u, CreateGroup: 1, Retries: -1, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, u)
	_, err = conn.Exec(ctx, `ALTER TABLE lapse_skus ALTER COLUMN sku TYPE text COLLATE "en-US-x-icu";
ALTER TABLE lapse_order_items ALTER COLUMN sku TYPE text COLLATE "en-US-x-icu"`)
	if err != nil {
		t.Fatalf("no ICU collation on this server: %v", err)
	}
	skus := []string{"sku-B", "sku-a", "sku-b"} // byte order
	storetest.Stock(t, s, 1000, skus...)
	if column := firstColumn(t, conn, `SELECT sku FROM lapse_skus ORDER BY sku`); slices.Equal(column, skus) {
		t.Fatalf("the column's collation sorts %v: want an order other than bytes'", column)
	}

	// The statements that lock SKU rows return them in the order they lock them.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lock_skus", "group_lock_skus"} {
		if got := firstColumn(t, tx, postgres.Query(name), []string{"sku-a", "sku-b", "sku-B"}); !slices.Equal(got, skus) {
			t.Errorf("%s locks %v, want %v", name, got, skus)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	items := []order.Item{{SKU: "sku-b", Qty: 1}, {SKU: "sku-a", Qty: 1}, {SKU: "sku-B", Qty: 1}}
	create := func(id string) error {
		_, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: items, AmountCents: 1, Currency: "EUR", Timeout: time.Hour})
		return err
	}
	if err := create("first"); err != nil {
		t.Fatal(err)
	}
	if o, err := s.GetOrder(ctx, "first"); err != nil || !slices.Equal(o.Items, store.ItemsBySKU(items)) {
		t.Fatalf("items read back %+v (%v), want %+v", o.Items, err, store.ItemsBySKU(items))
	}

	// Creates and cancels sharing the SKUs, with retries off: a deadlock
	// would be an error.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				id := fmt.Sprintf("w%d-%02d", w, i)
				if err := create(id); err != nil {
					t.Errorf("create %s: %v", id, err)
					return
				}
				if _, err := s.CancelOrder(ctx, id); err != nil {
					t.Errorf("cancel %s: %v", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	storetest.AuditOK(t, s)
}

// firstColumn reads the first column of every row of a query.
func firstColumn(t *testing.T, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vs, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, vs[0].(string))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The outbox claim finds each order's first pending event by probing the
// (sink, order_id, seq) index with both the sink and the order id, however
// stale the table's statistics, in the custom and in the generic plan.
// Statistics taken while the table was nearly empty — as autovacuum takes
// them when a relay starts — made the NOT EXISTS form probe by sink alone,
// reading every pending row once per candidate: a relay stalled at a few
// thousand pending events.
func TestOutboxClaimWalksTheIndexWithStaleStatistics(t *testing.T) {
	t.Parallel()
	_, u := open(t, clock.Real{})
	ctx := context.Background()
	conn := connect(t, u)
	_, err := conn.Exec(ctx, `
INSERT INTO lapse_outbox_deliveries (sink, seq, order_id, next_at) VALUES ('hook', 0, 'o0', now());
ANALYZE lapse_outbox_deliveries;
INSERT INTO lapse_outbox_deliveries (sink, seq, order_id, next_at)
SELECT 'hook', g, 'o' || (g / 2), now() FROM generate_series(1, 20000) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	explain := func(mode string) string {
		n++
		name := fmt.Sprintf("claim_q%d", n)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "PREPARE "+name+" (text, int, timestamptz, timestamptz) AS "+postgres.Query("claim_deliveries")); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE "+name+" ('hook', 500, now(), now() + interval '30 s')")
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		p := explain("SET LOCAL plan_cache_mode = " + mode)
		if strings.Contains(p, "Seq Scan on lapse_outbox_deliveries") || !strings.Contains(p, "AND (order_id = d.order_id))") {
			t.Errorf("%s: the claim does not probe lapse_outbox_deliveries_order by sink and order id:\n%s", mode, p)
		}
	}
}
