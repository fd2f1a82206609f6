package mysql

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/lapsehq/lapse/internal/migrate"
)

// Hooks for the external tests of this package.

// Files holds the embedded migrations and queries.
var Files = files

// MigrateWithLegacy is Migrate with the legacy migrations and rename.sql
// taken from legacyDir of legacyFS: the tests feed it a rename that fails.
func (s *Store) MigrateWithLegacy(ctx context.Context, legacyFS fs.FS, legacyDir string) error {
	return s.migrate(ctx, files, "migrations", legacyFS, legacyDir)
}

// LegacyVersion builds the database of an earlier lapse: the first upTo
// legacy migrations, applied and recorded as that lapse did.
func (s *Store) LegacyVersion(ctx context.Context, upTo int) error {
	ms, err := migrate.Load(files, "migrations/legacy")
	if err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, legacyTable); err != nil {
		return err
	}
	for _, m := range ms[:upTo] {
		if err := s.apply(ctx, conn, m, "legacy_insert"); err != nil {
			return fmt.Errorf("legacy %03d: %w", m.Version, err)
		}
	}
	return nil
}

// legacyTable is the migration table of lapse before version 9, as it
// created it.
const legacyTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT          NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`

// MigrateFS is Migrate with the migrations taken from dir of fsys: the tests
// stop a database below a version.
func (s *Store) MigrateFS(ctx context.Context, fsys fs.FS, dir string) error {
	return s.migrate(ctx, fsys, dir, files, "migrations/legacy")
}
