package postgres

import (
	"context"
	"io/fs"

	"github.com/jackc/pgx/v5"
)

// Hooks for the external tests of this package.

// MigrateFrom applies the migrations under dir of fsys, as Migrate does with
// the embedded ones: the tests feed it a step that fails.
func (s *Store) MigrateFrom(ctx context.Context, fsys fs.FS, dir string) error {
	return s.migrate(ctx, fsys, dir)
}

// Files holds the embedded migrations and queries.
var Files = files

// ClaimDueSQL is the claim query, for checking its plan.
var ClaimDueSQL = q.Get("claim_due")

// Tx runs fn as the store runs every transaction, retries included.
func (s *Store) Tx(ctx context.Context, fn func(tx pgx.Tx) error) error { return s.tx(ctx, fn) }

// GroupStats is what group commit did: groups committed, the orders they
// held, and groups the server refused (their orders then created alone).
func (s *Store) GroupStats() (groups, orders, fallbacks int64) {
	if s.groups == nil {
		return 0, 0, 0
	}
	return s.groups.groups.Load(), s.groups.grouped.Load(), s.groups.fallbacks.Load()
}

// Query is one named query of queries.sql, for checking its plan.
func Query(name string) string { return q.Get(name) }
