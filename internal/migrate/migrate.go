// Package migrate loads versioned schema migrations embedded per dialect as
// NNN_name.up.sql files. Applying them is the driver's job (each dialect has
// its own transaction and locking rules); this package only finds and orders them.
//
// Released migration files are never edited: a change is a new file.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load returns the *.up.sql migrations under dir, ordered by version.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".up.sql")
		if !ok {
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migrate: %s: want NNN_name.up.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migrate: %s: bad version %q", e.Name(), num)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrate: version %d used by %s and %s", v, other, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		ms = append(ms, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	if len(ms) == 0 {
		return nil, fmt.Errorf("migrate: no migrations in %s", dir)
	}
	return ms, nil
}
