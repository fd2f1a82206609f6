package store

import (
	"context"
	"errors"
)

// ErrNotMigrated is the answer of a store whose database lapse's Migrate has
// not brought to this version: no lapse schema at all, the unprefixed tables
// of a lapse before version 9, or an older lapse_* schema. A command that
// does not migrate (audit, reconcile, serve --no-migrate) stops with it
// rather than run on tables that are not there.
var ErrNotMigrated = errors.New("the database is not migrated for this lapse: run lapse migrate")

// SchemaChecker is a store that can tell whether its database holds the
// schema this build of lapse expects.
type SchemaChecker interface {
	// CheckSchema returns nil when every embedded migration is applied,
	// and otherwise an error wrapping ErrNotMigrated that says what it found.
	CheckSchema(ctx context.Context) error
}
