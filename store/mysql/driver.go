package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// querier is what *sql.DB, *sql.Conn and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor implements core.Executor with the statements of queries.sql, on
// the pool (reads outside a transaction) or in one transaction: each
// statement is written once, for both. Its methods are in orders.go and
// stock.go.
type executor struct{ db querier }

// pool is the core.Driver: the executor of the connection pool, which begins
// transactions.
type pool struct {
	executor
	conns *sql.DB
	// isolation, when set, is asked of every transaction: a caller's pool
	// (FromDB) has the sessions' level the caller chose.
	isolation sql.IsolationLevel
}

var _ core.Driver = pool{}

// Begin implements core.Driver. Transactions run at the sessions' READ
// COMMITTED, but for the read-only snapshot of Audit: REPEATABLE READ (the
// driver sends SET TRANSACTION ISOLATION LEVEL before START TRANSACTION).
// Urgency means nothing here: InnoDB locks rows, not the database.
func (p pool) Begin(ctx context.Context, o core.TxOptions) (core.ExecutorTx, error) {
	var opts *sql.TxOptions
	switch {
	case o.ReadOnly:
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	case p.isolation != sql.LevelDefault:
		opts = &sql.TxOptions{Isolation: p.isolation}
	}
	t, err := p.conns.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return txn{executor{t}, t}, nil
}

// AuditChecks implements core.Driver: the queries of audit.sql, in file order.
func (pool) AuditChecks() []sqlfile.Query { return auditChecks }

// Class implements core.Driver: a deadlock or a lock-wait timeout can run
// again; any other error of the server refused a statement; anything else
// (the connection, the context) leaves the outcome unknown.
func (pool) Class(err error) core.ErrorClass {
	var me *gomysql.MySQLError
	switch {
	case !errors.As(err, &me):
		return core.ClassUnknown
	case me.Number == erLockDeadlock || me.Number == erLockWaitTimeout:
		return core.ClassRetry
	}
	return core.ClassRefused
}

// txn is the core.ExecutorTx of one transaction.
type txn struct {
	executor
	tx *sql.Tx
}

var _ core.ExecutorTx = txn{}

// Commit implements core.ExecutorTx.
func (t txn) Commit(context.Context) error { return t.tx.Commit() }

// Rollback implements core.ExecutorTx. database/sql takes no context for it;
// a transaction whose context was cancelled is already rolled back.
func (t txn) Rollback(context.Context) error { return t.tx.Rollback() }

// Savepoint implements core.ExecutorTx.
func (t txn) Savepoint(ctx context.Context) error { return t.run(ctx, "savepoint") }

// RollbackToSavepoint implements core.ExecutorTx.
func (t txn) RollbackToSavepoint(ctx context.Context) error { return t.run(ctx, "savepoint_rollback") }

// ReleaseSavepoint implements core.ExecutorTx.
func (t txn) ReleaseSavepoint(ctx context.Context) error { return t.run(ctx, "savepoint_release") }

// run runs the named query, which takes no parameters.
func (t txn) run(ctx context.Context, name string) error {
	_, err := t.tx.ExecContext(ctx, q.Get(name))
	return err
}

// MySQL and MariaDB error numbers the store interprets.
const (
	erDupEntry              = 1062 // ER_DUP_ENTRY: a primary or unique key refused a row
	erLockWaitTimeout       = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock          = 1213 // ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	erUnknownSystemVariable = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	erTableExists           = 1050 // ER_TABLE_EXISTS_ERROR
	erDupFieldName          = 1060 // ER_DUP_FIELDNAME
	erDupKeyName            = 1061 // ER_DUP_KEYNAME
	erCantDropFieldOrKey    = 1091 // ER_CANT_DROP_FIELD_OR_KEY
)

// interpretError maps a driver error to lapse's terms: no row becomes
// store.ErrNotFound, and a duplicate key onDuplicate (store.ErrOrderExists,
// core.ErrMovedTwice: what the statement that hit it means; left as it is
// when nil), still wrapping the server's error so that Class sees it. Other
// errors are returned as they are.
func interpretError(err error, onDuplicate error) error {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case onDuplicate != nil && isDuplicate(err):
		return fmt.Errorf("%w (%w)", onDuplicate, err)
	}
	return err
}

// isDuplicate reports whether err is a row refused by a primary or unique key.
func isDuplicate(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == erDupEntry
}
