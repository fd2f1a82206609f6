package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
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
		t.Fatalf("connect %s: %v", redact.URL(base), err)
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
	for _, timers := range []string{"sql", "memory", "redis"} {
		t.Run(timers, func(t *testing.T) {
			t.Parallel()
			if timers == "redis" {
				timers = redisURL(t, 10)
			}
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
	must(servers[0].api().SetStock(t.Context(), "hot", 1000))(t)
	const orders = 300
	// Deadlines spread over 3 s starting 3 s after the orders are placed, through all three.
	first := time.Now().Add(placeAhead + 2*time.Second)
	placeOrders(t, servers, "k", orders, first, 3*time.Second)
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(first.Add(1500 * time.Millisecond))) // half of the deadlines have passed
	killed := servers[1]
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-killed.done
	if late := settled(t, servers[2], 30*time.Second); len(late) != orders {
		t.Fatalf("%d orders cancelled for timeout, want %d", len(late), orders)
	}
	servers[0].stop()
	servers[2].stop()
	out, code := lapseCmd(t, nil, "audit", "--store", storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
}

// redisURL returns LAPSE_TEST_REDIS pointed at database db, flushed first:
// each end-to-end test of the redis timers has a database of its own (the
// package tests use database 0 with a key prefix per test).
func redisURL(t *testing.T, db int) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_REDIS")
	if base == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://… to run")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = fmt.Sprintf("/%d", db)
	flushRedis(t, u.String())
	return u.String()
}

func flushRedis(t *testing.T, u string) {
	t.Helper()
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHDB %s: %v", u, err)
	}
}

// placeAhead is how long placeOrders may take for 300 orders on a loaded
// machine (-race, the suites in parallel): the first deadline is put past it.
// Each create carries an Idempotency-Key (package client always sends one,
// so that its retries are safe), which roughly doubles a create's cost on
// PostgreSQL (1.4 s → 3 s for 300 orders, three servers, -race). Under
// the whole suite with -race on 2 cores it took over 4 s (CI, 2026-12-02):
// 6 s keeps these tests about what they test, not about the machine's speed.
const placeAhead = 6 * time.Second

// placeOrders creates n orders through the servers in turn (four requests in
// flight per server), with deadlines spread evenly over spread starting at
// first.
func placeOrders(t *testing.T, servers []*server, prefix string, n int, first time.Time, spread time.Duration) {
	t.Helper()
	const perServer = 4
	var clients []*client.Client
	for _, s := range servers {
		clients = append(clients, s.api())
	}
	var wg sync.WaitGroup
	for w := range len(servers) * perServer {
		wg.Go(func() {
			for i := w; i < n; i += len(servers) * perServer {
				due := first.Add(time.Duration(i) * spread / time.Duration(n))
				secs := time.Until(due).Seconds()
				if secs < 0.05 {
					t.Errorf("order %d placed after its deadline: the test machine is too slow", i)
					return
				}
				_, err := clients[w%len(clients)].CreateOrder(t.Context(), client.CreateOrder{ID: fmt.Sprintf("%s-%03d", prefix, i),
					Items: []order.Item{{SKU: "hot", Qty: 1}}, AmountCents: 100, Timeout: time.Duration(secs * float64(time.Second))})
				if err != nil {
					t.Errorf("order %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// settled waits until no order is PENDING, then returns every timeout-cancelled
// order's lateness (cancelled_at − cancel_after).
func settled(t *testing.T, s *server, within time.Duration) []time.Duration {
	t.Helper()
	c, ctx := s.api(), t.Context()
	deadline := time.Now().Add(within)
	for {
		page := must(c.ListOrders(ctx, client.ListOrders{Status: order.Pending, Limit: 1}))(t)
		if len(page.Orders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders still PENDING after %s: %s…", within, page.Orders[0].ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var late []time.Duration
	for o, err := range c.Orders(ctx, client.ListOrders{Status: order.Cancelled, Limit: 500}) {
		if err != nil {
			t.Fatal(err)
		}
		if o.CancelReason == order.ReasonTimeout {
			late = append(late, o.CancelledAt.Sub(o.CancelAfter))
		}
	}
	return late
}

// Two `lapse serve --timers redis://…` on one PostgreSQL and one Redis, one
// SIGKILLed mid-flight, the fallback sweep off (only Redis timers can cancel):
// every order is cancelled exactly once, the killed instance's claimed
// timers come back after their lease, and the audit passes.
func TestTwoInstancesOnRedisOneKilled(t *testing.T) {
	t.Parallel()
	twoInstancesOneKilled(t, redisURL(t, 8), 300, 40*time.Second)
}

// Redis loses its data (FLUSHDB) while deadlines fire, with the fallback sweep
// off: lapse notices, rebuilds the timers from the orders table, and every
// order is still cancelled within a few seconds of its deadline.
func TestRedisDataLossUnderLoad(t *testing.T) {
	t.Parallel()
	storeURL, timers := postgresURL(t), redisURL(t, 9)
	s := startServe(t, nil, "--store", storeURL, "--timers", timers, "--grace", "0s", "--sweep-interval", "0")
	must(s.api().SetStock(t.Context(), "hot", 1000))(t)
	const orders = 300
	first := time.Now().Add(placeAhead + time.Second)
	placeOrders(t, []*server{s}, "f", orders, first, 4*time.Second)
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(first.Add(time.Second)))
	flushRedis(t, timers)
	late := settled(t, s, 30*time.Second)
	if len(late) != orders {
		t.Fatalf("%d orders cancelled, want %d", len(late), orders)
	}
	var worst time.Duration
	for _, l := range late {
		if l < 0 {
			t.Fatalf("an order was cancelled %s before its deadline", -l)
		}
		worst = max(worst, l)
	}
	t.Logf("worst lateness across the data loss: %s", worst)
	if worst > 5*time.Second {
		t.Fatalf("worst lateness %s: the rebuild took too long", worst)
	}
	s.stop()
	if out, code := lapseCmd(t, nil, "audit", "--store", storeURL); code != 0 {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
}

// Two deployments of lapse — each with a store of its own and the same order
// ids — share one Redis database with different --redis-prefix values, the
// fallback sweep off: neither takes the other's timers, so every order of
// each is cancelled by its own timers, and every key in Redis carries one
// of the two prefixes.
func TestTwoDeploymentsOnOneRedisDatabase(t *testing.T) {
	t.Parallel()
	timers := redisURL(t, 11)
	prefixes := []string{"shop-eu", "shop-us"}
	var servers []*server
	for _, p := range prefixes {
		s := startServe(t, []string{"LAPSE_REDIS_PREFIX=" + p}, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"),
			"--timers", timers, "--grace", "0s", "--sweep-interval", "0")
		if !strings.Contains(s.logs.String(), "redis_prefix="+p) {
			t.Fatalf("the start-up log does not show the prefix %s:\n%s", p, s.logs.String())
		}
		must(s.api().SetStock(t.Context(), "tee", 100))(t)
		servers = append(servers, s)
	}
	const orders = 20
	for i := range orders {
		for _, s := range servers {
			must(s.api().CreateOrder(t.Context(), client.CreateOrder{ID: fmt.Sprintf("o-%02d", i), Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: time.Second}))(t)
		}
	}
	for _, s := range servers {
		if late := settled(t, s, 15*time.Second); len(late) != orders {
			t.Fatalf("%d orders cancelled for timeout, want %d", len(late), orders)
		}
	}
	for _, s := range servers {
		s.stop()
	}
	opt, err := goredis.ParseURL(timers)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		p, _, _ := strings.Cut(k, ":")
		if p != prefixes[0] && p != prefixes[1] {
			t.Errorf("key %q carries neither prefix", k)
		}
		seen[p] = true
	}
	if !seen[prefixes[0]] || !seen[prefixes[1]] {
		t.Errorf("keys %v: want some of each deployment", keys)
	}
}

func TestRedisPrefixIsValidated(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "shop{eu}"} {
		out, code := lapseRun(t, 15*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--timers", "redis://127.0.0.1:1/0", "--redis-prefix", p)
		if code != 2 || !strings.Contains(out, "--redis-prefix: redis: key prefix") {
			t.Errorf("--redis-prefix %q: exit %d:\n%s", p, code, out)
		}
	}
}
