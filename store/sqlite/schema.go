package sqlite

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store"
)

var _ store.SchemaChecker = (*Store)(nil)

// CheckSchema implements store.SchemaChecker, on the reader (it works on a
// store opened read-only too).
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return err
	}
	var ours, legacy bool
	if err := s.r.QueryRowContext(ctx, migrateState).Scan(&ours, &legacy); err != nil {
		return fmt.Errorf("sqlite: check the schema: %w", err)
	}
	latest := 0
	if ours {
		if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(max(version), 0) FROM lapse_schema_migrations`).Scan(&latest); err != nil {
			return fmt.Errorf("sqlite: check the schema: %w", err)
		}
	}
	want := ms[len(ms)-1].Version
	switch {
	case !ours && legacy:
		return fmt.Errorf("sqlite: the database holds the unprefixed tables of a lapse before version %d (%w, which renames them to lapse_*)", renamedVersion, store.ErrNotMigrated)
	case latest == 0:
		return fmt.Errorf("sqlite: the database holds no lapse schema (%w)", store.ErrNotMigrated)
	case latest < want:
		return fmt.Errorf("sqlite: the schema is at version %d, this lapse needs %d (%w)", latest, want, store.ErrNotMigrated)
	}
	return nil
}
