package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"
)

// The --config file (or LAPSE_CONFIG) holds flag values: a YAML (.yaml,
// .yml) or TOML (.toml) mapping whose keys are the flags' names, without
// dashes in front (store: postgres://…, grace: 60s). A list sets a
// repeatable flag once per item (sink: [log, https://…]). The file comes
// last: a flag on the command line wins, then LAPSE_<NAME>, then the file,
// then the flag's default. One file can serve every command: a key another
// command has (addr, for lapse migrate) is left alone, a key no command
// has is an error naming it, so a typo is not silently ignored. A flag
// read from the command line only (commandLineOnly) is not read from the
// file either. The file may hold secrets (--api-token): values are never
// printed, only keys. lapse.example.yaml is a commented example.

// knownFlagNames is knownFlags (cli.go), set by init: the command table
// refers to the run functions, which parse flags, which read the file,
// which needs the table's flags — a cycle Go's variable initialisation
// refuses.
var knownFlagNames func() map[string]bool

// applyConfig sets, from the file at path, every flag of fs that skip does
// not exempt, and returns the names it set.
func applyConfig(fs *flagSet, path string, skip func(name string) bool) (map[string]bool, error) {
	values, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	known := knownFlagNames()
	set := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		f := fs.Lookup(key)
		if f == nil {
			if !known[key] {
				return nil, fmt.Errorf("unknown key %q: no lapse command has a flag --%s", key, key)
			}
			continue // another command's
		}
		if skip(key) {
			continue
		}
		items, err := configStrings(values[key])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if _, repeatable := f.Value.(*listFlag); !repeatable && len(items) != 1 {
			return nil, fmt.Errorf("%s: want one value, not a list of %d: --%s is not repeatable", key, len(items), key)
		}
		for _, v := range items {
			// The value is not quoted: it may be a secret.
			if err := fs.Set(key, v); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		set[key] = true
	}
	return set, nil
}

// readConfig reads the file as YAML or TOML, by its extension.
func readConfig(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	values := map[string]any{}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		err = yaml.Unmarshal(b, &values)
	case ".toml":
		_, err = toml.Decode(string(b), &values)
	default:
		return nil, fmt.Errorf("want a .yaml, .yml or .toml file")
	}
	if err != nil {
		return nil, err
	}
	return values, nil
}

// configStrings is a value of the file as the command line would give it:
// one string per item.
func configStrings(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	out := make([]string, 0, len(list))
	for _, item := range list {
		var s string
		switch x := item.(type) {
		case string:
			s = x
		case bool:
			s = strconv.FormatBool(x)
		case int:
			s = strconv.Itoa(x)
		case int64:
			s = strconv.FormatInt(x, 10)
		case uint64:
			s = strconv.FormatUint(x, 10)
		case float64:
			s = strconv.FormatFloat(x, 'f', -1, 64)
		case time.Time:
			s = x.Format(time.RFC3339Nano)
		case nil, map[string]any, []any:
			return nil, fmt.Errorf("want a value or a list of values")
		default:
			s = fmt.Sprint(x)
		}
		out = append(out, s)
	}
	return out, nil
}
