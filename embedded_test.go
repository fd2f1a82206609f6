package lapse_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// shop is what a test of embedded mode needs of the shop's own database:
// its statements on its own orders table, in its own transactions.
type shop struct {
	store store.Store
	// begin opens a transaction of the shop's at its default isolation
	// (repeatable: at REPEATABLE READ), bound to lapse (InTx), and the
	// shop's own statements in it.
	begin func(t *testing.T, repeatable bool) shopTx
	// status reads the shop's row.
	status func(t *testing.T, id string) string
	// runs counts the committed runs of the shop's hooks, by "event id".
	runs func(t *testing.T) map[string]int
	// count runs a query of one count on the shop's database (? placeholders).
	count func(t *testing.T, query string, args ...any) int
}

type shopTx struct {
	tx       store.Tx
	exec     func(query string, args ...any) // the shop's own statement, in the transaction
	commit   func() error
	rollback func()
}

// The shop's hooks: its row follows lapse's transition, guarded (so a hook
// that runs again changes nothing), and each committed run is counted in
// hook_runs; fail, when it returns an error for an order, makes the hook fail.
const (
	shopCancelled = "UPDATE orders_of_the_shop SET status = 'cancelled' WHERE id = ? AND status = 'pending'"
	shopPaid      = "UPDATE orders_of_the_shop SET status = 'paid' WHERE id = ? AND status = 'pending'"
	shopRun       = "INSERT INTO hook_runs (id, event) VALUES (?, ?)"
)

func postgresShop(t *testing.T, fail func(id string) error) shop {
	return newPostgresShop(t, fail, false)
}

// postgresShopMany is postgresShop with the batch form of the cancel hook
// (OnCancelledMany): one statement for all the orders a batch cancels.
func postgresShopMany(t *testing.T, fail func(id string) error) shop {
	return newPostgresShop(t, fail, true)
}

func newPostgresShop(t *testing.T, fail func(id string) error, many bool) shop {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hook := func(update, event string) func(context.Context, pgx.Tx, order.Order) error {
		return func(ctx context.Context, tx pgx.Tx, o order.Order) error {
			if err := fail(o.ID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, pgxPlaceholders(update), o.ID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, pgxPlaceholders(shopRun), o.ID, event)
			return err
		}
	}
	hooks := postgres.Hooks{OnCancelled: hook(shopCancelled, "cancelled"), OnPaid: hook(shopPaid, "paid")}
	if many {
		hooks.OnCancelled = nil
		hooks.OnCancelledMany = func(ctx context.Context, tx pgx.Tx, os []order.Order) error {
			ids := make([]string, len(os))
			for i, o := range os {
				if err := fail(o.ID); err != nil {
					return err
				}
				ids[i] = o.ID
			}
			if _, err := tx.Exec(ctx, "UPDATE orders_of_the_shop SET status = 'cancelled' WHERE id = ANY($1) AND status = 'pending'", ids); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO hook_runs (id, event) SELECT unnest($1::text[]), 'cancelled'", ids)
			return err
		}
	}
	st, err := postgres.FromPool(pool, postgres.Config{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{"CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)",
		"CREATE TABLE hook_runs (id text NOT NULL, event text NOT NULL)"} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	return shop{store: st,
		begin: func(t *testing.T, repeatable bool) shopTx {
			iso := pgx.ReadCommitted
			if repeatable {
				iso = pgx.RepeatableRead
			}
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			return shopTx{tx: st.InTx(tx),
				exec: func(q string, args ...any) {
					if _, err := tx.Exec(ctx, pgxPlaceholders(q), args...); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				},
				commit: func() error { return tx.Commit(ctx) }, rollback: func() { _ = tx.Rollback(ctx) }}
		},
		status: func(t *testing.T, id string) string {
			var s string
			if err := pool.QueryRow(ctx, "SELECT status FROM orders_of_the_shop WHERE id = $1", id).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		},
		runs: func(t *testing.T) map[string]int {
			return countRuns(t, func() (rowsLike, error) {
				r, err := pool.Query(ctx, "SELECT id, event FROM hook_runs")
				return pgRows{r}, err
			})
		},
		count: func(t *testing.T, q string, args ...any) int {
			var n int
			if err := pool.QueryRow(ctx, pgxPlaceholders(q), args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
	}
}

// rowsLike is what countRuns reads of pgx.Rows and *sql.Rows.
type rowsLike interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}

type pgRows struct{ pgx.Rows }

func (r pgRows) Close() { r.Rows.Close() }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// countRuns counts the committed hook runs by "event id".
func countRuns(t *testing.T, query func() (rowsLike, error)) map[string]int {
	t.Helper()
	rows, err := query()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var id, event string
		if err := rows.Scan(&id, &event); err != nil {
			t.Fatal(err)
		}
		n[event+" "+id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// pgxPlaceholders turns the test's ? into $1, $2, … (its queries hold no
// other question mark).
func pgxPlaceholders(q string) string {
	out, n := []byte{}, 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = append(out, '$', byte('0'+n))
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

func mysqlShop(t *testing.T, fail func(id string) error) shop { return newMySQLShop(t, fail, false) }

// mysqlShopMany is mysqlShop with OnCancelledMany.
func mysqlShopMany(t *testing.T, fail func(id string) error) shop { return newMySQLShop(t, fail, true) }

func newMySQLShop(t *testing.T, fail func(id string) error, many bool) shop {
	dc := testdb.MySQLDatabase(t)
	dc.ParseTime, dc.ClientFoundRows = true, true // what lapse's FromDB asks of a pool
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	hook := func(update, event string) func(context.Context, *sql.Tx, order.Order) error {
		return func(ctx context.Context, tx *sql.Tx, o order.Order) error {
			if err := fail(o.ID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, update, o.ID); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, shopRun, o.ID, event)
			return err
		}
	}
	hooks := mysql.Hooks{OnCancelled: hook(shopCancelled, "cancelled"), OnPaid: hook(shopPaid, "paid")}
	if many {
		hooks.OnCancelled = nil
		hooks.OnCancelledMany = func(ctx context.Context, tx *sql.Tx, os []order.Order) error {
			ids := make([]any, len(os))
			for i, o := range os {
				if err := fail(o.ID); err != nil {
					return err
				}
				ids[i] = o.ID
			}
			in := strings.TrimSuffix(strings.Repeat("?,", len(os)), ",")
			if _, err := tx.ExecContext(ctx, "UPDATE orders_of_the_shop SET status = 'cancelled' WHERE status = 'pending' AND id IN ("+in+")", ids...); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO hook_runs (id, event) SELECT id, 'cancelled' FROM orders_of_the_shop WHERE id IN ("+in+")", ids...)
			return err
		}
	}
	st, err := mysql.FromDB(db, mysql.Config{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{"CREATE TABLE orders_of_the_shop (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)",
		"CREATE TABLE hook_runs (id VARCHAR(64) NOT NULL, event VARCHAR(16) NOT NULL)"} {
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	return shop{store: st,
		begin: func(t *testing.T, repeatable bool) shopTx {
			iso := sql.LevelReadCommitted
			if repeatable {
				iso = sql.LevelRepeatableRead
			}
			tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			return shopTx{tx: st.InTx(tx),
				exec: func(q string, args ...any) {
					if _, err := tx.Exec(q, args...); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				},
				commit: tx.Commit, rollback: func() { _ = tx.Rollback() }}
		},
		status: func(t *testing.T, id string) string {
			var s string
			if err := db.QueryRow("SELECT status FROM orders_of_the_shop WHERE id = ?", id).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		},
		runs: func(t *testing.T) map[string]int {
			return countRuns(t, func() (rowsLike, error) {
				r, err := db.Query("SELECT id, event FROM hook_runs")
				return sqlRows{r}, err
			})
		},
		count: func(t *testing.T, q string, args ...any) int {
			var n int
			if err := db.QueryRow(q, args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
	}
}

func never(string) error { return nil }

// TestEmbedded runs the Service inside a shop's own transactions on
// PostgreSQL and MariaDB: a rolled-back checkout leaves nothing of lapse's
// and its timer does nothing; a committed one is cancelled on time; a
// payment and a buyer cancel commit with the shop's own row; a caller at
// REPEATABLE READ whose snapshot is stale gets a retryable error
// (PostgreSQL) or the truth (MariaDB's current reads), never a wrong state.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T, func(string) error) shop{"postgres": postgresShop, "mysql": mysqlShop} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sh := mk(t, never)
			ctx := context.Background()
			svc := newService(t, lapse.Config{Store: sh.store})
			storetest.Stock(t, sh.store, 10, "tee")
			start(t, svc)
			checkout := func(id string, timeout time.Duration, commit bool) {
				t.Helper()
				tx := sh.begin(t, false)
				defer tx.rollback()
				tx.exec("INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", id)
				if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
					AmountCents: 100, Timeout: timeout}); err != nil {
					t.Fatalf("CreateOrderTx %s: %v", id, err)
				}
				if commit {
					if err := tx.commit(); err != nil {
						t.Fatal(err)
					}
				}
			}

			checkout("rolled-back", 100*time.Millisecond, false)
			checkout("committed", 100*time.Millisecond, true)
			waitFor(t, 10*time.Second, "the committed order cancelled", func() bool { return status(t, svc, "committed") == order.Cancelled })
			if got := sh.status(t, "committed"); got != "cancelled" {
				t.Fatalf("the shop's row after lapse's timeout cancel: %s, want cancelled by OnCancelled in the same commit", got)
			}
			if _, err := svc.Get(ctx, "rolled-back"); !errors.Is(err, lapse.ErrNotFound) {
				t.Fatalf("the rolled-back order: %v, want not found", err)
			}

			// Paid: lapse's PAID and the shop's "paid" in one commit.
			checkout("paid", time.Minute, true)
			tx := sh.begin(t, false)
			if _, err := svc.PayAttemptTx(ctx, tx.tx, "paid", "pay-paid"); err != nil {
				t.Fatal(err)
			}
			res, err := svc.NotifyTx(ctx, tx.tx, lapse.Notification{OrderID: "paid", PaymentID: "pay-paid", Status: lapse.PaymentSucceeded, AmountCents: 100})
			if err != nil || res.Outcome != store.OutcomePaid {
				t.Fatalf("NotifyTx: %+v %v", res, err)
			}
			if err := tx.commit(); err != nil { // OnPaid moved the shop's row in it
				t.Fatal(err)
			}
			if o, _ := svc.Get(ctx, "paid"); o.Status != order.Paid || sh.status(t, "paid") != "paid" {
				t.Fatalf("after the commit: lapse %s, shop %s", o.Status, sh.status(t, "paid"))
			}

			// A buyer cancel that rolls back changes nothing.
			checkout("kept", time.Minute, true)
			tx = sh.begin(t, false)
			if _, err := svc.CancelTx(ctx, tx.tx, "kept"); err != nil {
				t.Fatal(err)
			}
			tx.rollback()
			if got := status(t, svc, "kept"); got != order.Pending {
				t.Fatalf("after a rolled-back cancel: %s", got)
			}

			// A stale snapshot: the shop read at REPEATABLE READ, then lapse
			// cancelled the order in a transaction of its own.
			checkout("stale", time.Minute, true)
			tx = sh.begin(t, true)
			tx.exec("UPDATE orders_of_the_shop SET status = status WHERE id = ?", "none") // its first statement fixes the snapshot
			if _, err := svc.Cancel(ctx, "stale"); err != nil {
				t.Fatal(err)
			}
			_, err = svc.PayAttemptTx(ctx, tx.tx, "stale", "pay-stale")
			tx.rollback()
			switch {
			case lapse.IsRetryable(err):
				t.Logf("a pay on a stale snapshot: retryable (%v)", err)
				// Run again, the shop sees the order as it is.
				tx = sh.begin(t, true)
				_, err = svc.PayAttemptTx(ctx, tx.tx, "stale", "pay-stale")
				tx.rollback()
				if !errors.Is(err, lapse.ErrNotPending) {
					t.Fatalf("the retried pay: %v, want ErrNotPending", err)
				}
			case errors.Is(err, lapse.ErrNotPending):
				t.Logf("a pay on a stale snapshot: %v", err)
			default:
				t.Fatalf("a pay on a stale snapshot of a cancelled order: %v, want retryable or ErrNotPending", err)
			}
			if runs := sh.runs(t); runs["cancelled committed"] != 1 || runs["paid paid"] != 1 || runs["cancelled kept"] != 0 {
				t.Fatalf("committed hook runs %v, want one per committed transition", runs)
			}
			storetest.AuditOK(t, sh.store)
		})
	}
}

// A hook that fails for one order of a batch of timeout cancels delays only
// that order: the batch commits without it, each committed cancel's hook
// ran once, and the order is cancelled once its hook holds.
func TestEmbeddedHookFailureDelaysOnlyItsOrder(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T, func(string) error) shop{"postgres": postgresShop, "mysql": mysqlShop,
		"postgres/OnCancelledMany": postgresShopMany, "mysql/OnCancelledMany": mysqlShopMany} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var broken atomic.Bool
			broken.Store(true)
			sh := mk(t, func(id string) error {
				if id == "o-13" && broken.Load() {
					return errors.New("the shop's database refused it")
				}
				return nil
			})
			ctx := context.Background()
			svc := newService(t, lapse.Config{Store: sh.store, BatchSize: 200})
			storetest.Stock(t, sh.store, 200, "tee")
			const n = 200
			tx := sh.begin(t, false)
			for i := range n {
				id := fmt.Sprintf("o-%d", i)
				tx.exec("INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", id)
				if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
					AmountCents: 100, Timeout: 300 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			start(t, svc) // after the commit: the memory timers are seeded from the store, all due in one batch
			waitFor(t, 15*time.Second, "every order but o-13 cancelled", func() bool {
				for i := range n {
					if id := fmt.Sprintf("o-%d", i); id != "o-13" && status(t, svc, id) != order.Cancelled {
						return false
					}
				}
				return true
			})
			if got := status(t, svc, "o-13"); got != order.Pending || sh.status(t, "o-13") != "pending" {
				t.Fatalf("o-13 while its hook fails: lapse %s, shop %s; want both pending", got, sh.status(t, "o-13"))
			}
			if got := metric(t, svc, "lapse_hook_failures_total"); got < 1 {
				t.Fatalf("lapse_hook_failures_total = %v", got)
			}
			broken.Store(false)
			waitFor(t, 15*time.Second, "o-13 cancelled once its hook holds", func() bool { return status(t, svc, "o-13") == order.Cancelled })
			runs := sh.runs(t)
			for i := range n {
				id := fmt.Sprintf("o-%d", i)
				if runs["cancelled "+id] != 1 || sh.status(t, id) != "cancelled" {
					t.Fatalf("%s: %d committed OnCancelled runs, shop row %s; want 1 and cancelled", id, runs["cancelled "+id], sh.status(t, id))
				}
			}
			storetest.AuditOK(t, sh.store)
		})
	}
}

// With the sql timers (PollStore), an order created in a caller's
// transaction is cancelled at its deadline although the poller was nudged
// before the caller committed (the store could not show it to the poller's
// plan yet), and slept toward a deadline an hour away.
func TestEmbeddedPollStoreFindsAnOrderCommittedAfterItsNudge(t *testing.T) {
	t.Parallel()
	sh := postgresShop(t, never)
	ctx := context.Background()
	svc := newService(t, lapse.Config{Store: sh.store, PollStore: true, PollMaxSleep: time.Hour, SweepInterval: -1})
	storetest.Stock(t, sh.store, 10, "tee")
	start(t, svc)
	checkout := func(id string, timeout, hold time.Duration) {
		tx := sh.begin(t, false)
		defer tx.rollback()
		tx.exec("INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", id)
		if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
			AmountCents: 100, Timeout: timeout}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold) // the caller's transaction stays open a while after the nudge
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
	}
	checkout("far", time.Hour, 0)
	checkout("near", time.Second, 200*time.Millisecond)
	waitFor(t, 10*time.Second, "near cancelled at its deadline", func() bool { return status(t, svc, "near") == order.Cancelled })
	if o, _ := svc.Get(ctx, "near"); o.CancelledAt.Sub(o.CancelAfter) > 2*time.Second {
		t.Fatalf("near cancelled %s after its deadline", o.CancelledAt.Sub(o.CancelAfter))
	}
	if got := sh.status(t, "near"); got != "cancelled" {
		t.Fatalf("the shop's row: %s", got)
	}
}
