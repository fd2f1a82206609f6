package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return err
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

	if _, err := conn.ExecContext(ctx, q.Get("schema_migrations_create")); err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := s.apply(ctx, conn, m); err != nil {
			return fmt.Errorf("mysql: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

func appliedVersions(ctx context.Context, conn *sql.Conn) (map[int]bool, error) {
	applied := map[int]bool{}
	err := sqlrows.Each(ctx, conn, q.Get("schema_migrations_list"), nil, func(r *sql.Rows) error {
		var v int
		if err := r.Scan(&v); err != nil {
			return err
		}
		applied[v] = true
		return nil
	})
	return applied, err
}

// apply runs the sections of one migration in order, then records it.
func (s *Store) apply(ctx context.Context, conn *sql.Conn, m migrate.Migration) error {
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
	if _, err := conn.ExecContext(ctx, q.Get("schema_migrations_insert"), m.Version, m.Name); err != nil {
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
