package postgres

// Embedded mode (docs/embedding.md): lapse on the caller's pool, and inside
// the caller's transactions.

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

// FromPool returns a Store on the caller's pool: lapse runs its own
// transactions (timeout cancels, the relay, the dispatcher) and reads on it,
// and never closes it — Close does nothing, the pool is the caller's. The
// pool's connections must not change the session's default transaction
// isolation away from READ COMMITTED for lapse's own transactions to keep
// their guarantees: lapse begins them at READ COMMITTED explicitly.
// cfg.URL and cfg.MaxConns are ignored (the pool says where and how many).
// Statements and RoundTrips count nothing on such a store.
func FromPool(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: FromPool: the pool is nil")
	}
	cfg.URL, cfg.MaxConns = "postgres://caller-pool", 0
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cc := core.Config{Driver: &driver{executor{pool}, pool}, Clock: cfg.Clock, Retries: cfg.Retries, CreateGroup: cfg.CreateGroup,
		Hooks: cfg.Hooks.runner(), TellDeadlines: !cfg.DisableDueNotify}
	return &Store{Store: core.New(cc), stmts: &statementCounter{}, cfg: cc, borrowed: true, pool: pool}, nil
}

// InTx binds lapse to the caller's open transaction: the store's …Tx
// methods (and lapse.Service's) run their statements on it, so lapse's rows
// commit with the caller's or not at all. lapse never commits, rolls back or
// retries it; an error leaves it to the caller (PostgreSQL has aborted it
// anyway), store.ErrRetryable when it lost a serialization or deadlock
// conflict and can be run again. tx must belong to the database the store
// works on (the same schema).
//
// A create (CreateOrderTx) is one round trip: a savepoint
// (lapse_create_order) and the create's one statement, pipelined. A create
// lapse refuses (short of stock, the order id taken) or the server refuses
// is rolled back to that savepoint in one more round trip; one its
// idempotency key answers (a replay, or another request's key) writes
// nothing. Either way nothing of it is left and the transaction goes on. The
// savepoint stays until the transaction ends.
//
// Isolation: at READ COMMITTED (PostgreSQL's default) every transition is
// its guarded UPDATE, as in lapse's own transactions. At REPEATABLE READ or
// SERIALIZABLE a row another transaction changed since the caller's
// snapshot makes the UPDATE fail with a serialization error: ErrRetryable,
// never a wrong state.
func (s *Store) InTx(tx pgx.Tx) store.Tx {
	return s.Bind(callerExecutor{executor{tx}, tx})
}

// callerExecutor runs the statements on the caller's transaction. It is a
// core.ExecutorTx only in type: the core never ends a caller's transaction.
type callerExecutor struct {
	executor
	tx pgx.Tx // for the hooks
}

var errCallerTx = errors.New("postgres: the caller's transaction is the caller's to end")

func (callerExecutor) Commit(context.Context) error              { return errCallerTx }
func (callerExecutor) Rollback(context.Context) error            { return errCallerTx }
func (callerExecutor) Savepoint(context.Context) error           { return errCallerTx }
func (callerExecutor) RollbackToSavepoint(context.Context) error { return errCallerTx }
func (callerExecutor) ReleaseSavepoint(context.Context) error    { return errCallerTx }

var _ core.ExecutorTx = callerExecutor{}

// IsSerializationFailure reports whether err is PostgreSQL's serialization
// failure or deadlock (40001, 40P01): a transaction that can run again. A
// caller's own COMMIT at REPEATABLE READ or SERIALIZABLE can fail so too.
func IsSerializationFailure(err error) bool {
	return (&driver{}).Class(err) == core.ClassRetry
}
