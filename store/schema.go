package store

import (
	"context"
	"errors"
	"fmt"
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

// ErrSchemaTooNew is the answer of a store whose database a newer lapse has
// migrated: it holds versions this build has no migration for, whose tables
// and rules this build does not know (a column it would not fill, a status it
// would not expect). Migrate and CheckSchema both stop with it, so an older
// binary left running through a rolling upgrade, or rolled back to, refuses
// to start rather than write rows the newer one misreads.
var ErrSchemaTooNew = errors.New("the database was migrated by a newer lapse: run that version or a later one")

// SchemaVersions is what a driver found of lapse's schema in its database.
type SchemaVersions struct {
	Kind    string // the store's name, for the message: "postgres"
	Legacy  bool   // the unprefixed tables of a lapse before Renamed, no lapse_* ones
	Latest  int    // the highest version recorded; 0: no lapse schema
	Want    int    // the highest version this build's migrations reach
	Renamed int    // the version at which the tables took their lapse_ names
}

// Check compares the versions: nil when the database is at Want, an error
// wrapping ErrNotMigrated when it is behind (or holds none, or an earlier
// lapse's tables), and one wrapping ErrSchemaTooNew when it is ahead. Every
// driver's CheckSchema answers with it, so that the three name the same
// versions in the same words.
func (v SchemaVersions) Check() error {
	switch {
	case v.Legacy && v.Latest == 0:
		return fmt.Errorf("%s: the database holds the unprefixed tables of a lapse before version %d (%w, which renames them to lapse_*)", v.Kind, v.Renamed, ErrNotMigrated)
	case v.Latest == 0:
		return fmt.Errorf("%s: the database holds no lapse schema (%w)", v.Kind, ErrNotMigrated)
	case v.Latest < v.Want:
		return fmt.Errorf("%s: the schema is at version %d, this lapse needs %d (%w)", v.Kind, v.Latest, v.Want, ErrNotMigrated)
	case v.Latest > v.Want:
		return v.TooNew()
	}
	return nil
}

// TooNew is the error for a database ahead of this build, or nil. Migrate
// calls it before it applies anything: an older lapse must not add its
// missing steps under a newer one's.
func (v SchemaVersions) TooNew() error {
	if v.Latest <= v.Want {
		return nil
	}
	return fmt.Errorf("%s: the schema is at version %d, this lapse knows versions up to %d (%w)", v.Kind, v.Latest, v.Want, ErrSchemaTooNew)
}
