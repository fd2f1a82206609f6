package sqlite

import (
	"context"
	"io/fs"
)

// Hooks for the external tests of this package.

// Files holds the embedded migrations and queries.
var Files = files

// MigrateWithLegacy is Migrate with the legacy migrations and rename.sql
// taken from legacyDir of legacyFS: the tests feed it a rename that fails.
func (s *Store) MigrateWithLegacy(ctx context.Context, legacyFS fs.FS, legacyDir string) error {
	return s.migrate(ctx, files, "migrations", legacyFS, legacyDir)
}
