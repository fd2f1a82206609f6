// Package postgres is lapse's PostgreSQL store, on pgx v5 and its pool.
//
// Guarantees beyond the store.Store contract:
//
//   - One clock decides. With Config.Clock set, every guard compares against
//     that clock; without one, against the database's clock, read once at the
//     start of each transaction, so instances whose clocks drift can fire a
//     timer early but never cancel an order early.
//   - Every transition is one conditional UPDATE … RETURNING in a READ
//     COMMITTED transaction; the row it returns, or its absence, decides.
//   - Claim mode takes due orders with FOR UPDATE SKIP LOCKED on the
//     (status, cancel_after) index, so any number of instances sweep at once
//     without taking the same rows or waiting for each other.
//   - SKU rows are locked in SKU order, and a transaction that still loses a
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
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/migrate"
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
	// arrive together (group commit, see group.go). Defaults to 64, or to the
	// URL's create_group parameter; 1 gives every create a transaction of
	// its own.
	CreateGroup int
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

// Store is the PostgreSQL implementation of store.Store.
type Store struct {
	pool    *pgxpool.Pool
	clock   clock.Clock // nil: the database's clock
	retries int
	groups  *grouper // nil: every create alone
	stmts   *statementCounter
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
	s := &Store{pool: pool, clock: cfg.Clock, retries: cfg.Retries, stmts: stmts}
	if cfg.CreateGroup > 1 {
		s.groups = newGrouper(s, cfg.CreateGroup)
	}
	return s, nil
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Migrate applies the embedded migrations not yet applied, each in its own
// transaction under an advisory lock on the schema (PostgreSQL's DDL is
// transactional: a failed step leaves nothing behind, and an instance that
// waited for the lock finds the step done).
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, files, "migrations")
}

func (s *Store) migrate(ctx context.Context, fsys fs.FS, dir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := s.tx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, q.Get("migrate_lock")); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if _, err := tx.Exec(ctx, q.Get("migrate_table")); err != nil {
				return err
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

// tx runs fn in one READ COMMITTED transaction, committed if fn returns nil.
// A transaction that loses a deadlock or a serialization conflict is rolled
// back and fn runs again from the start, so fn must set its results afresh on
// every run.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || attempt >= s.retries || !retryable(err) {
			return err
		}
		// 1–2 ms, then 2–4 ms, 4–8 ms…: enough for the winner to commit, and
		// randomised so the losers do not collide again in step.
		base := time.Millisecond << attempt
		pause := time.NewTimer(base + rand.N(base))
		select {
		case <-ctx.Done():
			pause.Stop()
			return errors.Join(err, ctx.Err())
		case <-pause.C:
		}
	}
}

// now returns the time one transaction's guards compare against: the
// configured clock's, or else the database's, read once.
func (s *Store) now(ctx context.Context, db querier) (time.Time, error) {
	if s.clock != nil {
		return s.clock.Now().UTC().Truncate(time.Millisecond), nil
	}
	var t time.Time
	if err := db.QueryRow(ctx, q.Get("db_now")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t.UTC(), nil
}

// querier is what *pgxpool.Pool and pgx.Tx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PostgreSQL error codes the driver acts on.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// errMovedTwice is a stock movement the ledger already holds: a guard let a
// second release or commit through, and the primary key refused it.
var errMovedTwice = errors.New("postgres: stock ledger already holds this movement")

// interpretError maps the database's errors to lapse's sentinels; any other
// error is returned as it is.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Code == codeUniqueViolation {
		switch pe.ConstraintName {
		case "orders_pkey":
			return store.ErrOrderExists
		case "stock_ledger_pkey":
			return fmt.Errorf("%w: %w", errMovedTwice, err)
		}
	}
	return err
}

// retryable reports whether err ended a transaction that can simply run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == codeSerializationFailure || pe.Code == codeDeadlockDetected)
}
