package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Transaction control, sent as statements of their own (BEGIN may lead a
// pipeline: see pgTx).
const (
	beginReadCommitted = "BEGIN ISOLATION LEVEL READ COMMITTED"
	beginSnapshot      = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
)

// pgTx is a transaction on one connection of the pool whose BEGIN is held
// until its first statement, and sent in the same round trip when that
// statement is a batch: a pipeline of BEGIN and the batch, one Sync. (A
// BEGIN inside a pipeline's implicit transaction turns it into the explicit
// transaction that goes on after the Sync.) A lone statement first sends the
// BEGIN in a round trip of its own, as pgx.Tx does. Commit with a batch
// (commitWith) sends the batch and COMMIT together. The connection goes back
// to the pool when the transaction ends; the pool drops it if a failure left
// it inside a transaction.
type pgTx struct {
	conn  *pgxpool.Conn
	begin string // the BEGIN not sent yet; "" once sent
	ended bool
}

var _ querier = (*pgTx)(nil)

// started sends the BEGIN if it is still held.
func (t *pgTx) started(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if t.begin == "" {
		return nil
	}
	begin := t.begin
	t.begin = ""
	if _, err := t.conn.Exec(ctx, begin); err != nil {
		// No statement may run outside the transaction: end it here.
		t.end()
		return err
	}
	return nil
}

// Exec implements querier.
func (t *pgTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.started(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

// Query implements querier.
func (t *pgTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.started(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow implements querier.
func (t *pgTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.started(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

// SendBatch implements querier: a held BEGIN leads the batch.
func (t *pgTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.ended {
		return errBatch{err: pgx.ErrTxClosed}
	}
	if t.begin != "" {
		b = &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: t.begin}}, b.QueuedQueries...)}
		t.begin = ""
	}
	return t.conn.SendBatch(ctx, b)
}

// commitWith sends the statements of b and COMMIT in one round trip (COMMIT
// alone when b is empty; nothing when no statement was ever sent) and ends
// the transaction. A COMMIT that the server answers with ROLLBACK (the
// transaction had failed) is pgx.ErrTxCommitRollback, as pgx.Tx reports it.
func (t *pgTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if t.begin != "" && b.Len() == 0 {
		t.end()
		return nil
	}
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	err := t.SendBatch(ctx, b).Close()
	if err != nil {
		// Whatever failed, leave no transaction open on the connection.
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	t.end()
	return err
}

// rollback ends the transaction, rolling back what it sent.
func (t *pgTx) rollback(ctx context.Context) error {
	if t.ended {
		return nil
	}
	var err error
	if t.begin == "" {
		_, err = t.conn.Exec(ctx, "ROLLBACK")
	}
	t.end()
	return err
}

func (t *pgTx) end() {
	t.ended = true
	t.conn.Release()
}

// errRow is a pgx.Row that failed before it was sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is a pgx.BatchResults that failed before it was sent (the
// embedded interface, nil, only completes the method set).
type errBatch struct {
	pgx.BatchResults
	err error
}

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }

var errNoClock = errors.New("postgres: the cancel statement returned no clock")
