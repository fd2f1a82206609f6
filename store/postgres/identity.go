package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/store"
)

var _ store.Identified = (*Store)(nil)

// Identity implements store.Identified: when the schema's first migration
// was applied (its lowest version: 001 of a schema an earlier lapse created
// and version 9 renamed, whose identity stays; 009 of one created since), to the microsecond.
func (s *Store) Identity(ctx context.Context) (string, error) {
	var at time.Time
	if err := s.pool.QueryRow(ctx, q.Get("first_migration")).Scan(&at); err != nil {
		return "", fmt.Errorf("postgres: identity (is the schema migrated?): %w", err)
	}
	return "postgres:" + at.UTC().Format(time.RFC3339Nano), nil
}
