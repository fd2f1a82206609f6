package lapse_test

import (
	"context"
	"database/sql"
	"errors"
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
}

type shopTx struct {
	tx       store.Tx
	exec     func(query string, args ...any) // the shop's own statement, in the transaction
	commit   func() error
	rollback func()
}

func postgresShop(t *testing.T) shop {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := postgres.FromPool(pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		t.Fatal(err)
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
	}
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

func mysqlShop(t *testing.T) shop {
	dc := testdb.MySQLDatabase(t)
	dc.ParseTime, dc.ClientFoundRows = true, true // what lapse's FromDB asks of a pool
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	st, err := mysql.FromDB(db, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE orders_of_the_shop (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)"); err != nil {
		t.Fatal(err)
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
	}
}

// TestEmbedded runs the Service inside a shop's own transactions on
// PostgreSQL and MariaDB: a rolled-back checkout leaves nothing of lapse's
// and its timer does nothing; a committed one is cancelled on time; a
// payment and a buyer cancel commit with the shop's own row; a caller at
// REPEATABLE READ whose snapshot is stale gets a retryable error
// (PostgreSQL) or the truth (MariaDB's current reads), never a wrong state.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T) shop{"postgres": postgresShop, "mysql": mysqlShop} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sh := mk(t)
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
			tx.exec("UPDATE orders_of_the_shop SET status = 'paid' WHERE id = ? AND status = 'pending'", "paid")
			if err := tx.commit(); err != nil {
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
			storetest.AuditOK(t, sh.store)
		})
	}
}
