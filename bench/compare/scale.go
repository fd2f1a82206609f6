package main

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/timer/memory"
	lredis "github.com/lapsehq/lapse/timer/redis"
)

//go:embed scale.sql
var scaleFS embed.FS

var scaleSQL = sqlfile.MustLoad(scaleFS, "scale.sql")

// scaleResult is what `compare scale` measured.
type scaleResult struct {
	Pending int `json:"pending_timers"`
	History int `json:"history_orders"`

	// Memory timers: seed from PostgreSQL at start, the heap they hold.
	MemorySeedSec     float64 `json:"memory_seed_s"`
	MemoryBytesPerTmr float64 `json:"memory_heap_bytes_per_timer"`
	RedisSeedSec      float64 `json:"redis_seed_s"`
	RedisBytesPerTmr  float64 `json:"redis_bytes_per_timer"`
	RedisRebuildSec   float64 `json:"redis_rebuild_s"`     // the seed's own time after the loss
	RedisRecoverSec   float64 `json:"redis_recover_s"`     // from the keys' deletion to the end of the rebuild
	CreatesEmpty      float64 `json:"creates_per_s_empty"` // lapse creates, empty table
	CreatesFull       float64 `json:"creates_per_s_full"`  // the same, with History + Pending orders in it
	InsertPendingSec  float64 `json:"insert_pending_s"`    // writing the pending orders by SQL
	InsertHistorySec  float64 `json:"insert_history_s"`    // writing the history by SQL
	OrdersTableBytes  int64   `json:"orders_table_bytes"`  // orders with its indexes, full
	CreateConcurrency int     `json:"create_concurrency"`  // goroutines creating
	CreateCount       int     `json:"creates"`             // orders per create measurement
	LoadAvgAtStart    string  `json:"load_average_start"`  // /proc/loadavg
	LoadAvgAtEnd      string  `json:"load_average_end"`    // /proc/loadavg
	PostgresVersion   string  `json:"postgres_version"`    //
	RedisVersion      string  `json:"redis_version"`       //
	StartedAt         string  `json:"started_at"`          // RFC 3339
	TookSec           float64 `json:"took_s"`              //
	CreateRuns        int     `json:"create_runs"`         // runs per create measurement (the best is kept)
	CreateSpreadEmpty string  `json:"creates_per_s_empty_runs"`
	CreateSpreadFull  string  `json:"creates_per_s_full_runs"`
}

// scale is `compare scale`: lapse at scale on this machine's PostgreSQL and
// Redis, in a schema and under a key prefix of the run's own (dropped
// after).
//
//   - N pending orders (written by SQL, a day ahead): the seed of the
//     memory timers from PostgreSQL at start (its time, and the heap the
//     timers take per timer); the seed of the Redis timers (its time, and
//     the Redis memory of the run's keys per timer, MEMORY USAGE); a Redis
//     data loss (the run's keys deleted, as a FLUSHALL would) and the
//     rebuild from the store that follows (the time from the deletion until
//     the rebuild is done).
//   - lapse's creates (store.CreateOrder through the service, group commit,
//     --create-concurrency goroutines, one item each, ids random as UUIDs)
//     on an empty table, then again once --history settled orders (with
//     their items and ledger rows) and the N pending ones are in it.
func scale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		pending  = fs.Int("pending", 1_000_000, "pending orders to seed timers from")
		history  = fs.Int("history", 10_000_000, "settled orders (paid or cancelled) in the table before the second create measurement, besides the pending ones")
		creates  = fs.Int("creates", 20_000, "orders created per create measurement")
		runs     = fs.Int("create-runs", 3, "create measurements on each table (the best is kept; all are reported)")
		conc     = fs.Int("create-concurrency", 16, "goroutines creating orders")
		pgURL    = fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL (a schema of the run's own, dropped after)")
		redisURL = fs.String("redis", "redis://127.0.0.1:6379/12", "Redis (keys under a prefix of the run's own, deleted after)")
		asJSON   = fs.Bool("json", false, "print the result as JSON")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pending < 1 || *history < 0 || *creates < 1 || *conc < 1 || *runs < 1 {
		return errors.New("scale: want --pending, --creates, --create-runs and --create-concurrency at least 1, --history at least 0")
	}
	start := time.Now()
	res := scaleResult{Pending: *pending, History: *history, CreateConcurrency: *conc, CreateCount: *creates, CreateRuns: *runs,
		LoadAvgAtStart: loadAvg(), StartedAt: start.UTC().Format(time.RFC3339)}
	run := runID()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "scale %s: "+format+"\n", append([]any{time.Since(start).Round(time.Second)}, a...)...)
	}

	pg, err := newPGAdmin(ctx, *pgURL)
	if err != nil {
		return err
	}
	defer pg.close()
	rds, err := newRedisAdmin(ctx, *redisURL)
	if err != nil {
		return err
	}
	defer rds.close()
	res.PostgresVersion, res.RedisVersion = pg.version(ctx), rds.version(ctx)
	schema := "lapsecmp_" + run + "_scale"
	u, err := pg.createSchema(ctx, schema, "lapsecmp-"+run)
	if err != nil {
		return err
	}
	prefix := "lapsecmp-" + run + "-scale"
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := pg.dropSchema(cleanup, schema); err != nil {
			fmt.Fprintf(stderr, "scale: %v (drop it by hand)\n", err)
		}
		if err := rds.deleteKeys(cleanup, prefix+":*"); err != nil {
			fmt.Fprintf(stderr, "scale: %v\n", err)
		}
	}()
	stock := int64((*creates)*(*runs) + 1001) // every create of the runs and the warm-up
	st, err := openStocked(ctx, u, stock)
	if err != nil {
		return err
	}
	defer st.Close()
	pool := pg.pool

	// The pending orders, and the seeds.
	t0 := time.Now()
	if err := execIn(ctx, pg, schema, scaleSQL["pending"], *pending, "p-"); err != nil {
		return fmt.Errorf("write %d pending orders: %w", *pending, err)
	}
	res.InsertPendingSec = time.Since(t0).Seconds()
	// As autovacuum would before long: the seed's page query is planned on
	// the table's statistics, and a table of a million rows that has none
	// looks empty to the planner.
	if err := execIn(ctx, pg, schema, "ANALYZE"); err != nil {
		return err
	}
	progress("%d pending orders written in %.1fs", *pending, res.InsertPendingSec)

	heap0 := heapNow()
	seeds := make(chan seedLog, 4)
	logger := slog.New(&seedWatcher{seeds: seeds})
	mem, err := lapse.New(lapse.Config{Store: st, Scheduler: memory.New(memory.Config{}), Logger: logger, SweepInterval: -1})
	if err != nil {
		return err
	}
	memCtx, stopMem := context.WithCancel(ctx)
	memDone := make(chan error, 1)
	go func() { memDone <- mem.Run(memCtx) }()
	sl, err := waitSeed(ctx, seeds, 10*time.Minute)
	if err != nil {
		stopMem()
		return fmt.Errorf("memory timers: %w", err)
	}
	want := *pending
	if sl.n != want {
		stopMem()
		return fmt.Errorf("memory timers: seeded %d orders, want %d", sl.n, want)
	}
	res.Pending = want
	res.MemorySeedSec = sl.took.Seconds()
	res.MemoryBytesPerTmr = float64(heapNow()-heap0) / float64(want)
	runtime.KeepAlive(mem)
	stopMem()
	<-memDone
	progress("memory timers: seeded in %.1fs, %.0f heap bytes per timer", res.MemorySeedSec, res.MemoryBytesPerTmr)

	rdb, err := lredis.ParseURL(*redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rs, err := lredis.New(rdb, lredis.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	red, err := lapse.New(lapse.Config{Store: st, Scheduler: rs, Logger: logger, SweepInterval: -1})
	if err != nil {
		return err
	}
	redCtx, stopRed := context.WithCancel(ctx)
	defer stopRed()
	redDone := make(chan error, 1)
	go func() { redDone <- red.Run(redCtx) }()
	if sl, err = waitSeed(ctx, seeds, 10*time.Minute); err != nil {
		return fmt.Errorf("redis timers: %w", err)
	}
	res.RedisSeedSec = sl.took.Seconds()
	used, err := rds.keysMemory(ctx, prefix+":*")
	if err != nil {
		return err
	}
	res.RedisBytesPerTmr = float64(used) / float64(want)
	progress("redis timers: seeded in %.1fs, %.0f bytes per timer", res.RedisSeedSec, res.RedisBytesPerTmr)
	lost := time.Now()
	if err := rds.deleteKeys(ctx, prefix+":*"); err != nil {
		return err
	}
	if sl, err = waitSeed(ctx, seeds, 10*time.Minute); err != nil {
		return fmt.Errorf("redis timers after the loss: %w", err)
	}
	res.RedisRebuildSec, res.RedisRecoverSec = sl.took.Seconds(), time.Since(lost).Seconds()
	progress("redis timers: rebuilt in %.1fs, %.1fs after the keys were deleted", res.RedisRebuildSec, res.RedisRecoverSec)
	stopRed()
	<-redDone

	// The history, and creates again.
	if *history > 0 {
		t0 = time.Now()
		const chunk = 1_000_000
		for done := 0; done < *history; done += chunk {
			n := min(chunk, *history-done)
			if err := execIn(ctx, pg, schema, scaleSQL["history"], n, fmt.Sprintf("h%d-", done/chunk)); err != nil {
				return fmt.Errorf("write the history: %w", err)
			}
			progress("history: %d of %d orders written", done+n, *history)
		}
		res.InsertHistorySec = time.Since(t0).Seconds()
		if err := execIn(ctx, pg, schema, "ANALYZE"); err != nil {
			return err
		}
	}
	if err := pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", schema+".lapse_orders").Scan(&res.OrdersTableBytes); err != nil {
		return err
	}
	// Creates on the full table and on an empty one (a schema of its own),
	// run after run, so that both see the same machine: each store warmed
	// first, then one measurement of each in turn.
	emptySchema := schema + "_empty"
	eu, err := pg.createSchema(ctx, emptySchema, "lapsecmp-"+run)
	if err != nil {
		return err
	}
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := pg.dropSchema(cleanup, emptySchema); err != nil {
			fmt.Fprintf(stderr, "scale: %v (drop it by hand)\n", err)
		}
	}()
	est, err := openStocked(ctx, eu, stock)
	if err != nil {
		return err
	}
	defer est.Close()
	fullSvc, err := lapse.New(lapse.Config{Store: st, Logger: slog.New(slog.DiscardHandler), SweepInterval: -1})
	if err != nil {
		return err
	}
	emptySvc, err := lapse.New(lapse.Config{Store: est, Logger: slog.New(slog.DiscardHandler), SweepInterval: -1})
	if err != nil {
		return err
	}
	for _, svc := range []*lapse.Service{emptySvc, fullSvc} {
		if _, err := createMany(ctx, svc, 1000, *conc, "warm-"); err != nil {
			return err
		}
	}
	var emptyRates, fullRates []float64
	for i := range *runs {
		r, err := createMany(ctx, emptySvc, *creates, *conc, fmt.Sprintf("e%d-", i))
		if err != nil {
			return err
		}
		emptyRates = append(emptyRates, r)
		f, err := createMany(ctx, fullSvc, *creates, *conc, fmt.Sprintf("f%d-", i))
		if err != nil {
			return err
		}
		fullRates = append(fullRates, f)
		progress("creates: %.0f/s on the empty table, %.0f/s with %d orders in it", r, f, *history+*pending)
	}
	res.CreatesEmpty, res.CreateSpreadEmpty = slices.Max(emptyRates), rateList(emptyRates)
	res.CreatesFull, res.CreateSpreadFull = slices.Max(fullRates), rateList(fullRates)
	res.LoadAvgAtEnd, res.TookSec = loadAvg(), time.Since(start).Seconds()

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "| measure | figure |\n| --- | ---: |\n")
	fmt.Fprintf(stdout, "| memory timers: seed of %d pending orders from PostgreSQL | %.1f s |\n", res.Pending, res.MemorySeedSec)
	fmt.Fprintf(stdout, "| memory timers: Go heap per pending timer | %.0f bytes |\n", res.MemoryBytesPerTmr)
	fmt.Fprintf(stdout, "| redis timers: seed of %d pending orders | %.1f s |\n", res.Pending, res.RedisSeedSec)
	fmt.Fprintf(stdout, "| redis timers: Redis memory per pending timer (MEMORY USAGE of the run's keys) | %.0f bytes |\n", res.RedisBytesPerTmr)
	fmt.Fprintf(stdout, "| redis timers: rebuild after the keys were deleted (the seed / from the deletion) | %.1f s / %.1f s |\n", res.RedisRebuildSec, res.RedisRecoverSec)
	fmt.Fprintf(stdout, "| lapse creates/s (%d goroutines, %d orders a run), empty orders table (best of %d: %s) | %.0f |\n", *conc, *creates, *runs, res.CreateSpreadEmpty, res.CreatesEmpty)
	fmt.Fprintf(stdout, "| the same, runs taken in turn with the above, %d orders in the table (%.1f GB with its indexes; best of %d: %s) | %.0f (%+.0f%%) |\n",
		*history+*pending, float64(res.OrdersTableBytes)/1e9, *runs, res.CreateSpreadFull, res.CreatesFull, 100*(res.CreatesFull/res.CreatesEmpty-1))
	fmt.Fprintf(stdout, "\nload average at the start %s, at the end %s; PostgreSQL %s, Redis %s; took %.0f s\n",
		res.LoadAvgAtStart, res.LoadAvgAtEnd, res.PostgresVersion, res.RedisVersion, res.TookSec)
	return nil
}

// openStocked opens the store at u, migrates it and gives each of its skus
// SKUs stock units.
func openStocked(ctx context.Context, u string, stock int64) (*postgres.Store, error) {
	st, err := postgres.Open(ctx, postgres.Config{URL: u})
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, err
	}
	for i := range skus {
		if _, err := st.SetStock(ctx, skuName(i), stock); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

// createMany creates n orders through svc from conc goroutines and returns
// the orders per second. Ids are random, as UUIDs are.
func createMany(ctx context.Context, svc *lapse.Service, n, conc int, tag string) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
					ID:          tag + randomHex(16),
					Items:       []order.Item{{SKU: skuName(i), Qty: 1}},
					AmountCents: 1000,
					Timeout:     time.Hour,
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// execIn runs one statement with search_path set to schema, on a
// connection of its own, as a bulk load: synchronous_commit off, and no
// foreign-key triggers (session_replication_role replica, which needs a
// superuser; the rows written are consistent by construction).
func execIn(ctx context.Context, pg *pgAdmin, schema, sql string, args ...any) error {
	conn, err := pg.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// replica: no foreign-key triggers on a bulk load (superuser only).
	if _, err := conn.Exec(ctx, "SET search_path TO "+quoteIdent(schema)+"; SET synchronous_commit TO off; SET session_replication_role TO replica"); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET search_path; RESET synchronous_commit; RESET session_replication_role") //nolint:errcheck // best effort
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func rateList(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, ", ")
}

// seedLog is one "timers seeded from the store" record of the service.
type seedLog struct {
	n    int
	took time.Duration
}

// seedWatcher is a slog.Handler that passes on the service's seed records.
type seedWatcher struct{ seeds chan<- seedLog }

func (w *seedWatcher) Enabled(context.Context, slog.Level) bool { return true }
func (w *seedWatcher) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *seedWatcher) WithGroup(string) slog.Handler            { return w }
func (w *seedWatcher) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "timers seeded from the store" {
		return nil
	}
	var sl seedLog
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "pending_orders":
			sl.n = int(a.Value.Int64())
		case "took":
			sl.took = a.Value.Duration()
		}
		return true
	})
	select {
	case w.seeds <- sl:
	default:
	}
	return nil
}

func waitSeed(ctx context.Context, seeds <-chan seedLog, limit time.Duration) (seedLog, error) {
	select {
	case sl := <-seeds:
		return sl, nil
	case <-time.After(limit):
		return seedLog{}, fmt.Errorf("no seed within %s", limit)
	case <-ctx.Done():
		return seedLog{}, ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// loadAvg is /proc/loadavg's three averages, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}
