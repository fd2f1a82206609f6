package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/storetest"
)

// emptyDatabase creates a database of its own on the server LAPSE_TEST_MYSQL
// names, dropped when the test ends, and returns its URL and a plain
// connection to it for tests that corrupt it on purpose.
func emptyDatabase(t testing.TB) (string, *sql.DB) {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_MYSQL")
	if base == "" {
		t.Skip("set LAPSE_TEST_MYSQL=mysql://… to run")
	}
	cfg, err := mysql.ParseURL(base)
	if err != nil {
		t.Fatalf("LAPSE_TEST_MYSQL: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := "lapse_t_" + randomHex(6)
	// name is made of [a-z0-9_] here, never input: safe to put in the text.
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		admin.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String(), db
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openURL opens a store on url, closed when the test ends.
func openURL(t testing.TB, url string, clk clock.Clock) *mysql.Store {
	t.Helper()
	return openConfig(t, mysql.Config{URL: url, Clock: clk})
}

// openConfig opens a store configured by cfg, closed when the test ends.
func openConfig(t testing.TB, cfg mysql.Config) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// open returns a migrated store on an empty database of its own.
func open(t testing.TB, clk clock.Clock) (*mysql.Store, *sql.DB) {
	t.Helper()
	url, db := emptyDatabase(t)
	s := openURL(t, url, clk)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, db
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	s, db := open(t, clock.Real{})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations`).Scan(&n); err != nil || n != migrations(t) {
		t.Fatalf("schema_migrations holds %d rows (%v), want %d", n, err, migrations(t))
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, _ := open(t, clk)
		return s
	})
}

// Several processes starting at once on an empty database all migrate
// successfully: GET_LOCK makes them take turns.
func TestConcurrentMigrateOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url, db := emptyDatabase(t)
	stores := []*mysql.Store{openURL(t, url, nil), openURL(t, url, nil), openURL(t, url, nil)}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrate %d: %v", i, err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations`).Scan(&n); err != nil || n != migrations(t) {
		t.Fatalf("schema_migrations holds %d rows (%v), want %d", n, err, migrations(t))
	}
	storetest.Stock(t, stores[0], 1, "a")
	storetest.Create(t, stores[1], "o", "a")
}

// MySQL cannot roll a migration back: a failed step leaves the steps before
// it, and no version. The next Migrate, once the cause is gone, completes it.
func TestMigrateResumesAfterAFailedStep(t *testing.T) {
	t.Parallel()
	url, db := emptyDatabase(t)
	// An orders table whose id cannot be referenced by order_items' foreign
	// key: the create_order_items step fails after create_skus succeeded.
	if _, err := db.Exec(`CREATE TABLE lapse_orders (id INT PRIMARY KEY) ENGINE = InnoDB`); err != nil {
		t.Fatal(err)
	}
	s := openURL(t, url, nil)
	err := s.Migrate(context.Background())
	if err == nil || !strings.Contains(err.Error(), "create_order_items") {
		t.Fatalf("migrate with a broken orders table: err = %v, want a failure at create_order_items", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a failed migration was recorded: %d rows (%v)", n, err)
	}
	if _, err := db.Exec(`DROP TABLE lapse_orders`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations`).Scan(&n); err != nil || n != migrations(t) {
		t.Fatalf("schema_migrations holds %d rows (%v), want %d", n, err, migrations(t))
	}
	storetest.Stock(t, s, 1, "a")
	storetest.Create(t, s, "o", "a")
	storetest.AuditOK(t, s)
}

// The ledger's primary key is what makes a second release impossible even if
// a guard were wrong: check it at the database.
func TestLedgerRefusesASecondRelease(t *testing.T) {
	t.Parallel()
	s, db := open(t, clock.Real{})
	storetest.Stock(t, s, 5, "a")
	storetest.Create(t, s, "o", "a")
	if _, err := s.CancelOrder(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	_, err := db.Exec(`INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at)
		VALUES ('o', 'a', 'release', 1, UTC_TIMESTAMP(3))`)
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("a second release row: err = %v, want a duplicate key (1062)", err)
	}
}

// A transaction that InnoDB picks as a deadlock victim is run again: the
// store's CreateOrder holds SKU a and waits for b, held by a heavier
// transaction that then asks for a. InnoDB rolls back the lighter one, the
// store's, which retries and succeeds once the other commits.
func TestDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	s, db := open(t, clock.Real{})
	ctx := context.Background()
	storetest.Stock(t, s, 5, "a", "b")
	if _, err := db.Exec(`CREATE TABLE ballast (i INT PRIMARY KEY) ENGINE = InnoDB`); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := db.QueryRow(`SELECT DATABASE()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	// Weight: many rows written, so InnoDB prefers the store's transaction as its victim.
	if _, err := other.Exec(`INSERT INTO ballast (i) SELECT seq FROM seq_1_to_500`); err != nil {
		// seq_1_to_500 is MariaDB's sequence engine; MySQL has none.
		if _, err := other.Exec(`INSERT INTO ballast (i) WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) SELECT i FROM n`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Exec(`UPDATE lapse_skus SET updated_at = updated_at WHERE sku = 'b'`); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() {
		_, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "dl", Items: []order.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}},
			AmountCents: 1000, Currency: "EUR", Timeout: time.Minute})
		created <- err
	}()
	// Wait until the store's transaction waits for b (holding a).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.innodb_trx t
			JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.db = ?`, name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store's transaction never waited for the lock on b")
		}
		// innodb_trx is a cache that InnoDB refreshes only when it was not
		// read for 100 ms: poll slower than that.
		time.Sleep(150 * time.Millisecond)
	}
	if _, err := other.Exec(`UPDATE lapse_skus SET updated_at = updated_at WHERE sku = 'a'`); err != nil {
		t.Fatalf("InnoDB chose the other transaction as the victim: %v", err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("create after a deadlock: %v", err)
	}
	storetest.AuditOK(t, s)
}

// Audit must be able to fail: corrupt each invariant and see its check fire.
func TestAuditDetectsViolations(t *testing.T) {
	t.Parallel()
	cases := []storetest.Corruption{
		{Check: "stock_conserved", SQL: `UPDATE lapse_skus SET available = available + 1`},
		{Check: "locked_matches_open_orders", SQL: `UPDATE lapse_skus SET locked = locked + 1, total = total + 1`},
		{Check: "sold_matches_commits", SQL: `UPDATE lapse_skus SET sold = sold + 1, total = total + 1`},
		{Check: "ledger_matches_status", SQL: `DELETE FROM lapse_stock_ledger WHERE action = 'reserve'`},
		{Check: "paid_xor_cancelled", SQL: `UPDATE lapse_orders SET cancelled_at = paid_at WHERE status = 'PAID'`},
		{Check: "timeout_not_early", SQL: `UPDATE lapse_orders SET status = 'CANCELLED', cancel_reason = 'timeout',
			cancelled_at = cancel_after - INTERVAL 1000 MICROSECOND WHERE id = 'open'`},
		{Check: "refund_matches_payments", SQL: `UPDATE lapse_orders SET refund_required = TRUE WHERE status = 'PAID'`},
		{Check: "events_once_per_transition", SQL: `DELETE FROM lapse_outbox WHERE type = 'order.paid'`},
		{Check: "pending_past_deadline", SQL: `UPDATE lapse_orders SET cancel_after = '2000-01-01 00:00:00' WHERE id = 'open'`},
		{Check: "commanded_unanswered", SQL: `UPDATE lapse_orders SET status = 'CANCELLING', cancel_after = '2000-01-01 00:00:00' WHERE id = 'open'`},
		{Check: "commands_dead", Warning: true, SQL: `INSERT INTO lapse_order_commands (id, order_id, cancel_after, status, next_at, since, created_at, dead_at, last_error)
			VALUES ('cmd_x', 'open', UTC_TIMESTAMP(3), 'DEAD', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), '400 Bad Request')`},
		// A refund recorded DONE whose attempt is not REFUNDED, and an
		// attempt REFUNDED with no DONE refund.
		{Check: "refunds_match_attempts", SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, done_at, last_error, note)
			VALUES ('p', 'paid', 1000, 'EUR', 'DONE', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), '', '')`},
		{Check: "refunds_match_attempts", Name: "refunded_without_its_refund", SQL: `UPDATE lapse_payments SET status = 'REFUNDED' WHERE payment_id = 'p'`},
		{Check: "refunds_not_done", Warning: true, SQL: `INSERT INTO lapse_refunds (payment_id, order_id, amount_cents, currency, status, next_at, since, created_at, dead_at, last_error, note)
			VALUES ('p', 'paid', 1000, 'EUR', 'DEAD', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), '', '')`},
	}
	var handles sync.Map // store → its *sql.DB
	factory := func(t *testing.T, clk clock.Clock) store.Store {
		s, db := open(t, clk)
		handles.Store(store.Store(s), db)
		return s
	}
	storetest.AuditCatches(t, factory, func(t *testing.T, s store.Store, stmt string) {
		db, _ := handles.Load(s)
		if _, err := db.(*sql.DB).Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}, cases)
}

// Without a Clock the database's clock decides, and what a result reports as
// "now" is the time the guards and the rows used.
func TestDatabaseClockDecides(t *testing.T) {
	t.Parallel()
	s, db := open(t, nil)
	ctx := context.Background()
	storetest.Stock(t, s, 5, "a")
	var before time.Time
	if err := db.QueryRow(`SELECT UTC_TIMESTAMP(3)`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "now", Items: []order.Item{{SKU: "a", Qty: 1}},
		AmountCents: 1, Currency: "EUR"}) // no timeout, no grace: due at once
	if err != nil {
		t.Fatal(err)
	}
	o := res.Order
	if d := o.CreatedAt.Sub(before); d < 0 || d > 5*time.Second {
		t.Fatalf("created_at %v is not the database's time (%v before the create)", o.CreatedAt, before)
	}
	if !o.CancelAfter.Equal(o.CreatedAt) {
		t.Fatalf("cancel_after %v, want created_at %v", o.CancelAfter, o.CreatedAt)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "now"}); !errors.Is(err, store.ErrOrderExpired) {
		t.Fatalf("start payment at expires_at by the database's clock: err = %v, want ErrOrderExpired", err)
	}
	due, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"now"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(due.Cancelled) != 1 || !due.Cancelled[0].CancelledAt.Equal(due.Now) || due.Now.Before(o.CancelAfter) {
		t.Fatalf("cancel due: %+v (cancel_after %v)", due, o.CancelAfter)
	}
	if got, err := s.GetOrder(ctx, "now"); err != nil || !got.CancelledAt.Equal(due.Now) {
		t.Fatalf("stored cancelled_at %v (%v), reported now %v", got.CancelledAt, err, due.Now)
	}
	rep, err := s.Audit(ctx, store.AuditParams{})
	if err != nil || !rep.OK() || rep.At.Before(due.Now) {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, user, pass, net, addr, db string
	}{
		{"mysql://root@127.0.0.1:3306/test", "root", "", "tcp", "127.0.0.1:3306", "test"},
		{"mysql://lapse:p%40ss%3Aw%2Frd@db.internal/lapse", "lapse", "p@ss:w/rd", "tcp", "db.internal:3306", "lapse"},
		{"mysql://u:p@[::1]:3307/x?tls=skip-verify", "u", "p", "tcp", "[::1]:3307", "x"},
		{"mysql://u@/x?socket=/run/mysqld/mysqld.sock", "u", "", "unix", "/run/mysqld/mysqld.sock", "x"},
	} {
		cfg, err := mysql.ParseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if cfg.User != c.user || cfg.Passwd != c.pass || cfg.Net != c.net || cfg.Addr != c.addr || cfg.DBName != c.db {
			t.Errorf("%s: user %q pass %q net %s addr %s db %s", c.url, cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName)
		}
		if !cfg.ParseTime || cfg.InterpolateParams || !cfg.ClientFoundRows || cfg.Loc != time.UTC ||
			cfg.Params["time_zone"] != "'+00:00'" || cfg.Timeout <= 0 {
			t.Errorf("%s: the store's settings are not forced: %+v", c.url, cfg)
		}
	}
	for _, bad := range []string{"postgres://u@h/db", "mysql://u@h", "mysql://u@h/", "mysql://u@h/a/b", "mysql:///db", "mysql://u:secret@h/db?tls=nonsense", "mysql://u:secret@h:port/db"} {
		_, err := mysql.ParseURL(bad)
		if err == nil {
			t.Errorf("%s: accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", bad, err)
		}
	}
}

// migrations is the number of migration files shipped.
func migrations(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob("migrations/*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	return len(files)
}

// Statements (bench's db_statements_per_order) is counted in the driver's
// connections, with the server's clock as in production.
func TestStatementsCountsACreateAndNothingWhenIdle(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	// START TRANSACTION, the clock, the order, one reservation per item, the
	// items, the ledger, the event, COMMIT: each statement with arguments is
	// prepared, executed and closed by the driver, and counts once.
	if n := storetest.CountsStatements(t, s); n != 9 {
		t.Errorf("one create of two items: %d statements, want 9", n)
	}
}

// With retries off, a deadlock would reach the caller: creates, buyer
// cancels and timeout batches on shared SKUs, items in any order, never
// meet one (SKU rows are locked in one order by every transaction).
func TestNoDeadlocksWithoutRetries(t *testing.T) {
	t.Parallel()
	url, _ := emptyDatabase(t)
	s := openConfig(t, mysql.Config{URL: url, Retries: -1})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	storetest.NoDeadlocks(t, s, 40)
}
