// Package testdb gives a test a PostgreSQL schema or a MySQL/MariaDB
// database of its own on the servers LAPSE_TEST_POSTGRES and
// LAPSE_TEST_MYSQL name, dropped when the test ends. Without the variable
// the test is skipped (CI fails on any skip, so it runs there).
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// name is a fresh identifier of [a-z0-9_]: safe to put in DDL text.
func name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresSchema returns LAPSE_TEST_POSTGRES pointed at a new schema
// (search_path), dropped with everything in it when the test ends.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_POSTGRES")
	if base == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	schema := name("lapse_t_")
	admin := func(stmt string) {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatalf("connect to LAPSE_TEST_POSTGRES: %v", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	admin("CREATE SCHEMA " + schema)
	t.Cleanup(func() { admin("DROP SCHEMA " + schema + " CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// MySQLDatabase creates a new database on the server LAPSE_TEST_MYSQL
// names (mysql://user:pass@host:port/db), dropped when the test ends, and
// returns the go-sql-driver/mysql configuration of a connection to it
// (the driver's defaults otherwise: a shop's own DSN sets what it needs).
func MySQLDatabase(t testing.TB) *gomysql.Config {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_MYSQL")
	if base == "" {
		t.Skip("set LAPSE_TEST_MYSQL=mysql://… to run")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LAPSE_TEST_MYSQL: %v", err)
	}
	dc := gomysql.NewConfig()
	dc.Net, dc.Addr = "tcp", u.Host
	if u.Port() == "" {
		dc.Addr += ":3306"
	}
	dc.User = u.User.Username()
	dc.Passwd, _ = u.User.Password()
	admin, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db := name("lapse_t_")
	if _, err := admin.Exec("CREATE DATABASE " + db); err != nil {
		admin.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + db); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	dc.DBName = db
	return dc
}
