package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store/mysql"
)

func TestVersionNamesTheBuild(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, code := lapseCmd(t, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "lapse ") || !strings.Contains(out, " go1.") {
			t.Errorf("lapse %v: exit %d:\n%s", args, code, out)
		}
	}
	out, code := lapseCmd(t, nil, "version", "--json")
	var b buildInfo
	if err := json.Unmarshal([]byte(out), &b); code != 0 || err != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go1.") || b.Module != "github.com/lapsehq/lapse" {
		t.Errorf("lapse version --json: exit %d, %v:\n%s", code, err, out)
	}
	if out, code := lapseCmd(t, nil, "version", "extra"); code != 2 {
		t.Errorf("lapse version extra: exit %d, want 2:\n%s", code, out)
	}
}

// The commit a release or `make build` stamps is named, and a build that
// knows none says how to get one rather than print nothing.
func TestBuildInfoString(t *testing.T) {
	b := buildInfo{Version: "v0.1.0", Commit: "7739acfd39e9", Time: "2026-12-02T07:18:33Z", Modified: true, GoVersion: "go1.26.8"}
	if got, want := b.String(), "lapse v0.1.0 (commit 7739acfd39e9, modified, 2026-12-02T07:18:33Z) go1.26.8"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b = buildInfo{Version: "dev", GoVersion: "go1.26.8"}
	if got := b.String(); !strings.Contains(got, "commit unknown") || !strings.Contains(got, "make build") {
		t.Errorf("got %q", got)
	}
}

// A database a newer lapse migrated (a version this build has no
// migration for) is refused by every command, migrate included, with both
// versions named, and nothing is written to it.
func TestANewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	type target struct {
		name, url string
		exec      func(sql string) error
		count     func() (int, error)
	}
	var targets []target

	path := filepath.Join(t.TempDir(), "newer.db")
	sqliteExec := func(q string) (int, error) {
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			return 0, err
		}
		defer db.Close()
		if strings.HasPrefix(q, "SELECT") {
			var n int
			return n, db.QueryRow(q).Scan(&n)
		}
		_, err = db.Exec(q)
		return 0, err
	}
	targets = append(targets, target{"sqlite", "sqlite://" + path,
		func(q string) error { _, err := sqliteExec(q); return err },
		func() (int, error) { return sqliteExec("SELECT count(*) FROM lapse_schema_migrations") }})

	pgURL := postgresURL(t)
	pgExec := func(q string) (int, error) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		if strings.HasPrefix(q, "SELECT") {
			var n int
			return n, conn.QueryRow(ctx, q).Scan(&n)
		}
		_, err = conn.Exec(ctx, q)
		return 0, err
	}
	targets = append(targets, target{"postgres", pgURL,
		func(q string) error { _, err := pgExec(q); return err },
		func() (int, error) { return pgExec("SELECT count(*) FROM lapse_schema_migrations") }})

	myURL := mysqlURL(t)
	cfg, err := mysql.ParseURL(myURL)
	if err != nil {
		t.Fatal(err)
	}
	myExec := func(q string) (int, error) {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return 0, err
		}
		defer db.Close()
		if strings.HasPrefix(q, "SELECT") {
			var n int
			return n, db.QueryRow(q).Scan(&n)
		}
		_, err = db.Exec(q)
		return 0, err
	}
	targets = append(targets, target{"mysql", myURL,
		func(q string) error { _, err := myExec(q); return err },
		func() (int, error) { return myExec("SELECT count(*) FROM lapse_schema_migrations") }})

	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			if out, code := lapseCmd(t, nil, "migrate", "--store", tg.url); code != 0 {
				t.Fatalf("migrate: exit %d:\n%s", code, out)
			}
			before, err := tg.count()
			if err != nil {
				t.Fatal(err)
			}
			// A migration of a later lapse, as that lapse records it.
			if err := tg.exec("INSERT INTO lapse_schema_migrations (version, name, applied_at) VALUES (999, 'from_the_future', " + nowValue(tg.name) + ")"); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"migrate", "--store", tg.url},
				{"serve", "--addr", "127.0.0.1:0", "--store", tg.url},
				{"serve", "--addr", "127.0.0.1:0", "--no-migrate", "--store", tg.url},
				{"audit", "--store", tg.url},
			} {
				out, code := lapseCmdWithin(t, time.Minute, args...)
				if code == 0 || !strings.Contains(out, "the schema is at version 999, this lapse knows versions up to") ||
					!strings.Contains(out, "migrated by a newer lapse") || !strings.Contains(out, "this binary: lapse ") {
					t.Errorf("%v: exit %d, want a refusal naming both versions:\n%s", args, code, out)
				}
			}
			after, err := tg.count()
			if err != nil {
				t.Fatal(err)
			}
			if after != before+1 {
				t.Errorf("%d migrations recorded after the refusals, want %d", after, before+1)
			}
		})
	}
}

// lapseCmdWithin is lapseCmd for a command that must end by itself (a
// serve that should refuse to start): killed after d, exit -1.
func lapseCmdWithin(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// nowValue is an applied_at each store's lapse_schema_migrations takes.
func nowValue(store string) string {
	switch store {
	case "sqlite":
		return fmt.Sprint(0)
	default:
		return "CURRENT_TIMESTAMP"
	}
}
