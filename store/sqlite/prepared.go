package sqlite

// Prepared statements on the writer.
//
// modernc.org/sqlite parses a statement sent as text on every call; a
// prepared one (a single statement) it keeps compiled and only resets. With
// one writer, every write transaction's parse is time the others wait: in
// `lapse bench --rate 2000 --pay-ratio 0.3` parsing was about a third of the
// writer's CPU. So once the schema is migrated, every query of queries.sql is
// prepared on the write connection, and the write transactions run them
// through database/sql's Tx.StmtContext, which reuses the connection's
// statement (and prepares it again on a new connection, should the writer's
// be replaced). Reads on the reader pool are unchanged.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// prepare prepares every query of queries.sql on the writer (after Migrate:
// they name its tables). Statements prepared before are closed.
func (s *Store) prepare(ctx context.Context) error {
	m := make(map[string]*sql.Stmt, len(q))
	for name, text := range q {
		st, err := s.w.PrepareContext(ctx, text)
		if err != nil {
			closeAll(m)
			return fmt.Errorf("prepare %s: %w", name, err)
		}
		m[text] = st
	}
	if old := s.prepared.Swap(&m); old != nil {
		closeAll(*old)
	}
	return nil
}

func closeAll(m map[string]*sql.Stmt) error {
	var errs []error
	for _, st := range m {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// preparedTx is a write transaction that runs the writer's prepared
// statements, and any other text as sent.
type preparedTx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt // by query text; nil before prepare
}

// ExecContext implements querier.
func (t preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.stmts[query]; st != nil {
		return t.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryContext implements querier.
func (t preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.stmts[query]; st != nil {
		return t.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext implements querier.
func (t preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.stmts[query]; st != nil {
		return t.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}
