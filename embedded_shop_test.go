package lapse_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/postgres"
)

// embeddedDB is a shop's database with lapse on the shop's own pool, for
// the tests that run the shop's statements from several goroutines or
// several processes: nothing in it calls t.Fatal, errors are returned.
type embeddedDB struct {
	driver string // "postgres" or "mysql"
	dsn    string // for a process of its own (embeddedChild)
	store  store.Store
	// begin opens a transaction of the shop's at READ COMMITTED, bound to
	// lapse (InTx).
	begin func(ctx context.Context) (shopConnTx, error)
	// exec runs one statement of the shop's outside a transaction; query
	// reads (the test's ? placeholders on both).
	exec  func(ctx context.Context, q string, args ...any) error
	query func(ctx context.Context, q string, args ...any) (rowsLike, error)
	// conflicts counts the statements, lapse's and the shop's alike, that
	// PostgreSQL failed with a deadlock or a serialization failure (40P01,
	// 40001), by a tracer on the pool; nil on MySQL, whose driver has none.
	conflicts *atomic.Int64
}

type shopConnTx struct {
	tx       store.Tx
	exec     func(ctx context.Context, q string, args ...any) error
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context)
}

// shopHook is a hook of the shop's, written once for both drivers: exec
// runs a statement (with ? placeholders) in the transaction lapse hands it.
type shopHook func(ctx context.Context, exec func(q string, args ...any) error, o order.Order) error

// guardedHook is the shop's hook of the docs: its row follows lapse's
// transition, guarded, and each committed run is counted in hook_runs.
func guardedHook(update, event string) shopHook {
	return func(ctx context.Context, exec func(string, ...any) error, o order.Order) error {
		if err := exec(update, o.ID); err != nil {
			return err
		}
		return exec(shopRun, o.ID, event)
	}
}

// newEmbeddedDB makes a new schema (PostgreSQL) or database (MariaDB) with
// lapse's tables migrated and the shop's orders_of_the_shop and hook_runs.
func newEmbeddedDB(t *testing.T, driver string, onCancelled, onPaid shopHook) embeddedDB {
	t.Helper()
	var dsn string
	switch driver {
	case "postgres":
		dsn = testdb.PostgresSchema(t)
	case "mysql":
		dc := testdb.MySQLDatabase(t)
		dc.ParseTime, dc.ClientFoundRows = true, true // what FromDB asks of a pool
		dsn = dc.FormatDSN()
	default:
		t.Fatalf("driver %q", driver)
	}
	db, err := connectEmbeddedDB(t, driver, dsn, onCancelled, onPaid)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ddl := []string{"CREATE TABLE orders_of_the_shop (id text PRIMARY KEY, status text NOT NULL)",
		"CREATE TABLE hook_runs (id text NOT NULL, event text NOT NULL)"}
	if driver == "mysql" {
		ddl = []string{"CREATE TABLE orders_of_the_shop (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)",
			"CREATE TABLE hook_runs (id VARCHAR(64) NOT NULL, event VARCHAR(16) NOT NULL)"}
	}
	for _, q := range ddl {
		if err := db.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// connectEmbeddedDB puts lapse on a new pool of the shop's on dsn, with the
// shop's hooks (nil: none); the pool is closed when t ends.
func connectEmbeddedDB(t testing.TB, driver, dsn string, onCancelled, onPaid shopHook) (embeddedDB, error) {
	switch driver {
	case "postgres":
		return connectPostgresShop(t, dsn, onCancelled, onPaid)
	case "mysql":
		return connectMySQLShop(t, dsn, onCancelled, onPaid)
	}
	return embeddedDB{}, fmt.Errorf("driver %q", driver)
}

func connectPostgresShop(t testing.TB, dsn string, onCancelled, onPaid shopHook) (embeddedDB, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return embeddedDB{}, err
	}
	conflicts := new(atomic.Int64)
	pc.ConnConfig.Tracer = conflictTracer{conflicts}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return embeddedDB{}, err
	}
	t.Cleanup(pool.Close)
	pgHook := func(h shopHook) func(context.Context, pgx.Tx, order.Order) error {
		if h == nil {
			return nil
		}
		return func(ctx context.Context, tx pgx.Tx, o order.Order) error {
			return h(ctx, func(q string, args ...any) error {
				_, err := tx.Exec(ctx, pgxPlaceholders(q), args...)
				return err
			}, o)
		}
	}
	st, err := postgres.FromPool(pool, postgres.Config{Hooks: postgres.Hooks{OnCancelled: pgHook(onCancelled), OnPaid: pgHook(onPaid)}})
	if err != nil {
		return embeddedDB{}, err
	}
	return embeddedDB{driver: "postgres", dsn: dsn, store: st, conflicts: conflicts,
		begin: func(ctx context.Context) (shopConnTx, error) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				return shopConnTx{}, err
			}
			return shopConnTx{tx: st.InTx(tx),
				exec: func(ctx context.Context, q string, args ...any) error {
					_, err := tx.Exec(ctx, pgxPlaceholders(q), args...)
					return err
				},
				commit:   func(ctx context.Context) error { return tx.Commit(ctx) },
				rollback: func(ctx context.Context) { _ = tx.Rollback(ctx) }}, nil
		},
		exec: func(ctx context.Context, q string, args ...any) error {
			_, err := pool.Exec(ctx, pgxPlaceholders(q), args...)
			return err
		},
		query: func(ctx context.Context, q string, args ...any) (rowsLike, error) {
			r, err := pool.Query(ctx, pgxPlaceholders(q), args...)
			return pgRows{r}, err
		},
	}, nil
}

func connectMySQLShop(t testing.TB, dsn string, onCancelled, onPaid shopHook) (embeddedDB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return embeddedDB{}, err
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	sqlHook := func(h shopHook) func(context.Context, *sql.Tx, order.Order) error {
		if h == nil {
			return nil
		}
		return func(ctx context.Context, tx *sql.Tx, o order.Order) error {
			return h(ctx, func(q string, args ...any) error {
				_, err := tx.ExecContext(ctx, q, args...)
				return err
			}, o)
		}
	}
	st, err := mysql.FromDB(db, mysql.Config{Hooks: mysql.Hooks{OnCancelled: sqlHook(onCancelled), OnPaid: sqlHook(onPaid)}})
	if err != nil {
		return embeddedDB{}, err
	}
	return embeddedDB{driver: "mysql", dsn: dsn, store: st,
		begin: func(ctx context.Context) (shopConnTx, error) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return shopConnTx{}, err
			}
			return shopConnTx{tx: st.InTx(tx),
				exec: func(ctx context.Context, q string, args ...any) error {
					_, err := tx.ExecContext(ctx, q, args...)
					return err
				},
				commit:   func(context.Context) error { return tx.Commit() },
				rollback: func(context.Context) { _ = tx.Rollback() }}, nil
		},
		exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		query: func(ctx context.Context, q string, args ...any) (rowsLike, error) {
			r, err := db.QueryContext(ctx, q, args...)
			return sqlRows{r}, err
		},
	}, nil
}

// conflictTracer counts the statements PostgreSQL failed with a deadlock or
// a serialization failure, whoever sent them on the pool.
type conflictTracer struct{ n *atomic.Int64 }

func (c conflictTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c conflictTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	c.count(d.Err)
}

func (c conflictTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c conflictTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.Err)
}

func (c conflictTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c conflictTracer) count(err error) {
	if isConflict(err) {
		c.n.Add(1)
	}
}

// isConflict reports a deadlock, a serialization failure or a lock-wait
// timeout from either database, however the error reached the caller.
func isConflict(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205
	}
	return false
}

// countWhere counts the rows of a query of one count(*).
func countWhere(ctx context.Context, db embeddedDB, q string, args ...any) (int, error) {
	rows, err := db.query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// shopStatuses reads the shop's rows: id → status.
func shopStatuses(t *testing.T, db embeddedDB) map[string]string {
	t.Helper()
	rows, err := db.query(context.Background(), "SELECT id, status FROM orders_of_the_shop")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// hookRuns counts the committed hook runs by "event id".
func hookRuns(t *testing.T, db embeddedDB) map[string]int {
	t.Helper()
	return countRuns(t, func() (rowsLike, error) {
		return db.query(context.Background(), "SELECT id, event FROM hook_runs")
	})
}

// innodbDeadlocks reads MariaDB's server-wide deadlock counter and the
// text of the latest deadlock it detected (SHOW ENGINE INNODB STATUS): the
// driver has no tracer, so a deadlock lapse lost and ran again is seen there.
func innodbDeadlocks(t *testing.T, db embeddedDB) (int64, string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.query(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var n int64
	for rows.Next() {
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	rows, err = db.query(ctx, "SHOW ENGINE INNODB STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var typ, file, status string
	for rows.Next() {
		if err := rows.Scan(&typ, &file, &status); err != nil {
			t.Fatal(err)
		}
	}
	latest := ""
	if i := strings.Index(status, "LATEST DETECTED DEADLOCK"); i >= 0 {
		latest = status[i:]
		if j := strings.Index(latest, "\nTRANSACTIONS\n"); j >= 0 {
			latest = latest[:j]
		}
	}
	return n, latest
}
