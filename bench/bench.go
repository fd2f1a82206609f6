// Package bench is lapse's load and fault harness: it drives a real Service —
// in this process on a real store and timer backend, or a running `lapse
// serve` over HTTP — with a workload of orders, some paid and the rest left
// to time out, and measures how late the timeout cancels land
// (cancelled_at − cancel_after, both stamped by the store's clock), whether
// any landed early, and whether the invariants still hold afterwards, also
// while workers are killed and restarted or other faults are injected.
//
// A workload has one of two shapes:
//   - a window (the default): Orders orders created as fast as Concurrency
//     allows, whose deadlines are spread evenly over Spread, starting Lead
//     from the start — many cancels due in a short time;
//   - an open loop (Rate, Timeout or Duration set): orders created at Rate
//     per second whatever the service's pace (0: as fast as possible), each
//     with the payment window Timeout, for Orders orders or for Duration —
//     the steady state of a shop.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// PayAt says when a paid order's payment starts.
type PayAt string

// When payments start.
const (
	// PayNearDeadline starts the payment just before expires_at (a tenth of
	// the timeout before it, at most 100 ms): the race between the buyer and
	// the timer that PAYING exists for.
	PayNearDeadline PayAt = "near-deadline"
	// PayRandom starts it at a uniformly random time between creation and
	// that same point.
	PayRandom PayAt = "random"
)

// Config is one workload and the faults injected while it runs.
type Config struct {
	// Relay, when set, records the outbox relay's deliveries (its
	// OnDelivered is the in-process service's); after the cancels the run
	// waits up to Wait for RelayStore's outbox to drain, and reports.
	Relay      *RelayProbe
	RelayStore store.Outbox
	RelaySinks []string

	// Inventory, when set, holds the stock instead of the service: the
	// service runs with it as its Config.Inventory, every order is reserved
	// there first, and the run reports the stock tasks' lag.
	Inventory *Inventory

	// OrderService, when set, runs the service in order-service mode: an
	// order service decides each cancel, and the run reports the lag of its
	// commands (see OrderService).
	OrderService *OrderService

	// Orders is how many orders to create. Defaults to 2000; with Duration, 0
	// means no limit but the duration.
	Orders int
	// Rate is how many orders per second are created (open loop: at fixed
	// times, however long the previous creates take). 0 creates them as fast
	// as Concurrency allows.
	Rate float64
	// Timeout is each order's payment window in an open-loop workload:
	// expires_at = creation + Timeout. Defaults to 5 s when Rate or Duration is set.
	Timeout time.Duration
	// Duration, when set, keeps creating orders (at Rate) for this long; the
	// run then waits for the last deadlines.
	Duration time.Duration
	// Lead is how far ahead of the start the first deadline lies in a window
	// workload; creation must finish within it. Defaults to 5 s.
	Lead time.Duration
	// Spread is the window the deadlines are spread over, evenly, in a window
	// workload. Defaults to 1 s.
	Spread time.Duration
	// PayRatio is the fraction of orders paid (payment started, then a
	// success callback) before their deadline.
	PayRatio float64
	// PayAt is when those payments start. Defaults to PayRandom.
	PayAt PayAt
	// SKUs is how many SKUs the orders spread over. Defaults to 100.
	SKUs int
	// HotSKUShare is the fraction of orders that all reserve one SKU (a
	// flash sale); the rest spread over the others.
	HotSKUShare float64
	// Concurrency is how many goroutines create orders. Defaults to 8, or 64
	// with a Rate (so that one slow create does not hold the rate back).
	Concurrency int
	// KillEvery, when set, kills the in-process worker this often and starts
	// a fresh one, as a crash and a restart would (Target InProcess only).
	KillEvery time.Duration
	// Faults are injected at their time during the run.
	Faults []Fault
	// RetryFor, when set, retries for up to this long a create, a payment
	// step or a read of the results that failed for a reason other than the
	// service refusing it (a connection cut, a database away: the faults
	// that restart the database need it), counted in Result.Retries.
	// Creates then carry an Idempotency-Key (their order id), so that a
	// create whose first attempt committed unbeknown to the harness is
	// replayed, never made twice.
	RetryFor time.Duration
	// Chaos, when set, is the proxies between the service and its servers
	// (the caller makes them, points the service at them and closes them
	// after the run); Result.Chaos reports them.
	Chaos *Chaos
	// Wait bounds how long the run waits past the last deadline for every
	// cancel. Defaults to 60 s.
	Wait time.Duration
	// AllowedLag is the audit's: how long an order may stay PENDING past its
	// cancel_after. Defaults to 30 s.
	AllowedLag time.Duration
	// Progress receives a live line every 500 ms (nil for none).
	Progress io.Writer
	// Trimmed says retention deletes finished orders during the run (a
	// soak): the rows cannot be listed at the end, so the cancels are
	// counted, and their lateness estimated, from the service's metrics
	// (histogram_quantile over lapse_cancel_lateness_seconds's buckets;
	// Result.LatenessFrom "metrics"), and the audit checks what is kept.
	Trimmed bool
	// SampleTables, when set, is called every SampleEvery (default 1
	// minute) and once at the end: the rows and bytes of the store's
	// tables, for Result.Tables.
	SampleTables func(ctx context.Context) ([]TableSize, error)
	SampleEvery  time.Duration
}

// TableSize is one table's size at a sample.
type TableSize struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// TableSample is the store's tables at a moment of the run.
type TableSample struct {
	AtSeconds float64     `json:"at_seconds"` // from the start of the run
	Tables    []TableSize `json:"tables"`
}

// Fault is something done to the system under test at a time in the run.
type Fault struct {
	Name string
	At   time.Duration // from the start of the run
	// Do injects the fault and says what it did, for the report ("deleted
	// 412 keys"); the run goes on while it runs.
	Do func(ctx context.Context) (string, error)
}

// ConfigError is a Config that cannot run. Field names the Config field.
type ConfigError struct {
	Field   string
	Message string
}

func (e *ConfigError) Error() string { return "bench: Config." + e.Field + " " + e.Message }

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// OpenLoop reports whether the workload is an open loop (Rate, Timeout or
// Duration set) rather than a window of deadlines.
func (c *Config) OpenLoop() bool { return c.Rate > 0 || c.Timeout > 0 || c.Duration > 0 }

func (c *Config) setDefaults() {
	if c.OpenLoop() {
		if c.Timeout == 0 {
			c.Timeout = 5 * time.Second
		}
		if c.Orders == 0 && c.Duration == 0 {
			c.Orders = 2000
		}
		if c.Concurrency == 0 && c.Rate > 0 {
			c.Concurrency = 64
		}
	} else {
		if c.Orders == 0 {
			c.Orders = 2000
		}
		if c.Lead == 0 {
			c.Lead = 5 * time.Second
		}
		if c.Spread == 0 {
			c.Spread = time.Second
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.PayAt == "" {
		c.PayAt = PayRandom
	}
	if c.SKUs == 0 {
		c.SKUs = 100
	}
	if c.Wait == 0 {
		c.Wait = time.Minute
	}
	if c.AllowedLag == 0 {
		c.AllowedLag = 30 * time.Second
	}
}

// Validate checks c as the run would after filling the defaults.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

func (c *Config) validate() error {
	fraction := func(field string, v float64) error {
		if !(v >= 0 && v <= 1) {
			return configError(field, "%v: want a fraction from 0 to 1", v)
		}
		return nil
	}
	switch {
	case c.Orders < 0:
		return configError("Orders", "%d: must not be negative", c.Orders)
	case !(c.Rate >= 0) || math.IsInf(c.Rate, 0):
		return configError("Rate", "%v: want orders per second, 0 or more (0: as fast as possible)", c.Rate)
	case c.Duration < 0:
		return configError("Duration", "%s: must not be negative", c.Duration)
	case c.Timeout < 0 || (c.OpenLoop() && c.Timeout < time.Millisecond):
		return configError("Timeout", "%s: want at least 1ms", c.Timeout)
	case c.OpenLoop() && c.Lead != 0:
		return configError("Lead", "%s: places deadlines in a window from the start; it does not combine with an open-loop workload (rate, timeout, duration)", c.Lead)
	case c.OpenLoop() && c.Spread != 0:
		return configError("Spread", "%s: places deadlines in a window from the start; it does not combine with an open-loop workload (rate, timeout, duration)", c.Spread)
	case !c.OpenLoop() && c.Lead < time.Millisecond:
		return configError("Lead", "%s: want at least 1ms", c.Lead)
	case !c.OpenLoop() && c.Spread < time.Millisecond:
		return configError("Spread", "%s: want at least 1ms", c.Spread)
	}
	if err := fraction("PayRatio", c.PayRatio); err != nil {
		return err
	}
	if err := fraction("HotSKUShare", c.HotSKUShare); err != nil {
		return err
	}
	switch {
	case c.PayAt != PayNearDeadline && c.PayAt != PayRandom:
		return configError("PayAt", "%q: want %s or %s", c.PayAt, PayNearDeadline, PayRandom)
	case c.SKUs < 1 || c.SKUs > 100_000:
		return configError("SKUs", "%d: want 1 to 100000", c.SKUs)
	case c.Concurrency < 1 || c.Concurrency > 10_000:
		return configError("Concurrency", "%d: want 1 to 10000", c.Concurrency)
	case c.KillEvery < 0 || (c.KillEvery > 0 && c.KillEvery < 10*time.Millisecond):
		return configError("KillEvery", "%s: want at least 10ms (or 0: never)", c.KillEvery)
	case c.RetryFor < 0:
		return configError("RetryFor", "%s: must not be negative", c.RetryFor)
	case c.Wait < 0:
		return configError("Wait", "%s: must not be negative", c.Wait)
	case c.AllowedLag < 0:
		return configError("AllowedLag", "%s: must not be negative", c.AllowedLag)
	}
	if c.OrderService != nil && (c.OrderService.Store == nil || c.Inventory != nil) {
		return configError("OrderService", "needs the service's Store, and no Inventory (the order service owns the stock)")
	}
	if inv := c.Inventory; inv != nil && (inv.Client == nil || inv.Probe == nil) {
		return configError("Inventory", "needs a Client (to reserve) and a Probe (set as the service's Config.Tasks.OnDone)")
	}
	for _, f := range c.Faults {
		if f.Name == "" || f.Do == nil || f.At < 0 {
			return configError("Faults", "%q at %s: want a name, a time from the start (>= 0) and a Do function", f.Name, f.At)
		}
	}
	return nil
}

// Percentiles of lateness in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// AuditResult is the invariant check at the end of a run.
type AuditResult struct {
	// Status is "ok", "failed" (a violation) or "skipped" (no store to audit).
	Status string `json:"status"`
	// Violations are the violated checks, "name: count".
	Violations []string `json:"violations"`
	// Warnings are findings that break no invariant (PAYING past the deadline).
	Warnings []string `json:"warnings,omitempty"`
	// Skipped says why the audit did not run.
	Skipped string `json:"skipped,omitempty"`
}

// FaultResult is one fault of the run: when it happened, or why it did not.
type FaultResult struct {
	Name string  `json:"name"`
	AtS  float64 `json:"at_s"`
	// Detail is what the fault did, in its words.
	Detail  string `json:"detail,omitempty"`
	Error   string `json:"error,omitempty"`
	Skipped string `json:"skipped,omitempty"`
}

// Result is what a run measured.
type Result struct {
	// Orders is how many orders were created.
	Orders int `json:"orders"`
	// CreatedPerS is the creation rate achieved.
	CreatedPerS float64 `json:"created_per_s"`
	// Cancelled counts this run's orders cancelled by timeout.
	Cancelled int `json:"cancelled"`
	// Paid counts this run's orders paid.
	Paid int `json:"paid"`
	// PayMissed counts payments that came too late to start (the order had
	// expired): those orders are among the cancelled.
	PayMissed  int         `json:"pay_missed"`
	LatenessMS Percentiles `json:"lateness_ms"`
	// Early counts cancels before cancel_after: must be 0.
	Early int `json:"early"`
	// DBStatementsPerOrder is the SQL statements the store ran per order
	// created, over the whole run (creates, payments, cancels, outbox relay);
	// nil when the store does not count them (see StatementCounter).
	DBStatementsPerOrder *float64    `json:"db_statements_per_order"`
	Audit                AuditResult `json:"audit"`
	// AuditOK is Audit.Status == "ok".
	AuditOK bool `json:"audit_ok"`
	// DrainSeconds is from the last cancel_after to the last cancel.
	DrainSeconds float64 `json:"drain_seconds"`
	// Restarts counts workers killed and replaced (KillEvery).
	Restarts int `json:"restarts"`
	// SweepCaught counts cancels by the fallback sweep: timers the primary
	// backend lost (or had not delivered SweepLag after their deadline).
	SweepCaught int           `json:"sweep_caught"`
	Faults      []FaultResult `json:"faults,omitempty"`
	// Retries counts calls retried after a failure (Config.RetryFor).
	Retries int `json:"retries"`
	// Chaos is the network the run went through (Config.Chaos).
	Chaos *ChaosResult `json:"chaos,omitempty"`
	// Relay is what the outbox relay delivered to each sink (lapse bench
	// --sink).
	Relay []RelayResult `json:"relay,omitempty"`
	// RelayUndelivered counts events still not published to every sink when
	// the run gave up waiting (at least; it reads 1,000 at most).
	RelayUndelivered int64 `json:"relay_undelivered,omitempty"`
	// Tasks is the stock tasks settled DONE, per action, and their lag
	// from commit to DONE (Config.Inventory).
	Tasks []TaskResult `json:"tasks,omitempty"`
	// TasksNotDone counts orders whose task was not DONE when the run gave
	// up waiting; TasksDead the DEAD tasks in the store then; TasksDoneTwice
	// the tasks settled DONE a second time (sent again after a lease ran out).
	TasksNotDone   int   `json:"tasks_not_done,omitempty"`
	TasksDead      int64 `json:"tasks_dead,omitempty"`
	TasksDoneTwice int   `json:"tasks_done_twice,omitempty"`
	// TaskBatches counts the dispatcher's batches that settled tasks DONE.
	TaskBatches int `json:"task_batches,omitempty"`
	// TaskSettleMS is, per batch, from the inventory's last answer to the
	// settle's commit.
	TaskSettleMS *Percentiles `json:"task_settle_ms,omitempty"`
	// ReserveMS is the round trip of the reserve commands sent before each
	// create (Config.Inventory).
	ReserveMS *Percentiles `json:"reserve_ms,omitempty"`
	// Commands is what the order service answered, from the store
	// (Config.OrderService).
	Commands *CommandsResult `json:"commands,omitempty"`
	// LatenessFrom says where LatenessMS comes from: "rows" (each
	// cancelled order's cancelled_at − cancel_after) or "metrics" (a
	// Trimmed run: estimated from the service's histogram).
	LatenessFrom string `json:"lateness_from"`
	// LatenessMetricsMS is the lateness as the service's histogram tells
	// it (histogram_quantile over its buckets): how a Trimmed run's compares
	// with a run that lists its rows. Nil when the target exports none.
	LatenessMetricsMS *Percentiles `json:"lateness_metrics_ms,omitempty"`
	// Tables are the store's table sizes sampled during the run
	// (Config.SampleTables).
	Tables []TableSample `json:"tables,omitempty"`
	// RetentionDeleted counts the orders retention deleted during the run
	// (Config.Trimmed).
	RetentionDeleted int `json:"retention_deleted,omitempty"`
	// Seconds is the run's wall time.
	Seconds float64 `json:"seconds"`
}

// Run drives svc, already running on st (the caller owns both).
func Run(ctx context.Context, svc *lapse.Service, st store.Store, cfg Config) (Result, error) {
	return Drive(ctx, Running(svc, st), cfg)
}

// Drive runs the workload of cfg against t, waits for every order to be paid
// or cancelled, audits and measures.
func Drive(ctx context.Context, t Target, cfg Config) (Result, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if cfg.KillEvery > 0 {
		if ip, ok := t.(*inProcess); !ok || ip.external {
			return Result{}, configError("KillEvery", "%s: needs a Target that can restart its worker (InProcess)", cfg.KillEvery)
		}
	}
	r := &run{cfg: cfg, t: t, prefix: fmt.Sprintf("bench-%d-", time.Now().UnixMilli())}
	return r.do(ctx)
}

// stockPerSKU is what every SKU is given: enough for any run, so a shortfall
// never decides an order's fate.
const stockPerSKU = 1_000_000_000

// run is one Drive call.
type run struct {
	cfg    Config
	t      Target
	prefix string // every order id of the run starts with it

	start time.Time
	base  counts // the service's metrics before the run

	created, paid, payMissed, restarts, retries atomic.Int64
	createStart, createEnd                      time.Time

	mu           sync.Mutex
	dues         []int64   // cancel_after (unix ns) of the orders that will time out
	reserveMS    []float64 // the reserve round trips (Config.Inventory)
	firstCreated time.Time // store clock
	lastDue      time.Time // store clock
	faults       []FaultResult

	errMu    sync.Mutex
	firstErr error
	abort    context.CancelFunc
	payments sync.WaitGroup
}

// fail records the run's first error and stops the workload.
func (r *run) fail(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.firstErr == nil {
		r.firstErr = err
		r.abort()
	}
}

func (r *run) err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
}

func (r *run) do(ctx context.Context) (Result, error) {
	var res Result
	if err := r.t.start(ctx); err != nil {
		return res, err
	}
	defer r.t.stop()
	for k := range r.cfg.SKUs {
		var err error
		switch inv := r.cfg.Inventory; {
		case r.cfg.OrderService != nil: // the order service owns the stock
		case inv == nil:
			err = r.t.setStock(ctx, skuName(k), stockPerSKU)
		case inv.SetStock != nil: // the service keeps no stock of its own
			err = inv.SetStock(ctx, skuName(k), stockPerSKU)
		}
		if err != nil {
			return res, fmt.Errorf("bench: set stock: %w", err)
		}
	}
	base, err := r.t.counts(ctx)
	if err != nil {
		return res, err
	}
	r.base = base
	stmts0, countsStatements := r.t.statements()

	wctx, abort := context.WithCancel(ctx)
	defer abort()
	r.abort = abort
	r.start = time.Now()
	stopProgress := progress(r.cfg.Progress, r.line)
	stopSampling := r.sampleTables(wctx, &res)
	stopFaults := r.injectFaults(wctx)
	stopKiller := r.killer(wctx)

	r.create(wctx)
	r.payments.Wait()
	res.Orders = int(r.created.Load())
	if d := r.createEnd.Sub(r.createStart); d > 0 {
		res.CreatedPerS = float64(res.Orders) / d.Seconds()
	}
	var cancelled []order.Order
	if r.err() == nil {
		if r.cfg.OrderService != nil {
			cancelled, err = r.waitCommands(wctx, &res)
		} else if r.cfg.Trimmed {
			err = r.waitCounted(wctx)
		} else {
			cancelled, err = r.waitCancels(wctx)
		}
		if err != nil {
			r.fail(err)
		}
	}
	stopKiller()
	stopFaults()
	stopProgress()
	stopSampling()
	if r.cfg.Relay != nil && r.cfg.RelayStore != nil && r.err() == nil {
		left, err := WaitRelayed(wctx, r.cfg.RelayStore, r.cfg.RelaySinks, r.cfg.Wait)
		if err != nil {
			r.fail(err)
		}
		res.Relay = r.cfg.Relay.Results()
		res.RelayUndelivered = left
	}
	if r.cfg.Inventory != nil && r.err() == nil {
		if err := r.waitTasks(wctx, &res, int(r.created.Load())); err != nil {
			r.fail(err)
		}
	}
	res.Restarts = int(r.restarts.Load())
	res.Retries = int(r.retries.Load())
	if r.cfg.Chaos != nil {
		cr := r.cfg.Chaos.Result()
		res.Chaos = &cr
	}
	res.Paid = int(r.paid.Load())
	res.PayMissed = int(r.payMissed.Load())
	r.mu.Lock()
	res.Faults = r.faults
	r.mu.Unlock()
	if c, err := r.t.counts(ctx); err == nil {
		res.SweepCaught = int(c.minus(r.base).sweepCaught)
	}
	res.Seconds = time.Since(r.start).Seconds()
	if err := r.err(); err != nil {
		return res, err
	}

	late := make([]float64, 0, len(cancelled))
	var lastCancel, lastDue time.Time
	for _, o := range cancelled {
		lastDue = later(lastDue, o.CancelAfter)
		l := float64(o.CancelledAt.Sub(o.CancelAfter)) / float64(time.Millisecond)
		late = append(late, l)
		if l < 0 {
			res.Early++
		}
		lastCancel = later(lastCancel, o.CancelledAt)
	}
	res.Cancelled = len(cancelled)
	res.LatenessMS = percentiles(late)
	res.LatenessFrom = "rows"
	if c, err := r.t.counts(ctx); err == nil {
		c = c.minus(r.base)
		ms := func(q float64) float64 { return c.lateness.quantile(q) * 1000 }
		if p := (Percentiles{P50: ms(0.5), P90: ms(0.9), P99: ms(0.99), P999: ms(0.999), Max: ms(1)}); !math.IsNaN(p.P50) {
			res.LatenessMetricsMS = &p
		}
		if r.cfg.Trimmed && res.LatenessMetricsMS != nil {
			res.Cancelled, res.LatenessFrom, res.RetentionDeleted = int(c.cancelled), "metrics", int(c.retained)
			res.LatenessMS = *res.LatenessMetricsMS
		}
	}
	if !lastCancel.IsZero() {
		res.DrainSeconds = lastCancel.Sub(lastDue).Seconds()
	}
	if stmts1, ok := r.t.statements(); ok && countsStatements && res.Orders > 0 {
		per := float64(stmts1-stmts0) / float64(res.Orders)
		res.DBStatementsPerOrder = &per
	}
	res.Audit, err = r.audit(ctx)
	res.AuditOK = res.Audit.Status == "ok"
	return res, err
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (r *run) audit(ctx context.Context) (AuditResult, error) {
	out := AuditResult{Violations: []string{}}
	var (
		rep     *store.AuditReport
		skipped string
	)
	err := r.retry(ctx, func() (err error) {
		rep, skipped, err = r.t.audit(ctx, store.AuditParams{AllowedLag: r.cfg.AllowedLag})
		return err
	})
	if err != nil {
		return out, fmt.Errorf("bench: audit: %w", err)
	}
	if rep == nil {
		out.Status, out.Skipped = "skipped", skipped
		return out, nil
	}
	for _, c := range rep.Checks {
		if c.Count == 0 {
			continue
		}
		s := fmt.Sprintf("%s: %d", c.Name, c.Count)
		if c.Warning {
			out.Warnings = append(out.Warnings, s)
		} else {
			out.Violations = append(out.Violations, s)
		}
	}
	out.Status = "ok"
	if !rep.OK() {
		out.Status = "failed"
	}
	return out, nil
}

// waitCancels waits until every order not paid is cancelled and returns them.
func (r *run) waitCancels(ctx context.Context) ([]order.Order, error) {
	want := int(r.created.Load() - r.paid.Load())
	r.mu.Lock()
	lastDue := r.lastDue
	r.mu.Unlock()
	deadline := later(lastDue, time.Now()).Add(r.cfg.Wait)
	// The metrics say when to look; the store's rows are what counts. A
	// cancel batch that committed while its connection was cut is in the
	// rows but not in the metrics (the service never heard of its commit):
	// when the count stands still past the last deadline, the rows are read
	// after 1 s, then 2 s, 4 s… of standstill.
	seen, still, standstill := -1.0, time.Now(), time.Second
	for {
		c, err := r.t.counts(ctx)
		if err != nil {
			return nil, err
		}
		n := c.minus(r.base).cancelled
		if int(n) >= want || time.Now().After(deadline) {
			break
		}
		if n != seen {
			seen, still = n, time.Now()
		} else if time.Since(still) > standstill && time.Now().After(lastDue) {
			got, err := r.listCancelledRetrying(ctx)
			if err != nil {
				return nil, err
			}
			if len(got) >= want {
				return got, nil
			}
			still, standstill = time.Now(), 2*standstill
		}
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return nil, ctx.Err()
		}
	}
	for {
		got, err := r.listCancelledRetrying(ctx)
		if err != nil {
			return nil, err
		}
		if len(got) >= want {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("bench: only %d of %d unpaid orders cancelled %s after the last deadline", len(got), want, r.cfg.Wait)
		}
		if !sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) {
			return nil, ctx.Err()
		}
	}
}

// listCancelledRetrying is listCancelled, retried through a fault (r.retry).
func (r *run) listCancelledRetrying(ctx context.Context) ([]order.Order, error) {
	var got []order.Order
	err := r.retry(ctx, func() (err error) {
		got, err = r.listCancelled(ctx)
		return err
	})
	return got, err
}

// listCancelled reads this run's timeout-cancelled orders.
func (r *run) listCancelled(ctx context.Context) ([]order.Order, error) {
	r.mu.Lock()
	first := r.firstCreated
	r.mu.Unlock()
	var out []order.Order
	err := r.t.listCancelled(ctx, func(page []order.Order) bool {
		for _, o := range page {
			if o.CreatedAt.Before(first) {
				return false // newest first: the rest are older than the run
			}
			if strings.HasPrefix(o.ID, r.prefix) && o.CancelReason == order.ReasonTimeout {
				out = append(out, o)
			}
		}
		return true
	})
	return out, err
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: s[len(s)-1]}
}

// waitCounted waits, for a Trimmed run, until the service's metrics count
// a timeout cancel of every order the run did not pay, or Wait has passed
// since the last deadline (an error).
func (r *run) waitCounted(ctx context.Context) error {
	want := r.created.Load() - r.paid.Load()
	r.mu.Lock()
	deadline := later(r.lastDue, time.Now()).Add(r.cfg.Wait)
	r.mu.Unlock()
	for {
		c, err := r.t.counts(ctx)
		if err != nil {
			return err
		}
		n := int64(c.minus(r.base).cancelled)
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: only %d of %d unpaid orders cancelled %s after the last deadline", n, want, r.cfg.Wait)
		}
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// sampleTables samples the store's tables every SampleEvery into
// res.Tables, and once more when stopped.
func (r *run) sampleTables(ctx context.Context, res *Result) (stop func()) {
	if r.cfg.SampleTables == nil {
		return func() {}
	}
	every := cmp.Or(r.cfg.SampleEvery, time.Minute)
	var mu sync.Mutex
	sample := func() {
		ts, err := r.cfg.SampleTables(context.WithoutCancel(ctx))
		if err != nil {
			if r.cfg.Progress != nil {
				fmt.Fprintf(r.cfg.Progress, "bench: sampling the tables: %v\n", err)
			}
			return
		}
		mu.Lock()
		res.Tables = append(res.Tables, TableSample{AtSeconds: time.Since(r.start).Seconds(), Tables: ts})
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		sample()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sample()
			case <-done:
				sample()
				return
			}
		}
	})
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		wg.Wait()
	}
}
