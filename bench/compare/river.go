package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSystem is riverqueue/river: each timer a job inserted with
// ScheduledAt, in a schema of the run's own migrated by rivermigrate. River
// keeps scheduled jobs in state 'scheduled'; its leader's scheduler makes
// those due within the next 5 s 'available' every 5 s (not configurable), and
// producers fetch available jobs whose scheduled_at has passed every
// FetchPollInterval, or sooner when notified of an insert.
type riverSystem struct {
	cfg      river.Config // Queues' MaxWorkers, fetch intervals; Workers, Schema and Logger are set by start
	maxConns int32        // the pgx pool's size (0: pgxpool's default, max(4, CPUs))
	e        *env
	schema   string
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	started  bool
}

// timerArgs is the job: which timer it is.
type timerArgs struct {
	Idx int `json:"i"`
}

func (timerArgs) Kind() string { return "lapsecmp_timer" }

type timerWorker struct {
	river.WorkerDefaults[timerArgs]
	rec *recorder
}

func (w *timerWorker) Work(_ context.Context, job *river.Job[timerArgs]) error {
	w.rec.deliver(job.Args.Idx, time.Now(), time.Time{})
	return nil
}

func (r *riverSystem) start(ctx context.Context, e *env, rec *recorder) error {
	if e.pg == nil {
		return errNoServer
	}
	r.e = e
	r.schema = "lapsecmp_" + e.run + e.tag("river")
	u, err := e.pg.createSchema(ctx, r.schema, e.appName())
	if err != nil {
		return err
	}
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("postgres URL: %w", err)
	}
	if r.maxConns > 0 {
		pc.MaxConns = r.maxConns
	}
	if r.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return err
	}
	driver := riverpgxv5.New(r.pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: r.schema, Logger: e.log})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &timerWorker{rec: rec})
	cfg := r.cfg
	cfg.Workers, cfg.Schema, cfg.Logger = workers, r.schema, e.log
	if r.client, err = river.NewClient(driver, &cfg); err != nil {
		return err
	}
	// Start's context lives as long as the client: Stop ends it.
	if err := r.client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	r.started = true
	return nil
}

// schedule inserts a batch of jobs in one InsertMany call (one transaction).
func (r *riverSystem) schedule(ctx context.Context, ts []item) error {
	params := make([]river.InsertManyParams, len(ts))
	for i, t := range ts {
		params[i] = river.InsertManyParams{Args: timerArgs{Idx: t.idx}, InsertOpts: &river.InsertOpts{ScheduledAt: t.due}}
	}
	_, err := r.client.InsertMany(ctx, params)
	return err
}

func (r *riverSystem) batch() int { return 1000 }

func (r *riverSystem) stop(ctx context.Context) error {
	var err error
	if r.started {
		err = r.client.Stop(ctx)
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.schema != "" {
		err = errors.Join(err, r.e.pg.dropSchema(ctx, r.schema))
	}
	return err
}
