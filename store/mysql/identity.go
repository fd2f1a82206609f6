package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/store"
)

var _ store.Identified = (*Store)(nil)

// Identity implements store.Identified: when the database's first
// migration was applied, to the millisecond.
func (s *Store) Identity(ctx context.Context) (string, error) {
	var at time.Time
	if err := s.db.QueryRowContext(ctx, q.Get("first_migration")).Scan(&at); err != nil {
		return "", fmt.Errorf("mysql: identity (is the database migrated?): %w", err)
	}
	return "mysql:" + at.UTC().Format(time.RFC3339Nano), nil
}
