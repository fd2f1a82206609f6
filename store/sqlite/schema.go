package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store"
)

var _ store.SchemaChecker = (*Store)(nil)

// CheckSchema implements store.SchemaChecker, on the reader (it works on a
// store opened read-only too).
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := schemaVersions(ctx, s.r)
	if err != nil {
		return err
	}
	return v.Check()
}

// schemaVersions reads what db finds of lapse's schema: the reader, or the
// migration's transaction.
func schemaVersions(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (store.SchemaVersions, error) {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return store.SchemaVersions{}, err
	}
	v := store.SchemaVersions{Kind: "sqlite", Want: ms[len(ms)-1].Version, Renamed: renamedVersion}
	var ours, legacy bool
	if err := db.QueryRowContext(ctx, migrateState).Scan(&ours, &legacy); err != nil {
		return v, fmt.Errorf("sqlite: check the schema: %w", err)
	}
	v.Legacy = !ours && legacy
	if ours {
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(max(version), 0) FROM lapse_schema_migrations`).Scan(&v.Latest); err != nil {
			return v, fmt.Errorf("sqlite: check the schema: %w", err)
		}
	}
	return v, nil
}
