package postgres

import (
	"context"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store/core"
)

// Hooks for the external tests of this package.

// MigrateFrom applies the migrations under dir of fsys, as Migrate does with
// the embedded ones: the tests feed it a step that fails.
func (s *Store) MigrateFrom(ctx context.Context, fsys fs.FS, dir string) error {
	return s.migrate(ctx, fsys, dir, files, "migrations/legacy")
}

// MigrateWithLegacy is Migrate with the legacy migrations and rename.sql
// taken from legacyDir of legacyFS: the tests feed it a rename that fails.
func (s *Store) MigrateWithLegacy(ctx context.Context, legacyFS fs.FS, legacyDir string) error {
	return s.migrate(ctx, files, "migrations", legacyFS, legacyDir)
}

// LegacyVersion is the schema of an earlier lapse: the tests apply these
// migrations, as that lapse did, to build a database to rename.
func (s *Store) LegacyVersion(ctx context.Context) error {
	return s.LegacyVersionFrom(ctx, files, "migrations/legacy")
}

// LegacyVersionFrom is LegacyVersion with the legacy migrations under dir of
// fsys (some of them: an earlier lapse at an earlier version).
func (s *Store) LegacyVersionFrom(ctx context.Context, fsys fs.FS, dir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := s.WithTx(ctx, core.TxOptions{}, func(t *core.Tx) error {
			tx := t.ExecutorTx.(txExecutor).tx
			if _, err := tx.Exec(ctx, legacyTable); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, q.Get("legacy_record"), m.Version, m.Name)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// legacyTable is the migration table of lapse before version 9, as it
// created it.
const legacyTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Files holds the embedded migrations and queries.
var Files = files

// ClaimDueSQL is the claim query, for checking its plan.
var ClaimDueSQL = q.Get("claim_due")

// Query is one named query of queries.sql, for checking its plan.
func Query(name string) string { return q.Get(name) }

// TxConn is what a test's transaction (Store.Tx) runs statements on.
type TxConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Tx runs fn as the store runs every transaction, retries included.
func (s *Store) Tx(ctx context.Context, fn func(tx TxConn) error) error {
	return s.WithTx(ctx, core.TxOptions{}, func(tx *core.Tx) error { return fn(tx.ExecutorTx.(txExecutor).tx) })
}

// WithSavepoints is s with its groups of creates on the core's general path,
// one savepoint per create: its transactions do not offer the pipelined
// core.GroupExecutor. Its payment starts and reports are grouped too (the
// core's paygroup.go, off in a PostgreSQL store), one savepoint each.
func (s *Store) WithSavepoints() *Store {
	cfg := s.cfg
	ce, _ := s.cfg.Driver.(core.CommandExecutor)
	re, _ := s.cfg.Driver.(core.RefundExecutor)
	rt, _ := s.cfg.Driver.(core.RetentionExecutor)
	cfg.Driver = savepointDriver{s.cfg.Driver, ce, re, rt}
	cfg.PaymentGroup = 32
	return &Store{Store: core.New(cfg), pool: s.pool, stmts: s.stmts, cfg: cfg}
}

// savepointDriver hides the group statements of the driver; the commands
// of order-service mode (CommandExecutor), the refunds (RefundExecutor) and
// retention (RetentionExecutor) stay.
type savepointDriver struct {
	core.Driver
	core.CommandExecutor
	core.RefundExecutor
	core.RetentionExecutor
}

func (d savepointDriver) Begin(ctx context.Context, o core.TxOptions) (core.ExecutorTx, error) {
	etx, err := d.Driver.Begin(ctx, o)
	if err != nil {
		return nil, err
	}
	ce, _ := etx.(core.CommandExecutor)
	re, _ := etx.(core.RefundExecutor)
	rt, _ := etx.(core.RetentionExecutor)
	return struct {
		core.ExecutorTx
		core.CommandExecutor
		core.RefundExecutor
		core.RetentionExecutor
	}{etx, ce, re, rt}, nil // LockGroup and WriteGroup hidden
}

// WithoutPipelinedCancel is s with the timeout cancel on the core's general
// path: its transactions offer neither core.DueClockExecutor (the clock read
// by a statement of its own) nor core.EffectsCommitter (effects, then COMMIT).
func (s *Store) WithoutPipelinedCancel() *Store {
	cfg := s.cfg
	cfg.Driver = generalDriver{s.cfg.Driver}
	return &Store{Store: core.New(cfg), pool: s.pool, stmts: s.stmts, cfg: cfg}
}

type generalDriver struct{ core.Driver }

func (d generalDriver) Begin(ctx context.Context, o core.TxOptions) (core.ExecutorTx, error) {
	etx, err := d.Driver.Begin(ctx, o)
	if err != nil {
		return nil, err
	}
	return struct {
		core.ExecutorTx
		core.GroupExecutor
	}{etx, etx.(core.GroupExecutor)}, nil
}

// Notices and ReadNotice pack and read the payloads of notify_due.
var (
	Notices    = notices
	ReadNotice = readNotice
)
