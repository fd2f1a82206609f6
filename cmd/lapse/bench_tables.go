package main

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/bench"
)

//go:embed bench_tables.sql
var tablesSQL string

// pgTables samples the lapse tables of the PostgreSQL store at url for
// bench.Config.SampleTables, on a connection of its own each time (once a
// minute: no pool to keep); nil for a store that is not PostgreSQL.
func pgTables(url string) func(ctx context.Context) ([]bench.TableSize, error) {
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return nil
	}
	return func(ctx context.Context) ([]bench.TableSize, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rows, err := conn.Query(ctx, tablesSQL)
		if err != nil {
			return nil, fmt.Errorf("read the table sizes: %w", err)
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (bench.TableSize, error) {
			var t bench.TableSize
			err := r.Scan(&t.Table, &t.Rows, &t.Bytes)
			return t, err
		})
	}
}
