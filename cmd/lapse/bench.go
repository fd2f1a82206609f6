package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// discardSink drops events: the bench measures cancels, not the relay's log.
type discardSink struct{}

func (discardSink) Publish(context.Context, []order.Event) error { return nil }

var _ outbox.Sink = discardSink{}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	storeURL := fs.String("store", "", "store URL (default: a fresh SQLite file in a temporary directory)")
	timers := fs.String("timers", "memory", "timer backend: memory or sql")
	orders := fs.Int("orders", 2000, "orders to create")
	lead := fs.Duration("lead", 5*time.Second, "time from the start to the first deadline (creation must finish within it)")
	spread := fs.Duration("spread", time.Second, "window the deadlines are spread over")
	payRatio := fs.Float64("pay-ratio", 0, "fraction of orders paid before their deadline")
	skus := fs.Int("skus", 100, "SKUs the orders spread over")
	concurrency := fs.Int("concurrency", 8, "goroutines creating orders")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *storeURL == "" {
		dir, err := os.MkdirTemp("", "lapse-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*storeURL = "sqlite://" + filepath.Join(dir, "bench.db")
	}
	st, err := openStore(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	cfg := lapse.Config{Store: st, Sink: discardSink{}, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if err := setTimers(&cfg, *timers); err != nil {
		return err
	}
	svc, err := lapse.New(cfg)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	progress := stderr
	if *asJSON {
		progress = nil
	}
	fmt.Fprintf(stderr, "lapse bench: %d orders due over %s, %s from now, on %s + %s timers\n", *orders, *spread, *lead, redactURL(*storeURL), *timers)
	res, err := bench.Run(ctx, svc, st, bench.Config{Orders: *orders, Lead: *lead, Spread: *spread, PayRatio: *payRatio,
		SKUs: *skus, Concurrency: *concurrency, Progress: progress})
	stop()
	if rerr := <-done; err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "orders        %d (created %.0f/s, paid %d, cancelled %d)\n", res.Orders, res.CreatedPerS, res.Paid, res.Cancelled)
		fmt.Fprintf(stdout, "lateness ms   p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f\n",
			res.LatenessMS.P50, res.LatenessMS.P90, res.LatenessMS.P99, res.LatenessMS.P999, res.LatenessMS.Max)
		fmt.Fprintf(stdout, "early         %d\n", res.Early)
		fmt.Fprintf(stdout, "drain         last cancel %.3fs after the last deadline\n", res.DrainSeconds)
		fmt.Fprintf(stdout, "audit         %s\n", map[bool]string{true: "ok", false: fmt.Sprintf("FAILED %v", res.Audit)}[res.AuditOK])
	}
	if !res.AuditOK || res.Early > 0 {
		return exitError{1}
	}
	return nil
}
