package lapse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/store"
)

// RetentionConfig bounds lapse's tables (docs/operations.md, Retention):
// finished orders are deleted with every row that belongs to them once
// they are older than Orders, and finished work rows no order reads once
// older than Tasks, in small transactions, one instance at a time.
//
// An order is finished when it is PAID or CANCELLED, owes no money, has no
// stock task, order-service command or refund not DONE, every event of it
// was delivered to every sink, and no hook failure is recorded for it (see
// store.Retention): open, flagged or undelivered orders are never deleted,
// however old. The stock counters are never touched; the audit stays true
// through per-SKU carried totals the deleting transaction writes.
type RetentionConfig struct {
	// Orders is how long a finished order is kept after it was paid or
	// cancelled (by the store's clock). Defaults to 0: kept forever.
	Orders time.Duration
	// Tasks is how long a DONE stock task, order-service command or refund
	// that no order reads is kept after it was done. Defaults to 0: kept
	// forever. DEAD ones are never deleted.
	Tasks time.Duration
	// Batch is the most orders deleted in one transaction (and rows of
	// each work table). Defaults to 500; at most 10,000.
	Batch int
	// Rate bounds the orders deleted per second by one run, so that a
	// backlog (retention turned on over a year of orders) is worked off
	// without crowding out the cancels. Defaults to 10 batches a second.
	Rate int
	// Every is how often a run starts; a run deletes batches until fewer
	// than a batch are due. Defaults to 1 minute.
	Every time.Duration
}

func (c *RetentionConfig) setDefaults() {
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Rate == 0 {
		c.Rate = 10 * c.Batch
	}
	if c.Every == 0 {
		c.Every = time.Minute
	}
}

func (c *RetentionConfig) validate() error {
	switch {
	case c.Orders < 0:
		return fmt.Errorf("lapse: Config.Retention.Orders %s: want 0 (kept forever) or more", c.Orders)
	case c.Tasks < 0:
		return fmt.Errorf("lapse: Config.Retention.Tasks %s: want 0 (kept forever) or more", c.Tasks)
	case c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("lapse: Config.Retention.Batch %d: want 1 to 10000", c.Batch)
	case c.Rate < 1:
		return fmt.Errorf("lapse: Config.Retention.Rate %d: want at least 1", c.Rate)
	case c.Every < 0:
		return fmt.Errorf("lapse: Config.Retention.Every %s: want more than 0", c.Every)
	}
	return nil
}

func (c RetentionConfig) on() bool { return c.Orders > 0 || c.Tasks > 0 }

// retention runs the Config.Retention of a Service.
type retention struct {
	cfg   RetentionConfig
	store store.Retention
	// attempted is how long an order cancelled after a payment attempt is
	// kept at least: past its confirming gateway query (Config.ConfirmAfter)
	// with a minute to spare, whatever the retention.
	attempted time.Duration
	log       *slog.Logger
	deleted   *prometheus.CounterVec
	oldest    prometheus.Gauge
	// pace waits between two batches of one run; a test's may be instant.
	pace func(ctx context.Context, d time.Duration) error
}

func newRetention(cfg RetentionConfig, st store.Retention, log *slog.Logger, reg prometheus.Registerer) (*retention, error) {
	r := &retention{
		cfg: cfg, store: st, log: log, pace: sleep,
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_retention_deleted_total",
			Help: "Rows retention deleted, by table (orders, order_items, stock_ledger, payments, outbox, … without the lapse_ prefix).",
		}, []string{"table"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lapse_retention_oldest_seconds",
			Help: "Age of the oldest finished order kept (paid or cancelled that long ago, by the store's clock); 0 when none is kept. " +
				"Well past the order retention: an order kept because it owes money, or an event undelivered.",
		}),
	}
	for _, c := range []prometheus.Collector{r.deleted, r.oldest} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("lapse: register retention metrics: %w", err)
		}
	}
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// run starts a run at once, then every cfg.Every, until ctx ends.
func (r *retention) run(ctx context.Context) {
	for {
		r.once(ctx)
		if sleep(ctx, r.cfg.Every) != nil {
			return
		}
	}
}

// once deletes what is due, batch by batch at cfg.Rate, then reads the
// oldest finished order kept. An error ends the run (logged); the next run
// starts over.
func (r *retention) once(ctx context.Context) {
	if r.cfg.Orders > 0 {
		r.batches(ctx, "orders", func() (store.PruneResult, bool, error) {
			res, err := r.store.PruneOrders(ctx, store.PruneOrdersParams{Age: r.cfg.Orders, Limit: r.cfg.Batch, AttemptedAge: r.attempted})
			return res, res.Turn && res.Orders >= r.cfg.Batch, err
		})
	}
	if r.cfg.Tasks > 0 {
		r.batches(ctx, "tasks", func() (store.PruneResult, bool, error) {
			res, err := r.store.PruneTasks(ctx, store.PruneTasksParams{Age: r.cfg.Tasks, Limit: r.cfg.Batch})
			more := false
			for _, n := range res.Deleted {
				more = more || n >= int64(r.cfg.Batch)
			}
			return res, more, err
		})
	}
	if r.cfg.Orders > 0 {
		oldest, now, ok, err := r.store.OldestFinished(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.log.Warn("retention: reading the oldest finished order failed", "err", err)
			}
		case ok:
			r.oldest.Set(max(0, now.Sub(oldest).Seconds()))
		default:
			r.oldest.Set(0)
		}
	}
}

// batches runs batch until it says there is no more, pausing between two so
// that a run deletes at most cfg.Rate orders a second.
func (r *retention) batches(ctx context.Context, what string, batch func() (store.PruneResult, bool, error)) {
	gap := time.Duration(float64(time.Second) * float64(r.cfg.Batch) / float64(r.cfg.Rate))
	var total int64
	for {
		start := time.Now()
		res, more, err := batch()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				r.log.Error("retention: a batch failed; the next run tries again", "of", what, "err", err)
			}
			return
		}
		for table, n := range res.Deleted {
			if n > 0 {
				r.deleted.WithLabelValues(table).Add(float64(n))
			}
		}
		total += res.Rows()
		if !more {
			if total > 0 {
				r.log.Info("retention: deleted", "of", what, "rows", total)
			}
			return
		}
		if r.pace(ctx, gap-time.Since(start)) != nil {
			return
		}
	}
}
