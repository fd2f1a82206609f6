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
	"io/fs"
	"net/url"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"modernc.org/sqlite"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/migrate"
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
	// Path is the database file. Required.
	Path string
	// Clock is the one clock the guards compare against. Defaults to the wall clock.
	Clock clock.Clock
	// Synchronous is SQLite's synchronous pragma. Defaults to FULL: a commit
	// survives a power loss, not just a process crash. NORMAL trades that for speed.
	Synchronous string
	// Readers is the number of read connections. Defaults to 4.
	Readers int
	// ReadOnly opens an existing file for reading only (lapse audit): a
	// missing file is an error, not a new database; the file is opened with
	// SQLite's mode=ro, and every write is refused. SQLite may still create
	// the -wal and -shm files beside a WAL database, as any reader does.
	ReadOnly bool
	// CreateGroup is the most creates committed in one transaction when they
	// arrive together (group commit, see group.go). Defaults to 32; 1 gives
	// every create a transaction of its own.
	CreateGroup int
	// PaymentGroup is the most payment starts and reports committed in one
	// transaction when they arrive together (store/core's paygroup.go).
	// Defaults to DefaultCreateGroup; 1 gives each a transaction of its own.
	PaymentGroup int
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
	if c.PaymentGroup == 0 {
		c.PaymentGroup = DefaultCreateGroup
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

// Store is the SQLite implementation of store.Store: store/core's
// transactions on the driver below.
type Store struct {
	*core.Store
	w      *sql.DB // the single writer
	r      *sql.DB // readers
	clock  clock.Clock
	writer writer            // who gets w next
	stmts  *sqlcount.Counter // both pools' statements (Statements)
	// readOnly: opened with Config.ReadOnly; w is nil and writes are refused.
	readOnly bool
	// prepared holds queries.sql prepared on w, by text (prepared.go); nil
	// until Migrate.
	prepared atomic.Pointer[map[string]*sql.Stmt]
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
	if cfg.ReadOnly {
		return openReadOnly(ctx, cfg)
	}
	dsn := func(extra string) string {
		v := url.Values{}
		v.Add("_pragma", "journal_mode(WAL)")
		v.Add("_pragma", "busy_timeout(10000)")
		v.Add("_pragma", "synchronous("+strings.ToUpper(cfg.Synchronous)+")")
		v.Add("_pragma", "foreign_keys(ON)")
		// Savepoints' sub-journals (one per create or payment of a group)
		// in memory, not spilled to a temporary file: in a group that file
		// was a write syscall per page changed, on the one writer.
		v.Add("_pragma", "temp_store(MEMORY)")
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
	s.Store = core.New(core.Config{Driver: driver{executor: executor{db: r, clock: cfg.Clock}, s: s}, Clock: cfg.Clock,
		CreateGroup: cfg.CreateGroup, PaymentGroup: cfg.PaymentGroup})
	return s, nil
}

// errReadOnly refuses a write to a store opened with Config.ReadOnly.
var errReadOnly = errors.New("sqlite: the store is open read-only")

// openReadOnly opens an existing file with readers only (Config.ReadOnly).
func openReadOnly(ctx context.Context, cfg Config) (*Store, error) {
	if _, err := os.Stat(cfg.Path); err != nil {
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", cfg.Path, err)
	}
	v := url.Values{}
	v.Set("mode", "ro")
	v.Add("_pragma", "busy_timeout(10000)")
	v.Add("_pragma", "query_only(1)")
	stmts := new(sqlcount.Counter)
	c, err := sqlite.NewConnector("file:" + cfg.Path + "?" + v.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", cfg.Path, err)
	}
	r := sql.OpenDB(stmts.Wrap(c))
	r.SetMaxOpenConns(cfg.Readers)
	r.SetMaxIdleConns(cfg.Readers)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", cfg.Path, err)
	}
	s := &Store{r: r, clock: cfg.Clock, stmts: stmts, readOnly: true}
	s.Store = core.New(core.Config{Driver: driver{executor: executor{db: r, clock: cfg.Clock}, s: s}, Clock: cfg.Clock})
	return s, nil
}

// Ping implements store.Store: both pools must answer.
func (s *Store) Ping(ctx context.Context) error {
	if s.readOnly {
		if err := s.r.PingContext(ctx); err != nil {
			return fmt.Errorf("sqlite: ping reader: %w", err)
		}
		return nil
	}
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
	if s.readOnly {
		return s.r.Close()
	}
	var err error
	if m := s.prepared.Swap(nil); m != nil {
		err = closeAll(*m)
	}
	return errors.Join(err, s.r.Close(), s.w.Close())
}

// Migrate applies the embedded migrations not yet applied, each in its own
// transaction (SQLite's DDL is transactional: a failed step leaves nothing).
//
// Every object lapse creates is named lapse_* (its migration table is
// lapse_schema_migrations), and Migrate touches no other: a database holding
// the shop's own tables, an `orders` or a golang-migrate schema_migrations
// among them, migrates and keeps them as they were. A database of an earlier
// lapse (unprefixed tables, lapse's own schema_migrations) is brought to its
// last version and renamed in place, in one transaction, before the rest
// (migrations/legacy/rename.sql says how, and what an earlier lapse then does).
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, files, "migrations", files, "migrations/legacy")
}

// renamedVersion is the version at which lapse's tables took their lapse_
// names: the baseline 009 of a fresh database, or the rename of an earlier one.
const renamedVersion = 9

func (s *Store) migrate(ctx context.Context, fsys fs.FS, dir string, legacyFS fs.FS, legacyDir string) error {
	if s.readOnly {
		return errReadOnly
	}
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var ours, legacy bool
		if err := tx.QueryRowContext(ctx, migrateState).Scan(&ours, &legacy); err != nil {
			return err
		}
		if !ours && legacy {
			if err := tx.QueryRowContext(ctx, legacyInit).Scan(&legacy); err != nil {
				return err
			}
		}
		if !ours && legacy {
			return s.renameLegacy(ctx, tx, legacyFS, legacyDir)
		}
		if _, err := tx.ExecContext(ctx, migrateTable); err != nil {
			return err
		}
		v, err := schemaVersions(ctx, tx)
		if err != nil {
			return err
		}
		v.Want = ms[len(ms)-1].Version
		return v.TooNew()
	})
	if errors.Is(err, store.ErrSchemaTooNew) {
		return err
	}
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	for _, m := range ms {
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, migrateApplied, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, migrateRecord, m.Version, m.Name, s.clock.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	if err := s.prepare(ctx); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// Migrate's statements, here and not in queries.sql: the store prepares
// every statement of queries.sql once migrated, and the legacy ones name a
// table that a database created since version 9 does not have.
const (
	// migrateState: whether the database holds lapse_schema_migrations
	// (lapse's since version 9), and whether it may hold the schema of an
	// earlier lapse instead: lapse's own schema_migrations (a table with its
	// columns; legacyInit then checks that it recorded lapse's 001_init)
	// beside lapse's orders, order_items and stock_ledger. A
	// schema_migrations of anyone else (golang-migrate's has version and
	// dirty) or an `orders` of the shop's is not that, and is left alone.
	migrateState = `SELECT
	EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'lapse_schema_migrations'),
	(SELECT count(*) FROM sqlite_master m, pragma_table_info(m.name) c
	 WHERE m.type = 'table' AND m.name IN ('schema_migrations', 'orders', 'stock_ledger', 'order_items')
	   AND (m.name, c.name) IN (VALUES ('schema_migrations', 'version'), ('schema_migrations', 'name'), ('schema_migrations', 'applied_at'),
	       ('orders', 'cancel_after'), ('orders', 'payment_attempts'), ('stock_ledger', 'action'), ('order_items', 'qty'))) = 7`
	legacyInit    = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1 AND name = 'init')`
	legacyApplied = `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`
	legacyRecord  = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	migrateTable  = `CREATE TABLE IF NOT EXISTS lapse_schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`
	migrateApplied = `SELECT COUNT(*) FROM lapse_schema_migrations WHERE version = ?`
	migrateRecord  = `INSERT INTO lapse_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
)

// renameLegacy brings the database of an earlier lapse to its last
// unprefixed version (the legacy migrations it lacks, recorded in its
// schema_migrations as that lapse did), then renames it to lapse_* and
// records version 9, all in tx: a failure at any step leaves the database as
// it was.
func (s *Store) renameLegacy(ctx context.Context, tx *sql.Tx, fsys fs.FS, dir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	now := s.clock.Now().UnixMilli()
	for _, m := range ms {
		var n int
		if err := tx.QueryRowContext(ctx, legacyApplied, m.Version).Scan(&n); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if n > 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, legacyRecord, m.Version, m.Name, now); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	rename, err := fs.ReadFile(fsys, path.Join(dir, "rename.sql"))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, string(rename)); err != nil {
		return fmt.Errorf("rename to lapse_*: %w", err)
	}
	if _, err := tx.ExecContext(ctx, migrateRecord, renamedVersion, "lapse_tables", now); err != nil {
		return fmt.Errorf("rename to lapse_*: %w", err)
	}
	return nil
}

// writeTx runs fn in one write transaction, committed if fn returns nil
// (Migrate's steps; the store's transactions run through store/core).
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.begin(ctx, false)
	if err != nil {
		return err
	}
	if err := fn(tx.tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// driver is the store as store/core sees it: reads on the reader pool
// (the embedded executor; it never writes there), transactions on the writer.
type driver struct {
	executor
	s *Store
}

var _ core.Driver = driver{}

// Begin implements core.Driver. A write transaction waits for the one write
// connection (urgent ones first, see writer.go) and holds it until Commit or
// Rollback; a read-only one is a snapshot on a reader.
func (d driver) Begin(ctx context.Context, o core.TxOptions) (core.ExecutorTx, error) {
	if o.ReadOnly {
		tx, err := d.s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, err
		}
		return &txExecutor{executor: executor{db: tx, clock: d.s.clock}, tx: tx}, nil
	}
	return d.s.begin(ctx, o.Urgent)
}

func (s *Store) begin(ctx context.Context, urgent bool) (*txExecutor, error) {
	if s.readOnly {
		return nil, errReadOnly
	}
	if err := s.writer.lock(ctx, urgent); err != nil {
		return nil, fmt.Errorf("wait for the writer: %w", err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		s.writer.unlock()
		return nil, err
	}
	var stmts map[string]*sql.Stmt
	if m := s.prepared.Load(); m != nil {
		stmts = *m
	}
	return &txExecutor{executor: executor{db: preparedTx{Tx: tx, stmts: stmts}, clock: s.clock}, tx: tx, release: s.writer.unlock}, nil
}

// Class implements core.Driver. With one writer nothing deadlocks, so
// nothing is retried.
func (driver) Class(err error) core.ErrorClass {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return core.ClassRefused
	}
	return core.ClassUnknown
}

// AuditChecks implements core.Driver.
func (driver) AuditChecks() []sqlfile.Query { return auditChecks }

// txExecutor is the executor on a transaction.
type txExecutor struct {
	executor
	tx      *sql.Tx
	release func() // hands the writer on; nil for a reader
}

func (t *txExecutor) done() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

// Commit implements core.ExecutorTx.
func (t *txExecutor) Commit(context.Context) error {
	defer t.done()
	return t.tx.Commit()
}

// Rollback implements core.ExecutorTx.
func (t *txExecutor) Rollback(context.Context) error {
	defer t.done()
	return t.tx.Rollback()
}

// Savepoint implements core.ExecutorTx.
func (t *txExecutor) Savepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "savepoint")
	return err
}

// RollbackToSavepoint implements core.ExecutorTx.
func (t *txExecutor) RollbackToSavepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "rollback_to_savepoint")
	return err
}

// ReleaseSavepoint implements core.ExecutorTx.
func (t *txExecutor) ReleaseSavepoint(ctx context.Context) error {
	_, err := t.exec(ctx, "release_savepoint")
	return err
}
