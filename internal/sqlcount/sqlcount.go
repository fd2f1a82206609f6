// Package sqlcount counts the SQL statements a database/sql pool sends to its
// database, by wrapping the pool's driver.Connector.
//
// The count is taken at the driver rather than at the stores' call sites
// because every statement passes there: those of every helper, *sql.DB,
// *sql.Conn and *sql.Tx, and the BEGIN, COMMIT and ROLLBACK that database/sql
// issues itself. Counting at the call sites would need every one of them, now
// and later, to remember to count, and would still miss BEGIN and COMMIT.
//
// What is counted, once each, when the driver is asked to run it:
//
//   - an ExecContext or QueryContext on a connection, unless the driver
//     answers driver.ErrSkip (database/sql then prepares the statement and
//     executes that, which is counted: a prepared-then-executed statement is
//     one statement);
//   - each execution of a prepared statement;
//   - a BeginTx (BEGIN, START TRANSACTION), and one more when
//     Counter.IsolationStatement says the driver sets a non-default isolation
//     level with a statement of its own; a Commit; a Rollback.
//
// A call the driver refuses with driver.ErrBadConn is not counted: that error
// promises nothing reached the server, and database/sql retries the call on
// another connection, where it is counted. Other failures are counted: the
// statement was sent. Not counted: preparing and closing a prepared
// statement (steps of the one statement they serve), pings, and what a driver
// sends on its own while connecting (session setup). A string holding
// several statements (a migration) counts once.
//
// The wrapper must not change how database/sql drives the connection, and
// database/sql changes its behaviour on the optional interfaces a connection
// implements (a connection that is both a driver.SessionResetter and a
// driver.Validator is even kept after a cancelled transaction). So the
// wrapped connection implements exactly the interfaces the drivers lapse uses
// (modernc.org/sqlite, go-sql-driver/mysql) implement: the context-taking
// ones, Pinger, SessionResetter and Validator, which it requires (Connect
// fails on a connection without one, rather than silently drive it another
// way), and NamedValueChecker and ColumnConverter, which it forwards with the
// fallback database/sql itself would take. Results and rows are the driver's
// own, unwrapped.
package sqlcount

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// A Counter counts the statements sent through the connectors it wraps. Its
// zero value is ready to use; it must not be copied after its first Wrap.
type Counter struct {
	// IsolationStatement says the driver sends a statement of its own
	// (SET TRANSACTION ISOLATION LEVEL …, as go-sql-driver/mysql does) before
	// BEGIN when a transaction asks for a non-default isolation level.
	// Defaults to false (modernc.org/sqlite ignores the level). Set it before
	// the first Wrap.
	IsolationStatement bool

	n atomic.Int64
}

// Statements returns how many statements have been sent so far.
func (c *Counter) Statements() int64 { return c.n.Load() }

// Wrap returns a connector whose connections count their statements in c,
// for sql.OpenDB. Several connectors may share one Counter.
func (c *Counter) Wrap(dc driver.Connector) driver.Connector {
	return &connector{Connector: dc, c: c}
}

// sent counts n statements unless err says none was sent.
func (c *Counter) sent(n int64, err error) {
	if err == nil || (err != driver.ErrSkip && !errors.Is(err, driver.ErrBadConn)) {
		c.n.Add(n)
	}
}

// connector wraps the connections of the driver's connector; Driver is the
// driver's own.
type connector struct {
	driver.Connector
	c *Counter
}

func (k *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := k.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	mc, ok := dc.(modernConn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("sqlcount: %T lacks one of the interfaces database/sql would use: cannot count its statements without changing how it is driven", dc)
	}
	return &conn{real: mc, c: k.c}, nil
}

// Close closes the driver's connector if it has a Close, as sql.DB.Close
// would have.
func (k *connector) Close() error {
	if cl, ok := k.Connector.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// modernConn is what a connection must implement to be wrapped.
type modernConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// conn counts a connection's statements and forwards everything else.
type conn struct {
	real modernConn
	c    *Counter
}

var _ interface {
	modernConn
	driver.NamedValueChecker
} = (*conn)(nil)

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.real.ExecContext(ctx, query, args)
	c.c.sent(1, err)
	return r, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.real.QueryContext(ctx, query, args)
	c.c.sent(1, err)
	return r, err
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.real.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return c.stmt(s)
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	t, err := c.real.BeginTx(ctx, opts)
	n := int64(1)
	if c.c.IsolationStatement && opts.Isolation != 0 { // 0: sql.LevelDefault
		n++
	}
	c.c.sent(n, err)
	if err != nil {
		return nil, err
	}
	return &tx{real: t, c: c.c}, nil
}

// Prepare is driver.Conn's; database/sql calls PrepareContext.
func (c *conn) Prepare(query string) (driver.Stmt, error) {
	s, err := c.real.Prepare(query)
	if err != nil {
		return nil, err
	}
	return c.stmt(s)
}

// Begin is driver.Conn's; database/sql calls BeginTx.
func (c *conn) Begin() (driver.Tx, error) {
	t, err := c.real.Begin()
	c.c.sent(1, err)
	if err != nil {
		return nil, err
	}
	return &tx{real: t, c: c.c}, nil
}

func (c *conn) Close() error                                { return c.real.Close() }
func (c *conn) Ping(ctx context.Context) error              { return c.real.Ping(ctx) }
func (c *conn) ResetSession(ctx context.Context) error      { return c.real.ResetSession(ctx) }
func (c *conn) IsValid() bool                               { return c.real.IsValid() }
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error { return checkNamedValue(c.real, nv) }

// Unwrap returns the driver's connection, for code that reaches it through
// sql.Conn.Raw (modernc.org/sqlite's Limit looks for this method).
func (c *conn) Unwrap() driver.Conn { return c.real }

// checkNamedValue is v's NamedValueChecker, or else database/sql's next step.
func checkNamedValue(v any, nv *driver.NamedValue) error {
	if nvc, ok := v.(driver.NamedValueChecker); ok {
		return nvc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// modernStmt is what a prepared statement must implement to be wrapped.
type modernStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// stmt wraps a driver's prepared statement, with a ColumnConverter only when
// the driver's statement has one: database/sql treats a statement with one
// differently (it then skips the conversion of arguments past NumInput,
// which is -1 on modernc.org/sqlite).
func (c *conn) stmt(ds driver.Stmt) (driver.Stmt, error) {
	ms, ok := ds.(modernStmt)
	if !ok {
		ds.Close()
		return nil, fmt.Errorf("sqlcount: %T lacks StmtExecContext or StmtQueryContext: cannot count its statements without changing how it is driven", ds)
	}
	s := &stmt{real: ms, conn: c}
	//lint:ignore SA1019 a wrapper forwards what the wrapped driver's statement offers, deprecated or not
	if cc, ok := ds.(driver.ColumnConverter); ok {
		return &stmtConverter{stmt: s, cc: cc}, nil
	}
	return s, nil
}

type stmt struct {
	real modernStmt
	conn *conn
}

var _ interface {
	modernStmt
	driver.NamedValueChecker
} = (*stmt)(nil)

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.real.ExecContext(ctx, args)
	s.conn.c.sent(1, err)
	return r, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.real.QueryContext(ctx, args)
	s.conn.c.sent(1, err)
	return r, err
}

// Exec is driver.Stmt's; database/sql calls ExecContext.
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	r, err := s.real.Exec(args)
	s.conn.c.sent(1, err)
	return r, err
}

// Query is driver.Stmt's; database/sql calls QueryContext.
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	r, err := s.real.Query(args)
	s.conn.c.sent(1, err)
	return r, err
}

func (s *stmt) Close() error  { return s.real.Close() }
func (s *stmt) NumInput() int { return s.real.NumInput() }

// CheckNamedValue is the statement's checker, else its connection's, else
// database/sql's next step: the order database/sql looks for them in.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if nvc, ok := s.real.(driver.NamedValueChecker); ok {
		return nvc.CheckNamedValue(nv)
	}
	return checkNamedValue(s.conn.real, nv)
}

// stmtConverter is a stmt whose driver statement has a ColumnConverter.
type stmtConverter struct {
	*stmt
	cc driver.ColumnConverter //lint:ignore SA1019 forwarded from the wrapped driver's statement
}

func (s *stmtConverter) ColumnConverter(idx int) driver.ValueConverter {
	return s.cc.ColumnConverter(idx)
}

// tx counts COMMIT and ROLLBACK.
type tx struct {
	real driver.Tx
	c    *Counter
}

func (t *tx) Commit() error {
	err := t.real.Commit()
	t.c.sent(1, err)
	return err
}

func (t *tx) Rollback() error {
	err := t.real.Rollback()
	t.c.sent(1, err)
	return err
}
