package postgres

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
)

// Statements returns how many SQL statements the store has sent to
// PostgreSQL since Open (it implements bench.StatementCounter): every Exec,
// Query and QueryRow, and every query of a batch, once each. BEGIN, COMMIT
// and ROLLBACK count too, alone or in the batch they lead or end (pgTx). Not counted: the
// protocol steps pgx takes on its own (the Parse/Describe that prepares a
// statement the first time a connection runs it, the DEALLOCATE of
// statements a schema change invalidated), pings (the pool's checks of idle
// connections included) and the session setup of a new connection.
func (s *Store) Statements() int64 { return s.stmts.n.Load() }

// RoundTrips returns how many round trips of statements the store has made
// since Open: a lone statement is one, a batch (pipeline) is one, whatever
// it holds. Not counted, as for Statements: the Parse/Describe round trip
// that prepares a statement a connection runs for the first time, pings and
// session setup.
func (s *Store) RoundTrips() int64 { return s.stmts.trips.Load() }

// statementCounter is a pgx tracer that counts statements: a query at its
// start (so a failed one counts: it was sent), a batch's queries one by one
// as their results are read (a batch stopped by an error counts the queries
// up to the failed one; the server ran no more).
type statementCounter struct{ n, trips atomic.Int64 }

// countStatements installs a statementCounter on cc, after any tracer
// already there, which keeps tracing everything it did.
func countStatements(cc *pgx.ConnConfig) *statementCounter {
	c := new(statementCounter)
	if cc.Tracer == nil {
		cc.Tracer = c
	} else {
		// multitracer forwards each of pgx's tracer interfaces (batch,
		// copy, prepare, connect, pool) to the tracers that implement it.
		cc.Tracer = multitracer.New(cc.Tracer, c)
	}
	return c
}

var (
	_ pgx.QueryTracer = (*statementCounter)(nil)
	_ pgx.BatchTracer = (*statementCounter)(nil)
)

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.trips.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
