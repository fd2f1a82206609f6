// Package sqlfile reads named queries from an embedded .sql file, so drivers
// keep their SQL in files a reviewer can read (and a DBA can EXPLAIN) rather
// than in Go string literals.
//
// A file is a sequence of blocks, each starting with a line `-- name: some_name`;
// the block's text up to the next name line is the query.
package sqlfile

import (
	"bufio"
	"fmt"
	"io/fs"
	"strings"
)

// Queries maps names to SQL text.
type Queries map[string]string

// Query is one named query, for files whose order matters (a list of checks).
type Query struct {
	Name string
	SQL  string
}

// MustLoadOrdered reads path from fsys and returns its queries in file order.
func MustLoadOrdered(fsys fs.FS, path string) []Query {
	qs, err := loadOrdered(fsys, path)
	if err != nil {
		panic(err)
	}
	return qs
}

// MustLoad reads path from fsys and panics on a malformed file: the files are
// embedded, so an error is a build mistake, caught by any test.
func MustLoad(fsys fs.FS, path string) Queries {
	q, err := Load(fsys, path)
	if err != nil {
		panic(err)
	}
	return q
}

// Load reads path from fsys.
func Load(fsys fs.FS, path string) (Queries, error) {
	qs, err := loadOrdered(fsys, path)
	if err != nil {
		return nil, err
	}
	q := Queries{}
	for _, x := range qs {
		q[x.Name] = x.SQL
	}
	return q, nil
}

func loadOrdered(fsys fs.FS, path string) ([]Query, error) {
	b, err := fs.ReadFile(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("sqlfile: %w", err)
	}
	var q []Query
	seen := map[string]bool{}
	var name string
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		text := strings.TrimSuffix(strings.TrimSpace(body.String()), ";")
		if text == "" {
			return fmt.Errorf("sqlfile: %s: query %q is empty", path, name)
		}
		if seen[name] {
			return fmt.Errorf("sqlfile: %s: query %q defined twice", path, name)
		}
		seen[name] = true
		q = append(q, Query{Name: name, SQL: text})
		body.Reset()
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			if err := flush(); err != nil {
				return nil, err
			}
			name = strings.TrimSpace(rest)
			continue
		}
		if name != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return q, nil
}

// Get returns the named query, panicking if it does not exist (a build mistake).
func (q Queries) Get(name string) string {
	s, ok := q[name]
	if !ok {
		panic(fmt.Sprintf("sqlfile: no query named %q", name))
	}
	return s
}
