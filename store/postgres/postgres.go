// Package postgres is lapse's PostgreSQL store, on pgx v5 and its pool: a
// driver of store/core, which holds the logic of every transaction. What is
// PostgreSQL's is here: the statements (queries.sql, audit.sql), lists passed
// as one array parameter, RETURNING, pipelined batches (a transition's
// effects in one round trip, a group of creates in two), FOR UPDATE and
// SKIP LOCKED, and how the server's errors classify.
//
// Guarantees beyond the store.Store contract:
//
//   - One clock decides. With Config.Clock set, every guard compares against
//     that clock; without one, against the database's clock, read once per
//     transaction (by the timeout cancel's UPDATE itself: cancel_due_clocked),
//     so instances whose clocks drift can fire a timer early but never cancel
//     an order early.
//   - A timeout cancel takes two round trips: BEGIN, the clock, the UPDATE
//     and the items of the orders it cancelled; then ledger, counters,
//     events and COMMIT (pgTx, core.DueClockExecutor, core.EffectsCommitter).
//   - Every status transition is one conditional UPDATE … RETURNING in a
//     READ COMMITTED transaction; the row it returns, or its absence,
//     decides. A payment success that cannot pay the order is judged on the
//     order's row held FOR UPDATE.
//   - Claim mode takes due orders with FOR UPDATE SKIP LOCKED on the
//     (status, cancel_after) index, so any number of instances sweep at once
//     without taking the same rows or waiting for each other.
//   - SKU rows are locked in byte order (COLLATE "C", Go's string order),
//     whatever the database's collation, and a transaction that still loses a
//     deadlock or a serialization conflict is run again (Config.Retries).
//   - Migrate applies each embedded migration in its own transaction under an
//     advisory lock: concurrent starts queue, and a failed step leaves the
//     schema as it was.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/migrate"
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
	// URL is the connection string, postgres://user:password@host:5432/db or
	// postgresql://…, with any parameter pgx understands (sslmode,
	// pool_max_conns, …); other query parameters are sent to the server as
	// run-time settings, so ?search_path=lapse puts the tables in schema lapse.
	// Required: there is no default server.
	URL string
	// Clock is the one clock the guards compare against. Defaults to nil: the
	// database's clock (clock_timestamp(), truncated to milliseconds), read
	// once at the start of each transaction — the right choice whenever more
	// than one instance runs. Set it only for tests or a single instance.
	Clock clock.Clock
	// MaxConns is the size of the connection pool. Defaults to 10, or to
	// pool_max_conns when the URL sets it.
	MaxConns int32
	// Retries is how many times a transaction that lost a deadlock or a
	// serialization conflict is run again, after a short randomised pause.
	// Defaults to 4; a negative value disables retrying.
	Retries int
	// CreateGroup is the most creates committed in one transaction when they
	// arrive together (group commit: store/core's group.go, pipelined by this
	// package's group.go). Defaults to 64, or to the URL's create_group
	// parameter; 1 gives every create a transaction of its own.
	CreateGroup int
	// Hooks run an embedding service's code inside the transactions that
	// cancel or pay orders (see Hooks). Optional.
	Hooks Hooks
	// DisableDueNotify stops creates and extends (CreateOrderTx and
	// ExtendTx in a caller's transaction too) from telling the other lapse
	// instances of their deadlines at commit (pg_notify: ListenDue). Defaults
	// to false: they tell. The cost of telling: PostgreSQL commits the
	// transactions that notify one at a time (a lock per database, held
	// through the commit's WAL flush), so concurrent checkouts that each
	// create an order in a transaction of their own stop sharing flushes
	// (docs/embedding.md, Cost). Disable it when no instance needs to hear
	// another's orders: one instance, or timers in a shared index (Redis, a
	// broker), or the sql timers whose poller plans every PollMaxSleep.
	DisableDueNotify bool
}

// DefaultCreateGroup is Config.CreateGroup's default.
const DefaultCreateGroup = 64

func (c *Config) setDefaults() {
	if c.Retries == 0 {
		c.Retries = 4
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.CreateGroup == 0 {
		c.CreateGroup = DefaultCreateGroup
	}
}

// takeCreateGroup removes lapse's own create_group parameter from a URL
// (pgx would send it to the server as a setting) and returns its value, 0
// when absent.
func takeCreateGroup(raw string) (string, int, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.Query().Has("create_group") {
		return raw, 0, nil // pgx reports a malformed URL
	}
	v := u.Query()
	n, err := strconv.Atoi(v.Get("create_group"))
	if err != nil || n < 1 {
		return raw, 0, fmt.Errorf("postgres: create_group=%q: want a whole number, at least 1", v.Get("create_group"))
	}
	v.Del("create_group")
	u.RawQuery = v.Encode()
	return u.String(), n, nil
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("postgres: Config.URL is required")
	}
	if !strings.HasPrefix(c.URL, "postgres://") && !strings.HasPrefix(c.URL, "postgresql://") {
		return errors.New("postgres: Config.URL: want postgres://user@host:5432/db or postgresql://…")
	}
	if c.CreateGroup < 0 {
		return fmt.Errorf("postgres: Config.CreateGroup %d: want at least 1", c.CreateGroup)
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("postgres: Config.MaxConns %d: want at least 1", c.MaxConns)
	}
	return nil
}

// Store is the PostgreSQL implementation of store.Store: store/core's
// transactions on the driver of this package.
type Store struct {
	*core.Store
	pool  *pgxpool.Pool
	stmts *statementCounter
	cfg   core.Config // what the core was built with (the tests' Tx hook reuses it)
	// borrowed: the pool is the caller's (FromPool), never closed here.
	borrowed bool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database and checks that it answers. It does not
// migrate: call Migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	connURL, group, err := takeCreateGroup(cfg.URL)
	if err != nil {
		return nil, err
	}
	if group > 0 && cfg.CreateGroup == 0 {
		cfg.CreateGroup = group
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: Config.URL: %w", err) // pgx redacts the password
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.URL, "pool_max_conns="):
		pc.MaxConns = 10
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "lapse"
	}
	stmts := countStatements(pc.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", pc.ConnConfig.Host, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", pc.ConnConfig.Host, err)
	}
	cc := core.Config{Driver: &driver{executor{pool}, pool}, Clock: cfg.Clock, Retries: cfg.Retries, CreateGroup: cfg.CreateGroup,
		Hooks: cfg.Hooks.runner(), TellDeadlines: !cfg.DisableDueNotify}
	return &Store{Store: core.New(cc), pool: pool, stmts: stmts, cfg: cc}, nil
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned;
// a caller's pool (FromPool) is left open.
func (s *Store) Close() error {
	if !s.borrowed {
		s.pool.Close()
	}
	return nil
}

// Migrate applies the embedded migrations not yet applied, each in its own
// transaction under an advisory lock on the schema (PostgreSQL's DDL is
// transactional: a failed step leaves nothing behind, and an instance that
// waited for the lock finds the step done). A step that loses a deadlock to
// live traffic runs again, as the store's own transactions do.
//
// Every object lapse creates is named lapse_* (its migration table is
// lapse_schema_migrations), and Migrate touches no other: a schema holding
// the shop's own tables, an `orders` or a golang-migrate schema_migrations
// among them, migrates and keeps them as they were. A schema of an earlier
// lapse (unprefixed tables, lapse's own schema_migrations) is brought to its
// last version and renamed in place, in one transaction, before the rest
// (migrations/legacy/rename.sql says how, and what an earlier lapse then does).
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, files, "migrations", files, "migrations/legacy")
}

// renamedVersion is the version at which lapse's tables took their lapse_
// names: the baseline 009 of a fresh schema, or the rename of an earlier one.
const renamedVersion = 9

func (s *Store) migrate(ctx context.Context, fsys fs.FS, dir string, legacyFS fs.FS, legacyDir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	err = s.WithTx(ctx, core.TxOptions{}, func(t *core.Tx) error {
		tx := t.ExecutorTx.(txExecutor).tx
		if _, err := tx.Exec(ctx, q.Get("migrate_lock")); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		var ours, legacy bool
		if err := tx.QueryRow(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
			return err
		}
		if !ours && legacy {
			if err := tx.QueryRow(ctx, q.Get("legacy_init")).Scan(&legacy); err != nil {
				return err
			}
		}
		if !ours && legacy {
			return renameLegacy(ctx, tx, legacyFS, legacyDir)
		}
		if _, err := tx.Exec(ctx, q.Get("migrate_table")); err != nil {
			return err
		}
		v, err := s.schemaVersions(ctx, tx)
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
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	for _, m := range ms {
		err := s.WithTx(ctx, core.TxOptions{}, func(t *core.Tx) error {
			tx := t.ExecutorTx.(txExecutor).tx
			if _, err := tx.Exec(ctx, q.Get("migrate_lock")); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			var done bool
			if err := tx.QueryRow(ctx, q.Get("migrate_applied"), m.Version).Scan(&done); err != nil || done {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, q.Get("migrate_record"), m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// renameLegacy brings the schema of an earlier lapse to its last unprefixed
// version (the legacy migrations it lacks, recorded in its schema_migrations
// as that lapse did), then renames it to lapse_* and records version 9, all
// in tx: a failure at any step leaves the schema as it was.
func renameLegacy(ctx context.Context, tx *pgTx, fsys fs.FS, dir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		var done bool
		if err := tx.QueryRow(ctx, q.Get("legacy_applied"), m.Version).Scan(&done); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if done {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, q.Get("legacy_record"), m.Version, m.Name); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	rename, err := fs.ReadFile(fsys, path.Join(dir, "rename.sql"))
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, string(rename)); err != nil {
		return fmt.Errorf("rename to lapse_*: %w", err)
	}
	if _, err := tx.Exec(ctx, q.Get("migrate_record"), renamedVersion, "lapse_tables"); err != nil {
		return fmt.Errorf("rename to lapse_*: %w", err)
	}
	return nil
}
