package postgres

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store"
)

var _ store.SchemaChecker = (*Store)(nil)

// CheckSchema implements store.SchemaChecker.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return err
	}
	var ours, legacy bool
	if err := s.pool.QueryRow(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
		return fmt.Errorf("postgres: check the schema: %w", err)
	}
	if !ours {
		return notMigrated("postgres", legacy, 0, ms)
	}
	var latest int
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM lapse_schema_migrations`).Scan(&latest); err != nil {
		return fmt.Errorf("postgres: check the schema: %w", err)
	}
	return notMigrated("postgres", false, latest, ms)
}

// notMigrated is CheckSchema's answer for a schema at version latest (0: no
// lapse_schema_migrations; legacy: the tables of a lapse before version 9).
func notMigrated(kind string, legacy bool, latest int, ms []migrate.Migration) error {
	want := ms[len(ms)-1].Version
	switch {
	case legacy:
		return fmt.Errorf("%s: the database holds the unprefixed tables of a lapse before version %d (%w, which renames them to lapse_*)", kind, renamedVersion, store.ErrNotMigrated)
	case latest == 0:
		return fmt.Errorf("%s: the database holds no lapse schema (%w)", kind, store.ErrNotMigrated)
	case latest < want:
		return fmt.Errorf("%s: the schema is at version %d, this lapse needs %d (%w)", kind, latest, want, store.ErrNotMigrated)
	}
	return nil
}
