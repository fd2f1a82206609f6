package postgres

// The executor: one method per statement of queries.sql (or per statements
// that always run together, pipelined in one pgx.Batch), on the pool for
// reads outside a transaction or on one transaction. Every decision is
// store/core's; what is PostgreSQL's is here and in orders.go, stock.go and
// group.go: lists as one array parameter, RETURNING, batches, FOR UPDATE, and
// what the server's errors mean.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// querier is what *pgxpool.Pool and pgx.Tx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// executor runs the statements on db: the pool or one transaction. Its
// errors leave it mapped by interpretError.
type executor struct{ db querier }

var _ core.Executor = executor{}

// exec runs the named statement and returns its command tag.
func (e executor) exec(ctx context.Context, name string, args ...any) (pgconn.CommandTag, error) {
	tag, err := e.db.Exec(ctx, q.Get(name), args...)
	return tag, interpretError(err)
}

// scan runs the named query and scans its one row into dest;
// store.ErrNotFound when there is none.
func (e executor) scan(ctx context.Context, name string, args []any, dest ...any) error {
	return interpretError(e.db.QueryRow(ctx, q.Get(name), args...).Scan(dest...))
}

// send runs the statements queued on b in one round trip.
func (e executor) send(ctx context.Context, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return interpretError(e.db.SendBatch(ctx, b).Close())
}

// DBNow implements core.Executor.
func (e executor) DBNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := e.scan(ctx, "db_now", nil, &t); err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// driver is the core.Driver: the executor on the pool.
type driver struct {
	executor
	pool *pgxpool.Pool
}

var _ core.Driver = (*driver)(nil)

// Begin implements core.Driver: READ COMMITTED, or for the audit a
// read-only REPEATABLE READ snapshot. It takes a connection of the pool and
// holds the BEGIN until the first statement, to lead its pipeline (pgTx).
func (d *driver) Begin(ctx context.Context, o core.TxOptions) (core.ExecutorTx, error) {
	begin := beginReadCommitted
	if o.ReadOnly {
		begin = beginSnapshot
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx := &pgTx{conn: conn, begin: begin}
	return txExecutor{executor{tx}, tx}, nil
}

// AuditChecks implements core.Driver.
func (d *driver) AuditChecks() []sqlfile.Query { return auditChecks }

// PostgreSQL error codes the driver acts on.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// Class implements core.Driver: a deadlock or a serialization failure can
// run again; any other error the server sent refused a statement, and the
// transaction wrote nothing; anything else (the connection, the context)
// leaves a COMMIT's outcome unknown.
func (d *driver) Class(err error) core.ErrorClass {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
		return core.ClassUnknown
	case pe.Code == codeSerializationFailure || pe.Code == codeDeadlockDetected:
		return core.ClassRetry
	}
	return core.ClassRefused
}

// interpretError maps the database's errors to lapse's sentinels (a
// duplicate order id, a payment id the order already used, a second ledger
// row); any other error is returned as it is. A mapped server error stays in the chain, so
// Class still sees that the server refused the statement (a group holding an
// existing order id falls back to lone creates).
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeUniqueViolation {
		return err
	}
	switch pe.ConstraintName {
	case "lapse_orders_pkey":
		return refused{store.ErrOrderExists, err}
	case "lapse_orders_reservation":
		return refused{store.ErrReservationUsed, err}
	case "lapse_payments_pkey", "lapse_payments_payment_id_unique":
		return refused{store.ErrPaymentIDUsed, err}
	case "lapse_stock_ledger_pkey", "lapse_stock_tasks_reservation_action":
		return fmt.Errorf("%w: %w", core.ErrMovedTwice, err)
	}
	return err
}

// refused is a server error answered with a sentinel of lapse: it reads as
// the sentinel and unwraps to both.
type refused struct{ sentinel, cause error }

func (r refused) Error() string   { return r.sentinel.Error() }
func (r refused) Unwrap() []error { return []error{r.sentinel, r.cause} }

// txExecutor is the core.ExecutorTx and core.GroupExecutor: the executor
// in one transaction.
type txExecutor struct {
	executor
	tx *pgTx
}

var (
	_ core.ExecutorTx       = txExecutor{}
	_ core.GroupExecutor    = txExecutor{}
	_ core.DueClockExecutor = txExecutor{}
	_ core.EffectsCommitter = txExecutor{}
)

// Commit implements core.ExecutorTx.
func (t txExecutor) Commit(ctx context.Context) error {
	return interpretError(t.tx.commitWith(ctx, &pgx.Batch{}))
}

// CommitEffects implements core.EffectsCommitter: the effects and COMMIT in
// one round trip.
func (t txExecutor) CommitEffects(ctx context.Context, e core.Effects) error {
	var b pgx.Batch
	queueEffects(&b, e)
	return interpretError(t.tx.commitWith(ctx, &b))
}

// Rollback implements core.ExecutorTx, on a context already cancelled too.
func (t txExecutor) Rollback(ctx context.Context) error {
	return t.tx.rollback(context.WithoutCancel(ctx))
}

// Savepoint implements core.ExecutorTx. PostgreSQL creates groups with
// LockGroup and WriteGroup instead; the savepoints are there for the core's
// general path.
func (t txExecutor) Savepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "savepoint")
	return err
}

// RollbackToSavepoint implements core.ExecutorTx.
func (t txExecutor) RollbackToSavepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "rollback_to_savepoint")
	return err
}

// ReleaseSavepoint implements core.ExecutorTx.
func (t txExecutor) ReleaseSavepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "release_savepoint")
	return err
}
