// Package sqlite is lapse's embedded store: SQLite in WAL mode through the
// pure-Go modernc.org/sqlite driver, so `lapse serve` needs no server.
//
// SQLite has one writer at a time. The store keeps one write connection (every
// transaction starts with BEGIN IMMEDIATE on it, so writers queue in Go rather
// than failing with SQLITE_BUSY) and a small pool of read connections, which
// WAL lets run beside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/group"
	"github.com/lapsehq/lapse/internal/migrate"
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
	// Path is the database file. Required.
	Path string
	// Clock is the one clock the guards compare against. Defaults to the wall clock.
	Clock clock.Clock
	// Synchronous is SQLite's synchronous pragma. Defaults to FULL: a commit
	// survives a power loss, not just a process crash. NORMAL trades that for speed.
	Synchronous string
	// Readers is the number of read connections. Defaults to 4.
	Readers int
	// CreateGroup is the most creates committed in one transaction when they
	// arrive together (group commit, see group.go). Defaults to 32; 1 gives
	// every create a transaction of its own.
	CreateGroup int
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Synchronous == "" {
		c.Synchronous = "FULL"
	}
	if c.Readers == 0 {
		c.Readers = 4
	}
	if c.CreateGroup == 0 {
		c.CreateGroup = DefaultCreateGroup
	}
}

// DefaultCreateGroup is Config.CreateGroup's default: a group holds the one
// writer while it runs, so it is kept short enough (a few ms) for a timeout
// cancel waiting behind it.
const DefaultCreateGroup = 32

func (c *Config) validate() error {
	if c.Path == "" {
		return errors.New("sqlite: Config.Path is required")
	}
	switch strings.ToUpper(c.Synchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return fmt.Errorf("sqlite: Config.Synchronous %q: want OFF, NORMAL, FULL or EXTRA", c.Synchronous)
	}
	if c.Readers < 1 {
		return fmt.Errorf("sqlite: Config.Readers %d: want at least 1", c.Readers)
	}
	return nil
}

// Store is the SQLite implementation of store.Store.
type Store struct {
	w      *sql.DB // the single writer
	r      *sql.DB // readers
	clock  clock.Clock
	writer writer                    // who gets w next
	stmts  *sqlcount.Counter         // both pools' statements (Statements)
	groups *group.Queue[*createCall] // nil: every create alone

	groupsRun, grouped atomic.Int64 // groups committed, the orders they held
}

var _ store.Store = (*Store)(nil)

// ParseURL turns sqlite://lapse.db (relative) or sqlite:///var/lib/lapse.db
// (absolute) into a file path.
func ParseURL(u string) (string, error) {
	rest, ok := strings.CutPrefix(u, "sqlite://")
	if !ok {
		return "", fmt.Errorf("sqlite: %q: want sqlite://path", u)
	}
	if rest == "" {
		return "", fmt.Errorf("sqlite: %q: no file path", u)
	}
	p, err := url.PathUnescape(rest)
	if err != nil {
		return "", fmt.Errorf("sqlite: %q: %w", u, err)
	}
	return p, nil
}

// Open opens (creating if needed) the database file. It does not migrate:
// call Migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dsn := func(extra string) string {
		v := url.Values{}
		v.Add("_pragma", "journal_mode(WAL)")
		v.Add("_pragma", "busy_timeout(10000)")
		v.Add("_pragma", "synchronous("+strings.ToUpper(cfg.Synchronous)+")")
		v.Add("_pragma", "foreign_keys(ON)")
		v.Set("_txlock", "immediate")
		if extra != "" {
			v.Add("_pragma", extra)
		}
		return "file:" + cfg.Path + "?" + v.Encode()
	}
	stmts := new(sqlcount.Counter)
	open := func(dsn string) (*sql.DB, error) {
		c, err := sqlite.NewConnector(dsn)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(stmts.Wrap(c)), nil
	}
	w, err := open(dsn(""))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	r, err := open(dsn("query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	r.SetMaxOpenConns(cfg.Readers)
	r.SetMaxIdleConns(cfg.Readers)
	s := &Store{w: w, r: r, clock: cfg.Clock, stmts: stmts}
	if cfg.CreateGroup > 1 {
		s.groups = group.New(cfg.CreateGroup, s.createGroup)
	}
	return s, nil
}

// Ping implements store.Store: both pools must answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping writer: %w", err)
	}
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping reader: %w", err)
	}
	return nil
}

// Close closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

// Migrate applies the embedded migrations not yet applied, each in its own
// transaction (SQLite's DDL is transactional: a failed step leaves nothing).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	for _, m := range ms {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, s.clock.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// tx runs fn in one write transaction, committed if fn returns nil.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.txp(ctx, false, fn)
}

// txp is tx with a priority: urgent transactions (timeout cancels) get the
// write connection before the others waiting for it.
func (s *Store) txp(ctx context.Context, urgent bool, fn func(tx *sql.Tx) error) error {
	if err := s.writer.lock(ctx, urgent); err != nil {
		return fmt.Errorf("wait for the writer: %w", err)
	}
	defer s.writer.unlock()
	tx, err := s.w.BeginTx(ctx, nil)
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

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// isUniqueViolation reports whether err is a primary-key or unique constraint failure.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
