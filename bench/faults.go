package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// DeleteRedisPrefix deletes every key that starts with prefix + ":" on rdb (on
// every master of a Cluster) and returns how many it deleted. With the prefix
// of a redis timer backend it is what a FLUSHALL does to lapse — every timer,
// lease and seed marker gone — without touching anything else a shared Redis
// holds.
func DeleteRedisPrefix(ctx context.Context, rdb goredis.UniversalClient, prefix string) (int, error) {
	if prefix == "" {
		return 0, fmt.Errorf("bench: delete redis keys: empty prefix")
	}
	deleteOn := func(ctx context.Context, c goredis.Cmdable) (int, error) {
		n := 0
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			// One key per command: keys of different shards are on different
			// Cluster slots.
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, k := range batch {
					p.Unlink(ctx, k)
				}
				return nil
			})
			n += len(batch)
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return n, err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return n, err
		}
		return n, flush()
	}
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		var total atomic.Int64
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			n, err := deleteOn(ctx, c)
			total.Add(int64(n))
			return err
		})
		return int(total.Load()), err
	}
	return deleteOn(ctx, rdb)
}

// TerminatePostgresBackends ends, from a connection of its own to the
// server that url names, every backend whose application_name is appName —
// with the error a restarting server sends its clients (FATAL 57P01,
// terminating connection due to administrator command) — and returns how
// many it ended. Given the application_name of one run's connections, it
// touches no other client of the server.
func TerminatePostgresBackends(ctx context.Context, url, appName string) (int, error) {
	if appName == "" {
		return 0, errors.New("bench: terminate backends: empty application_name")
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, fmt.Errorf("bench: terminate backends: %w", err)
	}
	cfg.RuntimeParams["application_name"] = appName + "-admin" // never one of them
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("bench: terminate backends: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// pg_terminate_backend in the select list, so that it runs only on the
	// rows the WHERE clause kept.
	rows, err := conn.Query(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, appName)
	if err != nil {
		return 0, fmt.Errorf("bench: terminate backends: %w", err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, fmt.Errorf("bench: terminate backends: %w", err)
	}
	n := 0
	for _, ok := range ended {
		if ok {
			n++
		}
	}
	return n, nil
}

// killer restarts the worker every KillEvery until stopped.
func (r *run) killer(ctx context.Context) (stop func()) {
	if r.cfg.KillEvery <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(r.cfg.KillEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := r.t.restart(ctx); err != nil {
					r.fail(fmt.Errorf("bench: restart the worker: %w", err))
					return
				}
				r.restarts.Add(1)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// injectFaults runs each fault at its time; stop reports the ones the run
// ended before.
func (r *run) injectFaults(ctx context.Context) (stop func()) {
	if len(r.cfg.Faults) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range r.cfg.Faults {
		wg.Go(func() {
			t := time.NewTimer(time.Until(r.start.Add(f.At)))
			defer t.Stop()
			fr := FaultResult{Name: f.Name, AtS: f.At.Seconds()}
			select {
			case <-done:
				fr.Skipped = "the run ended first"
			case <-ctx.Done():
				fr.Skipped = "the run stopped first"
			case <-t.C:
				fr.AtS = time.Since(r.start).Seconds()
				detail, err := f.Do(ctx)
				fr.Detail = detail
				if err != nil {
					fr.Error = err.Error()
					r.fail(fmt.Errorf("bench: fault %s: %w", f.Name, err))
				}
			}
			r.mu.Lock()
			r.faults = append(r.faults, fr)
			r.mu.Unlock()
		})
	}
	return func() {
		close(done)
		wg.Wait()
		r.mu.Lock()
		slices.SortFunc(r.faults, func(a, b FaultResult) int { return strings.Compare(a.Name, b.Name) })
		r.mu.Unlock()
	}
}
