package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// processCPU is the user + system CPU seconds this process has used. The
// systems run in this process, so a difference of two readings is the
// system's CPU plus the load generator's (scheduling and recording).
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procTicks is utime + stime of a process from /proc/<pid>/stat, in clock
// ticks (USER_HZ, 100 per second on Linux).
func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: fields are
	// counted from the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + st, true
}

const userHZ = 100

// pgAdmin is a small connection to the PostgreSQL server for the run's own
// bookkeeping: schemas, and the CPU of the backends serving the run.
type pgAdmin struct {
	pool *pgxpool.Pool
	base string // the --postgres URL

	mu   sync.Mutex
	seen map[int]int64 // backend pid → most ticks seen: a backend that ended keeps its last reading
}

func newPGAdmin(ctx context.Context, base string) (*pgAdmin, error) {
	u, err := withParams(base, map[string]string{"application_name": "lapsecmp-admin"})
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &pgAdmin{pool: pool, base: base, seen: map[int]int64{}}, nil
}

// createSchema makes a fresh schema and returns the URL of a connection
// whose search_path is it and whose backends carry app as application_name.
func (a *pgAdmin) createSchema(ctx context.Context, schema, app string) (string, error) {
	if _, err := a.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return "", fmt.Errorf("drop schema %s: %w", schema, err)
	}
	if _, err := a.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	return withParams(a.base, map[string]string{"search_path": schema, "application_name": app})
}

func (a *pgAdmin) dropSchema(ctx context.Context, schema string) error {
	if _, err := a.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// backendCPU is the CPU seconds used so far by the backends whose
// application_name is app, counting backends seen earlier that have ended
// since at their last reading. -1 when /proc cannot be read (a server on
// another host or in a container of its own).
func (a *pgAdmin) backendCPU(ctx context.Context, app string) float64 {
	rows, err := a.pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		return -1
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return -1
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	read := 0
	for _, pid := range pids {
		if t, ok := procTicks(int(pid)); ok {
			a.seen[int(pid)] = max(a.seen[int(pid)], t)
			read++
		}
	}
	if len(pids) > 0 && read == 0 {
		return -1
	}
	var sum int64
	for _, t := range a.seen {
		sum += t
	}
	return float64(sum) / userHZ
}

func (a *pgAdmin) version(ctx context.Context) string {
	var v string
	if err := a.pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	return v
}

func (a *pgAdmin) close() { a.pool.Close() }

// withParams sets query parameters of a URL.
func withParams(raw string, params map[string]string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("postgres URL: %w", err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redisAdmin is a client for the run's bookkeeping on Redis: the server's
// CPU and removing the run's keys.
type redisAdmin struct {
	rdb *goredis.Client
}

func newRedisAdmin(ctx context.Context, u string) (*redisAdmin, error) {
	opt, err := goredis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", err)
	}
	rdb := goredis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return &redisAdmin{rdb: rdb}, nil
}

// info reads one field of INFO section.
func (a *redisAdmin) info(ctx context.Context, section string) map[string]string {
	s, err := a.rdb.Info(ctx, section).Result()
	if err != nil {
		return nil
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// cpu is the CPU seconds redis-server has used (user + system, all threads),
// whoever it served: on a shared Redis it counts the other clients too.
func (a *redisAdmin) cpu(ctx context.Context) float64 {
	m := a.info(ctx, "cpu")
	u, err1 := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, err2 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + s
}

func (a *redisAdmin) version(ctx context.Context) string {
	if v := a.info(ctx, "server")["redis_version"]; v != "" {
		return v
	}
	return "?"
}

// deleteKeys removes every key matching pattern (SCAN, bounded batches).
func (a *redisAdmin) deleteKeys(ctx context.Context, pattern string) error {
	var cursor uint64
	for range 1_000_000 { // bounded: SCAN ends long before on any real keyspace
		keys, next, err := a.rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return fmt.Errorf("redis: scan %s: %w", pattern, err)
		}
		if len(keys) > 0 {
			if err := a.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("redis: delete %s: %w", pattern, err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
	return fmt.Errorf("redis: scan %s did not finish", pattern)
}

// keysMemory sums MEMORY USAGE (every element counted) of the keys matching
// pattern: what they take in Redis, whatever else the server holds.
func (a *redisAdmin) keysMemory(ctx context.Context, pattern string) (int64, error) {
	var cursor uint64
	var sum int64
	for range 1_000_000 {
		keys, next, err := a.rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return 0, fmt.Errorf("redis: scan %s: %w", pattern, err)
		}
		for _, k := range keys {
			n, err := a.rdb.MemoryUsage(ctx, k, 0).Result()
			if errors.Is(err, goredis.Nil) {
				continue // gone since the SCAN (a lock released)
			}
			if err != nil {
				return 0, fmt.Errorf("redis: memory usage of %s: %w", k, err)
			}
			sum += n
		}
		if cursor = next; cursor == 0 {
			return sum, nil
		}
	}
	return 0, fmt.Errorf("redis: scan %s did not finish", pattern)
}

func (a *redisAdmin) close() { a.rdb.Close() }
