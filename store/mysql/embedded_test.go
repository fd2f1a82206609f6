package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/storetest"
)

// callerPool opens a pool of a database of its own as a shop would, with
// its own DSN: go-sql-driver/mysql's defaults plus params.
func callerPool(t *testing.T, params map[string]string) *sql.DB {
	t.Helper()
	u, _ := emptyDatabase(t)
	pc, err := mysql.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	dc := gomysql.NewConfig()
	dc.User, dc.Passwd, dc.Net, dc.Addr, dc.DBName = pc.User, pc.Passwd, pc.Net, pc.Addr, pc.DBName
	dc.Params = params
	for k, v := range params {
		switch k {
		case "parseTime":
			dc.ParseTime = v == "true"
		case "clientFoundRows":
			dc.ClientFoundRows = v == "true"
		}
	}
	delete(dc.Params, "parseTime")
	delete(dc.Params, "clientFoundRows")
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16) // as a shop's pool would be bounded
	t.Cleanup(func() { db.Close() })
	return db
}

func embedded(t *testing.T, clk clock.Clock) (*mysql.Store, *sql.DB) {
	t.Helper()
	db := callerPool(t, map[string]string{"parseTime": "true", "clientFoundRows": "true"})
	s, err := mysql.FromDB(db, mysql.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, db
}

func callerBegin(s *mysql.Store, db *sql.DB, iso sql.IsolationLevel) storetest.Begin {
	return func(ctx context.Context) (store.Tx, func(context.Context) error, func(context.Context), error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
		if err != nil {
			return nil, nil, nil, err
		}
		return s.InTx(tx), func(context.Context) error { return tx.Commit() }, func(context.Context) { _ = tx.Rollback() }, nil
	}
}

// The whole conformance suite with lapse on the caller's pool (FromDB) and
// every transition in a transaction of the caller's own (InTx), at READ
// COMMITTED and at InnoDB's default REPEATABLE READ: a lost deadlock is
// store.ErrRetryable, run again by the caller, never a wrong state.
func TestConformanceEmbedded(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		t.Run(iso.String(), func(t *testing.T) {
			t.Parallel()
			storetest.Exercise(t, func(t *testing.T, clk clock.Clock) store.Store {
				s, db := embedded(t, clk)
				return storetest.InCallerTx(s, callerBegin(s, db, iso))
			})
		})
	}
}

// FromDB refuses a pool without the settings lapse's statements rely on,
// naming the DSN parameter to add.
func TestFromDBRefusesAPoolWithoutLapsesSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{"clientFoundRows": "true"}, "parseTime=true"},
		{map[string]string{"parseTime": "true"}, "clientFoundRows=true"},
		{map[string]string{"parseTime": "true", "clientFoundRows": "true", "sql_mode": "''"}, "not strict"},
	} {
		_, err := mysql.FromDB(callerPool(t, c.params), mysql.Config{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("FromDB on a pool with %v: %v, want an error naming %s", c.params, err, c.want)
		}
	}
}

// A create in a caller's transaction that rolls back leaves nothing of
// lapse's; one that commits is lapse's order beside the caller's own row.
// Close leaves the caller's pool open.
func TestCreateOrderTxCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := embedded(t, clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	if _, err := db.Exec("CREATE TABLE shop_orders (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, s, 1, "tee")
	checkout := func(id string, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec("INSERT INTO shop_orders (id, status) VALUES (?, 'pending')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateOrderTx(ctx, s.InTx(tx), store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
			AmountCents: 100, Currency: "EUR", Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkout("rolled-back", false)
	if _, err := s.GetOrder(ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back create: %v, want ErrNotFound", err)
	}
	if sku, _ := s.GetSKU(ctx, "tee"); sku.Available != 1 || sku.Locked != 0 {
		t.Fatalf("after a rolled-back create: %+v, want nothing held", sku)
	}
	checkout("committed", true)
	if o, err := s.GetOrder(ctx, "committed"); err != nil || o.Status != order.Pending {
		t.Fatalf("a committed create: %+v %v", o, err)
	}
	storetest.AuditOK(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's pool after Close: %v", err)
	}
}
