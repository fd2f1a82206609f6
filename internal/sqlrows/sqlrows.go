// Package sqlrows reads database/sql result sets as pgx.CollectRows and
// pgx.ForEachRow do, so the stores on database/sql (SQLite, MySQL) do not
// each write the Query, Next, Scan, Close, Err loop again.
package sqlrows

import (
	"context"
	"database/sql"
)

// Querier is what *sql.DB, *sql.Conn and *sql.Tx share for reads.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Each runs query and calls fn for every row, then closes the rows. The
// first error — of the query, of fn, or of the iteration — is returned.
func Each(ctx context.Context, db Querier, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// Collect runs query and returns what scan makes of every row.
func Collect[T any](ctx context.Context, db Querier, query string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	var out []T
	err := Each(ctx, db, query, args, func(r *sql.Rows) error {
		v, err := scan(r)
		if err == nil {
			out = append(out, v)
		}
		return err
	})
	return out, err
}
