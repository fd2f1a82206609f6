package lapse_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/postgres"
)

// BenchmarkLateness measures how late timeout cancels come with the sql
// timers (PollStore) on PostgreSQL, orders due at a steady rate, back to
// back in one process: the service mode (lapse's own creates, no hook: what
// `lapse bench --timers sql` runs), then embedded mode — each order a
// shop's checkout (its own row and CreateOrderTx in one transaction) and
// each cancel moving the shop's row in the same commit, by OnCancelled (a
// statement per order) or OnCancelledMany (one per batch), and the last
// with the NOTIFY at commit disabled (postgres.Config.DisableDueNotify: the
// sql timers do not need it). The harness is
// `lapse bench`'s (package bench): open loop, orders created at --rate for
// --duration, each due --timeout after its creation, lateness =
// cancelled_at - cancel_after by the database's clock, then the audit.
// Each run is one pass (-benchtime 1x); it reports the percentiles in ms.
//
//	LAPSE_TEST_POSTGRES=… LAPSE_BENCH_RATE=1000 LAPSE_BENCH_DURATION=30s \
//	  go test -run '^$' -bench Lateness -benchtime 1x -timeout 30m .
//
// or, the deadlines of orders created beforehand due over a window
// (LAPSE_BENCH_SPREAD=10s LAPSE_BENCH_ORDERS=10000 LAPSE_BENCH_LEAD=60s:
// 1,000 due a second with nothing but the cancels running).
func BenchmarkLateness(b *testing.B) {
	b.Run("service", func(b *testing.B) { benchLateness(b, "", false) })
	b.Run("embedded/OnCancelled", func(b *testing.B) { benchLateness(b, "one", false) })
	b.Run("embedded/OnCancelledMany", func(b *testing.B) { benchLateness(b, "many", false) })
	b.Run("embedded/OnCancelledMany/no-notify", func(b *testing.B) { benchLateness(b, "many", true) })
}

// latenessConfig is the run's workload, from the environment.
func latenessConfig(b *testing.B) bench.Config {
	cfg := bench.Config{Rate: 1000, Duration: 30 * time.Second, Timeout: 5 * time.Second, SKUs: 100}
	if v := os.Getenv("LAPSE_BENCH_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("LAPSE_BENCH_RATE=%q: want orders per second", v)
		}
		cfg.Rate = r
	}
	// A window workload instead (LAPSE_BENCH_SPREAD): LAPSE_BENCH_ORDERS
	// created first, within LAPSE_BENCH_LEAD, then due evenly over the
	// spread — the cancel path alone at orders/spread due a second, the
	// checkouts' commits out of its way.
	if v := os.Getenv("LAPSE_BENCH_SPREAD"); v != "" {
		cfg.Rate, cfg.Duration, cfg.Timeout, cfg.Orders, cfg.Lead = 0, 0, 0, 10000, 60*time.Second
		if v := os.Getenv("LAPSE_BENCH_ORDERS"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				b.Fatalf("LAPSE_BENCH_ORDERS=%q: want a count", v)
			}
			cfg.Orders = n
		}
	}
	for name, into := range map[string]*time.Duration{"LAPSE_BENCH_DURATION": &cfg.Duration, "LAPSE_BENCH_TIMEOUT": &cfg.Timeout,
		"LAPSE_BENCH_SPREAD": &cfg.Spread, "LAPSE_BENCH_LEAD": &cfg.Lead} {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				b.Fatalf("%s=%q: want a duration", name, v)
			}
			*into = d
		}
	}
	return cfg
}

func benchLateness(b *testing.B, hook string, noNotify bool) {
	ctx := context.Background()
	u := testdb.PostgresSchema(b)
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 10 // lapse's own default (postgres.Config.MaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var st *postgres.Store
	var checkout bench.Checkout
	if hook == "" {
		st, err = postgres.Open(ctx, postgres.Config{URL: u, DisableDueNotify: noNotify})
	} else {
		if _, err := pool.Exec(ctx, "CREATE TABLE shop_orders (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		var hooks postgres.Hooks
		if hook == "many" {
			hooks.OnCancelledMany = func(ctx context.Context, tx pgx.Tx, os []order.Order) error {
				ids := make([]string, len(os))
				for i, o := range os {
					ids[i] = o.ID
				}
				_, err := tx.Exec(ctx, "UPDATE shop_orders SET status = 'cancelled' WHERE id = ANY($1) AND status = 'pending'", ids)
				return err
			}
		} else {
			hooks.OnCancelled = func(ctx context.Context, tx pgx.Tx, o order.Order) error {
				_, err := tx.Exec(ctx, "UPDATE shop_orders SET status = 'cancelled' WHERE id = $1 AND status = 'pending'", o.ID)
				return err
			}
		}
		st, err = postgres.FromPool(pool, postgres.Config{Hooks: hooks, DisableDueNotify: noNotify})
		checkout = func(ctx context.Context, svc *lapse.Service, r lapse.CreateOrderRequest) (order.Order, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return order.Order{}, err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "INSERT INTO shop_orders (id, status) VALUES ($1, 'pending')", r.ID); err != nil {
				return order.Order{}, err
			}
			res, err := svc.CreateOrderTx(ctx, st.InTx(tx), r)
			if err != nil {
				return order.Order{}, err
			}
			return res.Order, tx.Commit(ctx)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, PollStore: true, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	cfg := latenessConfig(b)
	b.ResetTimer()
	var res bench.Result
	for range b.N {
		target := bench.Running(svc, st)
		if checkout != nil {
			target = bench.RunningEmbedded(svc, st, checkout)
		}
		if res, err = bench.Drive(ctx, target, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !res.AuditOK || res.Cancelled == 0 {
		b.Fatalf("the run: %d cancelled, audit %+v", res.Cancelled, res.Audit)
	}
	if hook != "" {
		var left int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM shop_orders s JOIN lapse_orders o ON o.id = s.id WHERE o.status = 'CANCELLED' AND s.status <> 'cancelled'").Scan(&left); err != nil || left != 0 {
			b.Fatalf("%d shop rows not moved with lapse's cancel (%v)", left, err)
		}
	}
	b.ReportMetric(res.CreatedPerS, "created/s")
	b.ReportMetric(float64(res.Cancelled), "cancelled")
	b.ReportMetric(res.LatenessMS.P50, "p50-ms")
	b.ReportMetric(res.LatenessMS.P99, "p99-ms")
	b.ReportMetric(res.LatenessMS.Max, "max-ms")
	b.ReportMetric(0, "ns/op")
}
