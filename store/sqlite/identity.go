package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/store"
)

var _ store.Identified = (*Store)(nil)

// Identity implements store.Identified: when the file's first migration
// was applied, to the millisecond.
func (s *Store) Identity(ctx context.Context) (string, error) {
	var ms int64
	if err := s.r.QueryRowContext(ctx, q.Get("first_migration")).Scan(&ms); err != nil {
		return "", fmt.Errorf("sqlite: identity (is the file migrated?): %w", err)
	}
	return "sqlite:" + time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), nil
}
