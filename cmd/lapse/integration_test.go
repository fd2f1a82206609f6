package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store/mysql"
)

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// postgresURL returns a store URL on a fresh schema of LAPSE_TEST_POSTGRES,
// dropped when the test ends.
func postgresURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_POSTGRES")
	if base == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect %s: %v", redactURL(base), err)
	}
	defer conn.Close(ctx)
	schema := randomName("lapse_e2e_")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// mysqlURL returns a store URL on a fresh database of LAPSE_TEST_MYSQL's
// server, dropped when the test ends.
func mysqlURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_MYSQL")
	if base == "" {
		t.Skip("set LAPSE_TEST_MYSQL=mysql://… to run")
	}
	cfg, err := mysql.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	name := randomName("lapse_e2e_")
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", cfg.FormatDSN()); err == nil {
			_, _ = db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func TestServeEndToEndOnPostgres(t *testing.T) {
	t.Parallel()
	for _, timers := range []string{"sql", "memory"} {
		t.Run(timers, func(t *testing.T) {
			t.Parallel()
			endToEnd(t, postgresURL(t), timers)
		})
	}
}

func TestServeEndToEndOnMySQL(t *testing.T) {
	t.Parallel()
	for _, timers := range []string{"sql", "memory"} {
		t.Run(timers, func(t *testing.T) {
			t.Parallel()
			endToEnd(t, mysqlURL(t), timers)
		})
	}
}

// Three `lapse serve --timers sql` processes on one PostgreSQL, one of them
// killed with SIGKILL while deadlines fire: every order is cancelled exactly
// once (the audit counts one order.cancelled event per cancelled order and one
// stock release per item) and nothing is left PENDING.
func TestThreeInstancesOnePostgresOneKilled(t *testing.T) {
	t.Parallel()
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	var servers []*server
	for range 3 {
		servers = append(servers, startServe(t, nil, "--store", storeURL, "--timers", "sql", "--grace", "0s",
			"--sweep-interval", "1s", "--sweep-lag", "2s", "--no-migrate"))
	}
	servers[0].call("PUT", "/v1/skus/hot", `{"available": 1000}`, 200)
	const orders = 300
	// Deadlines spread over 3 s starting 3 s from now, orders placed through all three.
	first := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := w; i < orders; i += 3 {
				due := first.Add(time.Duration(i) * 3 * time.Second / orders)
				secs := time.Until(due).Seconds()
				if secs < 0.05 {
					t.Errorf("order %d placed after its deadline: the test machine is too slow", i)
					return
				}
				servers[w].call("POST", "/v1/orders", fmt.Sprintf(`{"id":"k-%03d","items":[{"sku":"hot","qty":1}],"amount_cents":100,"timeout_seconds":%.3f}`, i, secs), 201)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(first.Add(1500 * time.Millisecond))) // half of the deadlines have passed
	killed := servers[1]
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-killed.done
	deadline := time.Now().Add(30 * time.Second)
	for {
		page := servers[0].call("GET", "/v1/orders?status=PENDING&limit=1", "", 200)
		if len(page["orders"].([]any)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders still PENDING 30s after the last deadline: %v", page)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancelled := 0
	cursor := ""
	for {
		page := servers[2].call("GET", "/v1/orders?status=CANCELLED&limit=500&cursor="+cursor, "", 200)
		for _, o := range page["orders"].([]any) {
			if o.(map[string]any)["cancel_reason"] == "timeout" {
				cancelled++
			}
		}
		if cursor = page["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if cancelled != orders {
		t.Fatalf("%d orders cancelled for timeout, want %d", cancelled, orders)
	}
	servers[0].stop()
	servers[2].stop()
	out, code := lapseCmd(t, nil, "audit", "--store", storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
}
