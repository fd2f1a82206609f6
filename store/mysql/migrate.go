package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"testing/fstest"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/internal/sqlrows"
)

// Migrate applies the embedded migrations not yet applied.
//
// Migrations from several processes are serialised by a named lock
// (GET_LOCK, one per database) held on one connection for the whole run; a
// second process waits for it (Config.MigrateLockTimeout), then finds the
// versions applied and does nothing.
//
// MySQL's DDL is not transactional: each DDL statement commits on its own
// (and is atomic on MySQL 8 and MariaDB 10.6+), but a migration of several
// statements cannot be rolled back as a whole. So each migration file is a
// list of `-- name:` sections of one statement each, every one safe to run
// again: CREATE … IF NOT EXISTS, and for statements MySQL 8 has no IF NOT
// EXISTS for (ADD COLUMN, ADD INDEX, DROP …) the "already exists" / "does not
// exist" error of a re-run counts as done. The version is recorded only after
// the last section succeeded. A migration that fails thus leaves every
// statement either applied or not (never half), the schema version
// unchanged, and the next Migrate completes it from where it stopped.
//
// Every table lapse creates is named lapse_* (its migration table is
// lapse_schema_migrations), and Migrate touches no other: a database holding
// the shop's own tables, an `orders` or a golang-migrate schema_migrations
// among them, migrates and keeps them as they were. A database of an earlier
// lapse (unprefixed tables, lapse's own schema_migrations) is brought to its
// last version and renamed in place before the rest, by the same idempotent
// steps (migrations/legacy/rename.sql says how, and what an earlier lapse
// then does).
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, files, "migrations", files, "migrations/legacy")
}

// renamedVersion is the version at which lapse's tables took their lapse_
// names: the baseline 009 of a fresh database, or the rename of an earlier one.
const renamedVersion = 9

func (s *Store) migrate(ctx context.Context, fsys fs.FS, dir string, legacyFS fs.FS, legacyDir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	rename, err := fs.ReadFile(legacyFS, path.Join(legacyDir, "rename.sql"))
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	renameSteps := sqlfile.MustLoadOrdered(fstest.MapFS{"r.sql": {Data: rename}}, "r.sql")
	if len(renameSteps) < 2 || renameSteps[0].Name != "rename_tables" {
		return errors.New("mysql: migrate: rename.sql must start with its rename_tables section")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	defer conn.Close()

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, q.Get("migrate_lock"), int64((s.cfg.MigrateLockTimeout+time.Second-1)/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("mysql: migrate: take the migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("mysql: migrate: another migration held the lock for %v", s.cfg.MigrateLockTimeout)
	}
	defer func() {
		// Closing the connection would release the lock too; release it so
		// that the connection can go back to the pool clean.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), q.Get("migrate_unlock"))
	}()

	var ours, legacy bool
	if err := conn.QueryRowContext(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	if !ours && legacy {
		if err := conn.QueryRowContext(ctx, q.Get("legacy_init")).Scan(&legacy); err != nil {
			return fmt.Errorf("mysql: migrate: %w", err)
		}
	}
	if !ours && legacy {
		if err := s.upgradeLegacy(ctx, conn, legacyFS, legacyDir); err != nil {
			return fmt.Errorf("mysql: migrate: %w", err)
		}
		if _, err := conn.ExecContext(ctx, renameSteps[0].SQL); err != nil {
			return fmt.Errorf("mysql: migrate: rename to lapse_*: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, q.Get("schema_migrations_create")); err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	v, err := schemaVersions(ctx, conn)
	if err != nil {
		return err
	}
	v.Want = ms[len(ms)-1].Version
	if err := v.TooNew(); err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, conn, "schema_migrations_list")
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	// Renamed, not finished: the earlier lapse's versions, not version 9.
	if applied[renamedVersion-1] && !applied[renamedVersion] {
		if err := finishRename(ctx, conn, renameSteps[1:]); err != nil {
			return fmt.Errorf("mysql: migrate: rename to lapse_*: %w", err)
		}
		applied[renamedVersion] = true
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := s.apply(ctx, conn, m, "schema_migrations_insert"); err != nil {
			return fmt.Errorf("mysql: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// upgradeLegacy applies the legacy migrations an earlier lapse's database
// lacks, recorded in its schema_migrations as that lapse did, so that the
// rename starts from its last version.
func (s *Store) upgradeLegacy(ctx context.Context, conn *sql.Conn, fsys fs.FS, dir string) error {
	ms, err := migrate.Load(fsys, dir)
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, conn, "legacy_list")
	if err != nil {
		return err
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := s.apply(ctx, conn, m, "legacy_insert"); err != nil {
			return fmt.Errorf("legacy migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// finishRename runs the steps of rename.sql after rename_tables, each safe to
// run again, with foreign_key_checks off for the connection (a foreign key
// dropped and added again in one ALTER TABLE then copies no table), then
// records version 9.
func finishRename(ctx context.Context, conn *sql.Conn, steps []sqlfile.Query) (err error) {
	if _, err := conn.ExecContext(ctx, q.Get("fk_checks_off")); err != nil {
		return err
	}
	defer func() {
		if _, on := conn.ExecContext(context.WithoutCancel(ctx), q.Get("fk_checks_on")); on != nil && err == nil {
			err = on
		}
	}()
	for _, st := range steps {
		if _, err := conn.ExecContext(ctx, st.SQL); err != nil && !alreadyDone(err) {
			return fmt.Errorf("step %s: %w", st.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, q.Get("schema_migrations_insert"), renamedVersion, "lapse_tables"); err != nil {
		return fmt.Errorf("record version: %w", err)
	}
	return nil
}

func appliedVersions(ctx context.Context, conn *sql.Conn, query string) (map[int]bool, error) {
	applied := map[int]bool{}
	err := sqlrows.Each(ctx, conn, q.Get(query), nil, func(r *sql.Rows) error {
		var v int
		if err := r.Scan(&v); err != nil {
			return err
		}
		applied[v] = true
		return nil
	})
	return applied, err
}

// apply runs the sections of one migration in order, then records it with
// the statement named record.
func (s *Store) apply(ctx context.Context, conn *sql.Conn, m migrate.Migration, record string) error {
	// The files are embedded: a malformed one is a build mistake that any
	// test catches, so MustLoadOrdered's panic is the right failure.
	steps := sqlfile.MustLoadOrdered(fstest.MapFS{"m.sql": {Data: []byte(m.SQL)}}, "m.sql")
	if len(steps) == 0 {
		return errors.New("no `-- name:` sections: each statement goes in its own section")
	}
	for _, st := range steps {
		if _, err := conn.ExecContext(ctx, st.SQL); err != nil && !alreadyDone(err) {
			return fmt.Errorf("step %s: %w", st.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, q.Get(record), m.Version, m.Name); err != nil {
		return fmt.Errorf("record version: %w", err)
	}
	return nil
}

// alreadyDone reports whether a DDL error says that a re-run statement had
// taken effect on an earlier, interrupted run.
func alreadyDone(err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erTableExists, erDupFieldName, erDupKeyName, erCantDropFieldOrKey:
		return true
	}
	return false
}
