package sqlcount

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"
)

// A fake driver in the shape of go-sql-driver/mysql without interpolation:
// a statement with arguments is refused with ErrSkip, so database/sql
// prepares it and executes the prepared statement.

type fakeConnector struct {
	newConn func() driver.Conn
}

func (k fakeConnector) Connect(context.Context) (driver.Conn, error) { return k.newConn(), nil }
func (k fakeConnector) Driver() driver.Driver                        { return nil }

type fakeConn struct {
	columnConverter bool  // its statements have a ColumnConverter
	got             []any // the arguments its last statement received
}

func (c *fakeConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	switch {
	case len(args) > 0:
		return nil, driver.ErrSkip
	case query == "bad conn":
		return nil, driver.ErrBadConn
	case query == "fails":
		return nil, errors.New("refused by the server")
	}
	return driver.RowsAffected(1), nil
}

func (c *fakeConn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) > 0 {
		return nil, driver.ErrSkip
	}
	return fakeRows{}, nil
}

func (c *fakeConn) PrepareContext(context.Context, string) (driver.Stmt, error) {
	s := &fakeStmt{conn: c}
	if c.columnConverter {
		return fakeStmtConverter{s}, nil
	}
	return s, nil
}

func (c *fakeConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}
func (c *fakeConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return fakeTx{}, nil
}
func (c *fakeConn) Begin() (driver.Tx, error)          { return fakeTx{}, nil }
func (c *fakeConn) Close() error                       { return nil }
func (c *fakeConn) Ping(context.Context) error         { return nil }
func (c *fakeConn) ResetSession(context.Context) error { return nil }
func (c *fakeConn) IsValid() bool                      { return true }

// checkingConn accepts money arguments, which database/sql's default
// conversion refuses.
type checkingConn struct{ *fakeConn }

type money struct{ cents int64 }

func (checkingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if m, ok := nv.Value.(money); ok {
		nv.Value = m.cents
		return nil
	}
	return driver.ErrSkip
}

// pingless lacks driver.Pinger.
type pingless struct {
	driver.Conn
	driver.ConnBeginTx
}

type fakeStmt struct{ conn *fakeConn }

func (s *fakeStmt) ExecContext(_ context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.conn.got = nil
	for _, a := range args {
		s.conn.got = append(s.conn.got, a.Value)
	}
	return driver.RowsAffected(1), nil
}

func (s *fakeStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	return fakeRows{}, nil
}
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) { return driver.RowsAffected(1), nil }
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error)  { return fakeRows{}, nil }
func (s *fakeStmt) Close() error                               { return nil }
func (s *fakeStmt) NumInput() int                              { return -1 }

type fakeStmtConverter struct{ *fakeStmt }

func (fakeStmtConverter) ColumnConverter(int) driver.ValueConverter {
	return driver.DefaultParameterConverter
}

type fakeRows struct{}

func (fakeRows) Columns() []string         { return []string{"v"} }
func (fakeRows) Close() error              { return nil }
func (fakeRows) Next([]driver.Value) error { return io.EOF }

type fakeTx struct{}

func (fakeTx) Commit() error   { return nil }
func (fakeTx) Rollback() error { return nil }

// open returns a pool on the fake driver counting into c.
func open(t *testing.T, c *Counter, newConn func() driver.Conn) *sql.DB {
	t.Helper()
	db := sql.OpenDB(c.Wrap(fakeConnector{newConn: newConn}))
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestCounterCountsEachStatementOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var c Counter
	db := open(t, &c, func() driver.Conn { return &fakeConn{} })
	steps := []struct {
		what string
		do   func() error
		want int64
	}{
		{"a ping is not a statement", func() error { return db.PingContext(ctx) }, 0},
		{"an exec without arguments", func() error { _, err := db.ExecContext(ctx, "x"); return err }, 1},
		{"an exec the driver skips is prepared and executed: one statement", func() error {
			_, err := db.ExecContext(ctx, "x", 1)
			return err
		}, 1},
		{"a query the driver skips", func() error {
			rows, err := db.QueryContext(ctx, "x", 1)
			if err == nil {
				err = rows.Close()
			}
			return err
		}, 1},
		{"a statement the server refuses was sent", func() error {
			if _, err := db.ExecContext(ctx, "fails"); err == nil {
				return errors.New("no error")
			}
			return nil
		}, 1},
		{"a call refused with ErrBadConn never left", func() error {
			if _, err := db.ExecContext(ctx, "bad conn"); !errors.Is(err, driver.ErrBadConn) {
				return err
			}
			return nil
		}, 0},
		{"BEGIN, a statement and COMMIT", func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "x", 1); err != nil {
				return err
			}
			return tx.Commit()
		}, 3},
		{"BEGIN and ROLLBACK", func() error {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				return err
			}
			return tx.Rollback()
		}, 2},
		{"a statement prepared once and executed twice", func() error {
			st, err := db.PrepareContext(ctx, "x")
			if err != nil {
				return err
			}
			defer st.Close()
			if _, err := st.ExecContext(ctx, 1); err != nil {
				return err
			}
			_, err = st.ExecContext(ctx, 2)
			return err
		}, 2},
	}
	for _, s := range steps {
		before := c.Statements()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if got := c.Statements() - before; got != s.want {
			t.Errorf("%s: counted %d, want %d", s.what, got, s.want)
		}
	}
}

func TestCounterCountsTheIsolationStatementWhenTheDriverSendsOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := Counter{IsolationStatement: true}
	db := open(t, &c, func() driver.Conn { return &fakeConn{} })
	for _, tc := range []struct {
		opts *sql.TxOptions
		want int64
	}{
		{nil, 2},
		{&sql.TxOptions{ReadOnly: true}, 2},
		{&sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, 3},
	} {
		before := c.Statements()
		tx, err := db.BeginTx(ctx, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got := c.Statements() - before; got != tc.want {
			t.Errorf("BeginTx(%+v) and Rollback: counted %d, want %d", tc.opts, got, tc.want)
		}
	}
}

func TestCounterSharedByTwoPoolsAddsUp(t *testing.T) {
	t.Parallel()
	var c Counter
	w := open(t, &c, func() driver.Conn { return &fakeConn{} })
	r := open(t, &c, func() driver.Conn { return &fakeConn{} })
	for _, db := range []*sql.DB{w, r, w} {
		if _, err := db.ExecContext(t.Context(), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Statements(); got != 3 {
		t.Errorf("counted %d, want 3", got)
	}
}

// The wrapper must change nothing of how database/sql drives the connection.
func TestWrappedConnectionKeepsTheDriversArgumentChecks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	var c Counter
	plain := &fakeConn{}
	db := open(t, &c, func() driver.Conn { return plain })
	if _, err := db.ExecContext(ctx, "x", money{250}); err == nil {
		t.Error("a driver without a NamedValueChecker: money was accepted, but database/sql refuses it")
	}
	if _, err := db.ExecContext(ctx, "x", 7); err != nil || len(plain.got) != 1 || plain.got[0] != int64(7) {
		t.Errorf("default conversion: got %v, %v; want [7] as int64", plain.got, err)
	}

	checked := &fakeConn{}
	db = open(t, &c, func() driver.Conn { return checkingConn{checked} })
	if _, err := db.ExecContext(ctx, "x", money{250}); err != nil || len(checked.got) != 1 || checked.got[0] != int64(250) {
		t.Errorf("the connection's NamedValueChecker: got %v, %v; want [250]", checked.got, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "x", money{300}); err != nil || checked.got[0] != int64(300) {
		t.Errorf("in a transaction: got %v, %v; want [300]", checked.got, err)
	}
}

func TestWrappedConnectionHasExactlyTheDriversInterfaces(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, cc := range []bool{false, true} {
		var c Counter
		db := open(t, &c, func() driver.Conn { return &fakeConn{columnConverter: cc} })
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Raw(func(dc any) error {
			if _, ok := dc.(modernConn); !ok {
				t.Errorf("%T is not a complete connection", dc)
			}
			if u, ok := dc.(interface{ Unwrap() driver.Conn }); !ok {
				t.Error("no Unwrap")
			} else if _, ok := u.Unwrap().(*fakeConn); !ok {
				t.Errorf("Unwrap returned %T", u.Unwrap())
			}
			st, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, "x")
			if err != nil {
				return err
			}
			defer st.Close()
			//lint:ignore SA1019 the wrapper must forward the deprecated interface too
			if _, ok := st.(driver.ColumnConverter); ok != cc {
				t.Errorf("driver statement with a ColumnConverter %v, wrapped statement %v", cc, ok)
			}
			if _, ok := st.(modernStmt); !ok {
				t.Errorf("%T is not a complete statement", st)
			}
			return nil
		})
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestConnectRefusesAConnectionItCouldNotForwardFaithfully(t *testing.T) {
	t.Parallel()
	var c Counter
	db := open(t, &c, func() driver.Conn { return pingless{Conn: &fakeConn{}, ConnBeginTx: &fakeConn{}} })
	err := db.PingContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "sqlcount:") {
		t.Errorf("ping on a connection without Pinger through the wrapper: %v, want the wrapper's refusal", err)
	}
}
