package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/store"
)

var _ store.SchemaChecker = (*Store)(nil)

// CheckSchema implements store.SchemaChecker.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := schemaVersions(ctx, s.db)
	if err != nil {
		return err
	}
	return v.Check()
}

// schemaVersions reads what db finds of lapse's schema: the pool, or the
// migration's connection (under its lock).
func schemaVersions(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (store.SchemaVersions, error) {
	ms, err := migrate.Load(files, "migrations")
	if err != nil {
		return store.SchemaVersions{}, err
	}
	v := store.SchemaVersions{Kind: "mysql", Want: ms[len(ms)-1].Version, Renamed: renamedVersion}
	var ours, legacy bool
	if err := db.QueryRowContext(ctx, q.Get("migrate_state")).Scan(&ours, &legacy); err != nil {
		return v, fmt.Errorf("mysql: check the schema: %w", err)
	}
	v.Legacy = !ours && legacy
	if ours {
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM lapse_schema_migrations`).Scan(&v.Latest); err != nil {
			return v, fmt.Errorf("mysql: check the schema: %w", err)
		}
	}
	return v, nil
}
