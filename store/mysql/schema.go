package mysql

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
	if err := s.db.QueryRowContext(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
		return fmt.Errorf("mysql: check the schema: %w", err)
	}
	latest := 0
	if ours {
		if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM lapse_schema_migrations`).Scan(&latest); err != nil {
			return fmt.Errorf("mysql: check the schema: %w", err)
		}
	}
	want := ms[len(ms)-1].Version
	switch {
	case !ours && legacy:
		return fmt.Errorf("mysql: the database holds the unprefixed tables of a lapse before version %d (%w, which renames them to lapse_*)", renamedVersion, store.ErrNotMigrated)
	case latest == 0:
		return fmt.Errorf("mysql: the database holds no lapse schema (%w)", store.ErrNotMigrated)
	case latest < want:
		return fmt.Errorf("mysql: the schema is at version %d, this lapse needs %d (%w)", latest, want, store.ErrNotMigrated)
	}
	return nil
}
