// Package mysql is lapse's store on MySQL 8.0+ and MariaDB 10.6+, through
// database/sql and github.com/go-sql-driver/mysql.
//
// Guarantees, as for every store (package store):
//
//   - Every transition is one conditional UPDATE … WHERE id = ? AND status = …
//     whose affected-row count decides; the winner reads its row back in the
//     same transaction (MySQL has no UPDATE … RETURNING).
//   - A timer batch is one transaction: its orders are locked
//     (SELECT … FOR UPDATE), cancelled, their stock released and ledgered and
//     their events written set-based; claim mode finds the batch itself with
//     FOR UPDATE SKIP LOCKED, so any number of instances can sweep at once.
//   - One clock decides (DESIGN.md §5). With Config.Clock set, every guard
//     compares against that clock's time, passed as a parameter. Without one,
//     each transaction reads the server's UTC_TIMESTAMP(3) once and uses it for
//     every guard and timestamp it writes, so lapse instances whose clocks
//     drift cannot cancel an order early.
//   - Deadlocks and lock-wait timeouts retry the whole transaction (Config.Retries).
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
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/sqlcount"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/store"
)

//go:embed migrations/*.sql queries.sql audit.sql
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

// Store is the MySQL/MariaDB implementation of store.Store.
type Store struct {
	db    *sql.DB
	clock clock.Clock // nil: the database's clock
	cfg   Config
	stmts *sqlcount.Counter // db's statements (Statements)
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
	return &Store{db: db, clock: cfg.Clock, cfg: cfg, stmts: stmts}, nil
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
func (s *Store) Close() error { return s.db.Close() }

// querier is what *sql.DB, *sql.Conn and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// now is the time every guard and timestamp of one transaction uses: the
// configured clock's, or else the database's, read once.
func (s *Store) now(ctx context.Context, db querier) (time.Time, error) {
	if s.clock != nil {
		return s.clock.Now().UTC().Truncate(time.Millisecond), nil
	}
	var t time.Time
	if err := db.QueryRowContext(ctx, q.Get("db_now")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t.UTC(), nil
}

// tx runs fn in one transaction, committed if fn returns nil. A deadlock or a
// lock-wait timeout anywhere in it rolls it back and runs fn again, up to
// Config.Retries times, so fn must start from scratch each time.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.tryTx(ctx, fn)
		if err == nil || !retryable(err) || attempt >= s.cfg.Retries {
			return err
		}
		// Back off a little, with jitter, so the transactions that collided
		// do not collide again in lockstep.
		wait := time.Duration(1<<min(attempt, 6)) * time.Millisecond
		wait += rand.N(wait)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (s *Store) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// MySQL and MariaDB error numbers the store interprets.
const (
	erDupEntry              = 1062 // ER_DUP_ENTRY: a primary or unique key refused a row
	erLockWaitTimeout       = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock          = 1213 // ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	erUnknownSystemVariable = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	erTableExists           = 1050 // ER_TABLE_EXISTS_ERROR
	erDupFieldName          = 1060 // ER_DUP_FIELDNAME
	erDupKeyName            = 1061 // ER_DUP_KEYNAME
	erCantDropFieldOrKey    = 1091 // ER_CANT_DROP_FIELD_OR_KEY
)

// errDuplicate marks a row refused by a primary or unique key.
var errDuplicate = errors.New("mysql: duplicate key")

// errLedgerRefused is a second ledger row of the same action for an order
// item: a release or commit that already happened. It rolls the transaction back.
var errLedgerRefused = errors.New("mysql: stock ledger already holds this action")

// interpretError maps a driver error to lapse's terms: a duplicate key
// becomes onDuplicate (a store sentinel or errLedgerRefused, chosen by the
// statement that hit it; errDuplicate when nil), keeping the driver's message.
// Other errors are returned as they are; retryable reads them.
func interpretError(err error, onDuplicate error) error {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return err
	}
	if me.Number == erDupEntry {
		if onDuplicate == nil {
			onDuplicate = errDuplicate
		}
		return fmt.Errorf("%w (%s)", onDuplicate, me.Message)
	}
	return err
}

// isDuplicate reports whether err is a duplicate-key refusal.
func isDuplicate(err error) bool {
	return errors.Is(interpretError(err, nil), errDuplicate)
}

// retryable reports whether err rolled back (or must roll back) a
// transaction that can simply run again: a deadlock or a lock-wait timeout.
func retryable(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == erLockDeadlock || me.Number == erLockWaitTimeout)
}
