package sqlrows_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse/internal/sqlrows"
)

func TestCollectAndEach(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	const q = `SELECT value FROM json_each(?)`
	got, err := sqlrows.Collect(ctx, db, q, []any{`[1,2,3]`}, func(r *sql.Rows) (int, error) {
		var v int
		return v, r.Scan(&v)
	})
	if err != nil || len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("Collect: %v %v, want [1 2 3]", got, err)
	}
	stop := errors.New("stop")
	n := 0
	err = sqlrows.Each(ctx, db, q, []any{`[1,2,3]`}, func(*sql.Rows) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Each: %v after %d rows, want the callback's error after 2", err, n)
	}
	if _, err := sqlrows.Collect(ctx, db, `SELECT nope`, nil, func(*sql.Rows) (int, error) { return 0, nil }); err == nil {
		t.Fatal("Collect of a bad query: no error")
	}
}
