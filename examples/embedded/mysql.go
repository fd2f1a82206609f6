package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
)

// mysqlSchema is the shop's own table (see pgSchema).
const mysqlSchema = `CREATE TABLE IF NOT EXISTS orders (
	id           VARCHAR(64) PRIMARY KEY,
	status       VARCHAR(16) NOT NULL,
	amount_cents BIGINT NOT NULL,
	pay_by       DATETIME(6) NOT NULL
) ENGINE=InnoDB`

// mysqlDB is the shop's database on MySQL or MariaDB: one database/sql pool
// for the shop and for lapse.
type mysqlDB struct {
	db    *sql.DB
	store *mysql.Store
}

// mysqlConfig turns mysql://user:pass@host:port/db into the driver's
// configuration, with what lapse's FromDB needs of a pool: parseTime (times
// as time.Time), clientFoundRows (an UPDATE counts the rows it matched) and
// loc UTC (the driver's default).
func mysqlConfig(rawURL string) (*gomysql.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse the mysql URL: %w", err)
	}
	c := gomysql.NewConfig()
	c.Net, c.Addr = "tcp", u.Host
	if u.Port() == "" {
		c.Addr += ":3306"
	}
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.DBName = strings.TrimPrefix(u.Path, "/")
	if c.DBName == "" {
		return nil, errors.New("the mysql URL names no database (mysql://user:pass@host:port/db)")
	}
	c.ParseTime, c.ClientFoundRows = true, true
	return c, nil
}

// openMySQL connects with c, sets up lapse on the shop's pool with the
// shop's hooks, and migrates lapse's tables and the shop's.
func openMySQL(ctx context.Context, c *gomysql.Config) (*mysqlDB, error) {
	conn, err := gomysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	st, err := mysql.FromDB(db, mysql.Config{Hooks: mysql.Hooks{
		OnCancelled: mysqlMark(statusCancelled),
		OnPaid:      mysqlMark(statusPaid),
	}})
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, mysqlSchema)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("set up mysql: %w", err)
	}
	return &mysqlDB{db: db, store: st}, nil
}

// mysqlMark is pgMark on MySQL: the guarded UPDATE, in lapse's transaction.
func mysqlMark(status string) func(context.Context, *sql.Tx, order.Order) error {
	return func(ctx context.Context, tx *sql.Tx, o order.Order) error {
		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = ? WHERE id = ? AND status = 'pending'`, status, o.ID)
		if err != nil {
			return fmt.Errorf("mark order %s %s: %w", o.ID, status, err)
		}
		return nil
	}
}

func (d *mysqlDB) inTx(ctx context.Context, fn func(shopTx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // after a commit, a no-op
	if err := fn(mysqlTx{tx: tx, store: d.store}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (d *mysqlDB) order(ctx context.Context, id string) (shopOrder, error) {
	o := shopOrder{ID: id}
	err := d.db.QueryRowContext(ctx, `SELECT status, amount_cents, pay_by FROM orders WHERE id = ?`, id).
		Scan(&o.Status, &o.AmountCents, &o.PayBy)
	if errors.Is(err, sql.ErrNoRows) {
		return shopOrder{}, errNoOrder
	}
	if err != nil {
		return shopOrder{}, fmt.Errorf("read order %s: %w", id, err)
	}
	return o, nil
}

func (d *mysqlDB) lapseStore() store.Store { return d.store }

func (d *mysqlDB) close() {
	_ = d.store.Close() // lapse's part: it leaves the shop's pool open
	_ = d.db.Close()
}

// mysqlTx is an open transaction of the shop's on MySQL.
type mysqlTx struct {
	tx    *sql.Tx
	store *mysql.Store
}

func (t mysqlTx) lapse() store.Tx { return t.store.InTx(t.tx) }

func (t mysqlTx) insertOrder(ctx context.Context, o shopOrder) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO orders (id, status, amount_cents, pay_by) VALUES (?, ?, ?, ?)`,
		o.ID, o.Status, o.AmountCents, o.PayBy)
	var myErr *gomysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == 1062 { // ER_DUP_ENTRY
		return errDuplicate
	}
	if err != nil {
		return fmt.Errorf("insert order %s: %w", o.ID, err)
	}
	return nil
}
