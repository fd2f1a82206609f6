package mysql

// Embedded mode (docs/embedding.md): lapse on the caller's *sql.DB, and
// inside the caller's transactions.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse/internal/sqlcount"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// FromDB returns a Store on the caller's connection pool: lapse runs its own
// transactions and reads on db and never closes it (Close does nothing).
// lapse's statements rely on settings Open forces through its DSN; FromDB
// checks them on one connection and refuses a pool without them, naming
// the DSN parameter: parseTime=true, clientFoundRows=true (an UPDATE counts
// the rows it matched, not only those it changed), loc=UTC (the default),
// and a strict sql_mode (the server's default). lapse's own transactions
// begin at READ COMMITTED explicitly. cfg.URL, MaxConns, ConnectTimeout and
// LockWaitTimeout are ignored (the pool is configured already). The check
// takes at most cfg.ConnectTimeout (default 10 s).
func FromDB(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: FromDB: the pool is nil")
	}
	cfg.URL = "mysql://caller-pool/db"
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(cfg.ConnectTimeout, 10*time.Second))
	defer cancel()
	if err := checkSession(ctx, db); err != nil {
		return nil, fmt.Errorf("mysql: FromDB: %w", err)
	}
	s := &Store{db: db, cfg: cfg, stmts: &sqlcount.Counter{}, borrowed: true}
	s.Store = core.New(core.Config{
		Driver:      pool{executor: executor{db}, conns: db, isolation: sql.LevelReadCommitted},
		Clock:       cfg.Clock,
		Retries:     max(cfg.Retries, 0),
		CreateGroup: 1,
		Hooks:       cfg.Hooks.runner(),
	})
	return s, nil
}

// checkSession checks, on one connection of db, what lapse's statements
// rely on.
func checkSession(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var now time.Time
	if err := conn.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(3)").Scan(&now); err != nil {
		return fmt.Errorf("the pool must read DATETIME as time.Time: add parseTime=true to its DSN (%w)", err)
	}
	probe := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	var echoed string
	if err := conn.QueryRowContext(ctx, "SELECT CAST(? AS CHAR)", probe).Scan(&echoed); err != nil {
		return err
	}
	if !strings.HasPrefix(echoed, "2001-02-03 04:05:06") {
		return fmt.Errorf("the pool must send times in UTC: remove loc= from its DSN or set loc=UTC (a UTC time was sent as %q)", echoed)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.Contains(mode, "STRICT_TRANS_TABLES") && !strings.Contains(mode, "STRICT_ALL_TABLES") {
		return fmt.Errorf("the session's sql_mode %q is not strict: lapse needs STRICT_TRANS_TABLES (the server's default)", mode)
	}
	// clientFoundRows: an UPDATE that matches a row without changing it
	// must count it, or lapse reads "no row matched" for "nothing to change".
	if _, err := conn.ExecContext(ctx, "CREATE TEMPORARY TABLE lapse_found_rows_probe (x INT)"); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DROP TEMPORARY TABLE IF EXISTS lapse_found_rows_probe")
	if _, err := conn.ExecContext(ctx, "INSERT INTO lapse_found_rows_probe VALUES (1)"); err != nil {
		return err
	}
	r, err := conn.ExecContext(ctx, "UPDATE lapse_found_rows_probe SET x = 1")
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return errors.New("the pool must count matched rows: add clientFoundRows=true to its DSN")
	}
	return nil
}

// InTx binds lapse to the caller's open transaction: the store's …Tx
// methods (and lapse.Service's) run their statements on it, so lapse's rows
// commit with the caller's or not at all. lapse never commits, rolls back or
// retries it; an error leaves it to the caller, store.ErrRetryable when it
// lost a deadlock or a lock wait and can be run again. tx must be a
// transaction of the pool the store works on (FromDB), or of one with the
// same settings.
//
// Isolation: every transition is a guarded UPDATE, whose read of the row is
// the current one at any isolation level. At REPEATABLE READ (InnoDB's
// default) the caller's own plain SELECTs keep reading their snapshot, so
// after a lapse write they may show a stale order: use the order lapse
// returns, or a locking read (SELECT … FOR UPDATE).
func (s *Store) InTx(tx *sql.Tx) store.Tx {
	return s.Bind(callerTxn{executor{tx}, tx})
}

// callerTxn runs the statements on the caller's transaction. It is a
// core.ExecutorTx only in type: the core never ends a caller's transaction.
type callerTxn struct {
	executor
	tx *sql.Tx // for the hooks
}

var errCallerTx = errors.New("mysql: the caller's transaction is the caller's to end")

func (callerTxn) Commit(context.Context) error              { return errCallerTx }
func (callerTxn) Rollback(context.Context) error            { return errCallerTx }
func (callerTxn) Savepoint(context.Context) error           { return errCallerTx }
func (callerTxn) RollbackToSavepoint(context.Context) error { return errCallerTx }
func (callerTxn) ReleaseSavepoint(context.Context) error    { return errCallerTx }

var _ core.ExecutorTx = callerTxn{}
