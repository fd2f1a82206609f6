// Package mysql is lapse's store on MySQL 8.0+ and MariaDB 10.6+, through
// database/sql and github.com/go-sql-driver/mysql.
//
// It is a driver of package store/core, which holds the logic of every
// transaction once (which statements run in which order, what is decided in
// Go, the clock, retries, the ledger and outbox rows each transition leaves):
// this package supplies the statements (queries.sql, audit.sql), its
// connection pool, and what is particular to MySQL:
//
//   - No UPDATE … RETURNING: a guarded UPDATE whose affected-row count is 1
//     (matched rows: CLIENT_FOUND_ROWS) reads its order back in the same
//     transaction.
//   - A duplicate key fails the statement, not the transaction: an
//     idempotency key another request holds is found by its INSERT failing.
//   - A timer batch locks the orders it cancels (SELECT … FOR UPDATE; claim
//     mode with SKIP LOCKED, so any number of instances can sweep at once),
//     cancels them in one UPDATE and reads them back.
//   - Stock moves set-based, in UPDATEs whose join order MySQL chooses, so
//     the SKU rows are locked first, in primary-key order, by a locking read.
//   - The database's clock is UTC_TIMESTAMP(3). Deadlocks (1213) and
//     lock-wait timeouts (1205) class as retryable: the core runs the whole
//     transaction again (Config.Retries).
//   - One create per transaction: no group commit.
//
// Tables are InnoDB in utf8mb4_bin (identifiers compare byte for byte, as in
// the other stores), with times in DATETIME(3), UTC. The SQL lives in
// queries.sql, audit.sql and migrations/*.up.sql; lists (IN (…), multi-row
// VALUES) are expanded into placeholders only, at most 500 per statement.
//
// Sessions run at READ COMMITTED (no gap locks: inserts of new orders never
// wait behind a sweep, and rows a locking read does not match are released
// at once), with time_zone '+00:00', a strict sql_mode, CLIENT_FOUND_ROWS and
// server-side prepared statements (interpolateParams off). READ COMMITTED
// needs row-based or mixed binary logging where the binary log is on (the
// default on both servers). Audit alone runs at REPEATABLE READ, to see one
// snapshot.
package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/sqlcount"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
)

//go:embed migrations/*.sql migrations/legacy/*.sql queries.sql audit.sql
var files embed.FS

var (
	q           = sqlfile.MustLoad(files, "queries.sql")
	auditChecks = sqlfile.MustLoadOrdered(files, "audit.sql")
)

// Config configures the store.
type Config struct {
	// URL names the server and database: mysql://user:pass@host:3306/db?params.
	// Required. The port defaults to 3306; the query may carry options of the
	// go-sql-driver/mysql DSN (tls, charset, …) and session variables, except
	// those the store sets itself (see ParseURL).
	URL string
	// Clock is the one clock the guards compare against. Defaults to nil: the
	// database server's clock (UTC_TIMESTAMP(3), read once per transaction),
	// which is what production wants, since every instance then agrees. Tests
	// set a clock.Fake.
	Clock clock.Clock
	// MaxConns bounds the connection pool. Defaults to 16.
	MaxConns int
	// ConnectTimeout bounds dialling the server. Defaults to the URL's
	// timeout parameter, else 10 seconds.
	ConnectTimeout time.Duration
	// LockWaitTimeout is the sessions' innodb_lock_wait_timeout, rounded up to
	// whole seconds: how long a statement waits for a row lock before the
	// transaction is retried. Defaults to the URL's innodb_lock_wait_timeout
	// parameter, else 10 seconds (the server's default is 50).
	LockWaitTimeout time.Duration
	// Retries is how many times a transaction that hit a deadlock (1213) or a
	// lock-wait timeout (1205) is run again. Defaults to 5; -1 disables retries.
	Retries int
	// MigrateLockTimeout is how long Migrate waits for a migration running in
	// another process. Defaults to 1 minute.
	MigrateLockTimeout time.Duration
	// Hooks run an embedding service's code inside the transactions that
	// cancel or pay orders (see Hooks). Optional.
	Hooks Hooks
}

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = 16
	}
	if c.Retries == 0 {
		c.Retries = 5
	}
	if c.MigrateLockTimeout == 0 {
		c.MigrateLockTimeout = time.Minute
	}
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("mysql: Config.URL is required")
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("mysql: Config.MaxConns %d: want at least 1", c.MaxConns)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("mysql: Config.ConnectTimeout %v: want a positive duration", c.ConnectTimeout)
	}
	if c.LockWaitTimeout < 0 {
		return fmt.Errorf("mysql: Config.LockWaitTimeout %v: want a positive duration", c.LockWaitTimeout)
	}
	if c.Retries < -1 {
		return fmt.Errorf("mysql: Config.Retries %d: want -1 (none) or more", c.Retries)
	}
	if c.MigrateLockTimeout < 0 {
		return fmt.Errorf("mysql: Config.MigrateLockTimeout %v: want a positive duration", c.MigrateLockTimeout)
	}
	return nil
}

// Store is the MySQL/MariaDB implementation of store.Store: the core's
// transactions (package store/core) on this package's statements, plus
// Migrate, Ping, Close and Statements.
type Store struct {
	*core.Store
	db    *sql.DB
	cfg   Config
	stmts *sqlcount.Counter // db's statements (Statements)
	// borrowed: db is the caller's (FromDB), never closed here.
	borrowed bool
}

var _ store.Store = (*Store)(nil)

// sqlMode is strict, and includes ONLY_FULL_GROUP_BY so that a query that
// MySQL 8 (where it is the default) would refuse fails on MariaDB too.
const sqlMode = "'ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE," +
	"NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// ParseURL turns lapse's mysql://user:pass@host:3306/db?params into the
// driver's configuration, with the settings the store relies on forced:
// parseTime, UTC for time.Time values (truncated to milliseconds),
// interpolateParams off (server-side prepared statements), clientFoundRows
// (affected rows count matched rows, not changed rows) and the session
// variables time_zone '+00:00' and a strict sql_mode. Unless the URL says
// otherwise, the dial timeout is 10 seconds and innodb_lock_wait_timeout 10.
// Query parameters the driver does not know become session variables, as in
// its DSN. A socket=/path parameter connects through a Unix socket instead of TCP.
func ParseURL(u string) (*gomysql.Config, error) {
	pu, err := url.Parse(u)
	if err != nil {
		// url.Parse quotes the whole URL, password included: say less.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("mysql: parse URL: %w", err)
	}
	if pu.Scheme != "mysql" {
		return nil, fmt.Errorf("mysql: URL %s: want mysql://user:pass@host:3306/db", redact(pu))
	}
	db := strings.TrimPrefix(pu.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("mysql: URL %s: want one database name as the path", redact(pu))
	}
	query := pu.Query()
	socket := query.Get("socket")
	query.Del("socket")
	// The driver parses its own options (and passes unknown ones through as
	// session variables) from a DSN; user, password and address are set below,
	// so that no character in them can be misread as DSN syntax.
	cfg, err := gomysql.ParseDSN("/" + url.PathEscape(db) + "?" + query.Encode())
	if err != nil {
		return nil, fmt.Errorf("mysql: URL %s: %w", redact(pu), err)
	}
	cfg.DBName = db
	if pu.User != nil {
		cfg.User = pu.User.Username()
		cfg.Passwd, _ = pu.User.Password()
	}
	switch {
	case socket != "":
		cfg.Net, cfg.Addr = "unix", socket
	case pu.Host == "":
		return nil, fmt.Errorf("mysql: URL %s: no host", redact(pu))
	default:
		host := pu.Host
		if pu.Port() == "" {
			host += ":3306"
		}
		cfg.Net, cfg.Addr = "tcp", host
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = false
	cfg.ClientFoundRows = true
	cfg.MultiStatements = false
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if err := cfg.Apply(gomysql.TimeTruncate(time.Millisecond)); err != nil {
		return nil, fmt.Errorf("mysql: URL %s: %w", redact(pu), err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = sqlMode
	if _, ok := cfg.Params["innodb_lock_wait_timeout"]; !ok {
		cfg.Params["innodb_lock_wait_timeout"] = "10"
	}
	return cfg, nil
}

// redact is the URL without its password, for error messages.
func redact(u *url.URL) string {
	if _, has := u.User.Password(); has {
		c := *u
		c.User = url.UserPassword(u.User.Username(), "xxxxx")
		return c.String()
	}
	return u.String()
}

// Open connects to the database and checks that it answers. It does not
// migrate: call Migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dc, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout > 0 {
		dc.Timeout = cfg.ConnectTimeout
	}
	if cfg.LockWaitTimeout > 0 {
		dc.Params["innodb_lock_wait_timeout"] = fmt.Sprint(int64((cfg.LockWaitTimeout + time.Second - 1) / time.Second))
	}
	where := dc.Addr + "/" + dc.DBName

	// The isolation variable is transaction_isolation on MySQL 8 and MariaDB
	// 11.1+, tx_isolation on older MariaDB: ask the server which it knows.
	probe, err := connect(dc, 1, new(sqlcount.Counter))
	if err != nil {
		return nil, fmt.Errorf("mysql: open %s: %w", where, err)
	}
	isolationVar := "transaction_isolation"
	var level string
	err = probe.QueryRowContext(ctx, "SELECT @@transaction_isolation").Scan(&level)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erUnknownSystemVariable {
		isolationVar = "tx_isolation"
		err = nil
	}
	probe.Close()
	if err != nil {
		return nil, fmt.Errorf("mysql: open %s: %w", where, err)
	}
	dc.Params[isolationVar] = "'READ-COMMITTED'"

	stmts := &sqlcount.Counter{IsolationStatement: true} // the driver sends SET TRANSACTION ISOLATION LEVEL
	db, err := connect(dc, cfg.MaxConns, stmts)
	if err != nil {
		return nil, fmt.Errorf("mysql: open %s: %w", where, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: open %s: %w", where, err)
	}
	s := &Store{db: db, cfg: cfg, stmts: stmts}
	s.Store = core.New(core.Config{
		Driver:      pool{executor: executor{db}, conns: db},
		Clock:       cfg.Clock,
		Retries:     max(cfg.Retries, 0), // -1: none
		CreateGroup: 1,                   // no group commit: one create per transaction
		Hooks:       cfg.Hooks.runner(),
	})
	return s, nil
}

// connect opens a pool whose statements stmts counts.
func connect(dc *gomysql.Config, conns int, stmts *sqlcount.Counter) (*sql.DB, error) {
	conn, err := gomysql.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(stmts.Wrap(conn))
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(30 * time.Minute)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("mysql: ping: %w", err)
	}
	return nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	if s.borrowed {
		return nil // the caller's pool
	}
	return s.db.Close()
}
