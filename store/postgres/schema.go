package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store"
)

var _ store.SchemaChecker = (*Store)(nil)

// CheckSchema implements store.SchemaChecker.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := s.schemaVersions(ctx, s.pool)
	if err != nil {
		return err
	}
	return v.Check()
}

// schemaVersions reads what db finds of lapse's schema: a pool, or the
// migration's transaction (under its lock).
func (s *Store) schemaVersions(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (store.SchemaVersions, error) {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return store.SchemaVersions{}, err
	}
	v := store.SchemaVersions{Kind: "postgres", Want: ms[len(ms)-1].Version, Renamed: renamedVersion}
	var ours, legacy bool
	if err := db.QueryRow(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
		return v, fmt.Errorf("postgres: check the schema: %w", err)
	}
	v.Legacy = !ours && legacy
	if ours {
		if err := db.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM lapse_schema_migrations`).Scan(&v.Latest); err != nil {
			return v, fmt.Errorf("postgres: check the schema: %w", err)
		}
	}
	return v, nil
}
