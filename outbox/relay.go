// Package outbox relays the events that transitions write to the store's
// outbox table (in the same transaction as the change) to sinks: webhooks,
// RabbitMQ, Kafka, NATS, the log.
//
// Guarantees, per sink:
//   - At least once: an event is settled (its delivery row deleted) only
//     after the sink confirmed it; a relay that dies between publish and
//     settle leaves a lease that runs out, and the event goes again with the
//     same id. Consumers dedupe by event id.
//   - Per-order order: the events of one order go out in the order they were
//     committed, one at a time (the store claims only the first pending event
//     of each order for a sink), across instances and crashes. A relay stops
//     publishing a batch before its lease ends, so a redelivery never
//     overtakes the attempt it replaces.
//   - Independence: each sink has its own progress; a dead webhook holds
//     back nothing but itself.
//   - Dead letters: an event a sink refuses for good, or for longer than its
//     Policy allows, is dead for that sink: it stays, listed by `lapse events
//     list --dead`, until retried or purged, and the later events of its
//     order (for that sink) wait behind it.
//
// Any number of instances run relays over one store; they share the work by
// claiming batches with a lease.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/internal/drain"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Relay moves events from the store to its sinks. Fill the fields, then Run.
type Relay struct {
	Store store.Outbox
	Sinks []Sink
	Config

	wakeOnce sync.Once
	wakes    []chan struct{}
	// txs bounds the relay's store transactions in flight (StoreConns).
	txs chan struct{}
}

// Config tunes a Relay; the zero value takes every default.
type Config struct {
	// Interval is how often an idle relay looks for events other instances
	// committed (its own instance wakes it with Notify). Defaults to 200 ms.
	Interval time.Duration
	// Linger is how long a woken relay waits for more events to gather into
	// the batch. Defaults to 2 ms.
	Linger time.Duration
	// BatchSize is the most events claimed at once per sink. Defaults to 500.
	BatchSize int
	// Workers is how many batches per sink an instance has in flight at
	// once: while one is being published, another is claimed or settled.
	// Defaults to 3.
	Workers int
	// StoreConns bounds the store transactions (claims and settles) the
	// relay has in flight at once, all sinks together, so that however many
	// sinks and workers there are, the relay never holds more than this many
	// of the store's connections: creates and cancels keep the rest.
	// Defaults to 2.
	StoreConns int
	// Lease is how long a claim holds its events. A batch is published
	// within 4/5 of it, or its unconfirmed events are failed and retried.
	// Defaults to 30 s.
	Lease time.Duration
	// RetryBase and RetryMax bound the backoff of a refused event: RetryBase
	// doubled per refusal, up to RetryMax, with ±20% jitter. Default 1 s and
	// 10 minutes.
	RetryBase, RetryMax time.Duration
	// Retention is how long events published to every sink are kept.
	// Defaults to 7 days; negative keeps them forever.
	Retention time.Duration
	// RetentionInterval is how often retention runs. Defaults to 1 minute.
	RetentionInterval time.Duration
	// StatsInterval is how often the backlog gauges are refreshed. Defaults
	// to 5 s.
	StatsInterval time.Duration
	// Yield, when set, reports that work of a higher priority has the store:
	// lapse's service sets it to "cancelling a burst of due orders". While
	// it reports true, each worker holds its next claim back, for at most
	// MaxYield at a time, then claims one batch: a burst's cancels get the
	// database first (in a 20,000-order burst the relay's statements cost
	// PostgreSQL more than the cancels), and events are delayed, never
	// stopped — a worker claims at least a batch per MaxYield.
	Yield func() bool
	// MaxYield bounds one hold (default 1 s); negative never holds.
	MaxYield time.Duration
	Logger   *slog.Logger
	// Metrics, when set, receives the per-sink counters and gauges.
	Metrics *Metrics
	// OnDelivered, when set, is called with each batch of events a sink
	// confirmed and when (benchmarks measure lag with it).
	OnDelivered func(sink string, events []order.Event, at time.Time)
}

func (r *Relay) setDefaults() {
	if r.Interval <= 0 {
		r.Interval = 200 * time.Millisecond
	}
	if r.Linger <= 0 {
		r.Linger = 2 * time.Millisecond
	}
	if r.BatchSize <= 0 {
		r.BatchSize = 500
	}
	if r.Workers <= 0 {
		r.Workers = 3
	}
	if r.StoreConns <= 0 {
		r.StoreConns = 2
	}
	if r.Lease <= 0 {
		r.Lease = 30 * time.Second
	}
	if r.RetryBase <= 0 {
		r.RetryBase = time.Second
	}
	if r.RetryMax <= 0 {
		r.RetryMax = 10 * time.Minute
	}
	if r.Retention == 0 {
		r.Retention = 7 * 24 * time.Hour
	}
	if r.RetentionInterval <= 0 {
		r.RetentionInterval = time.Minute
	}
	if r.StatsInterval <= 0 {
		r.StatsInterval = 5 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
}

func (r *Relay) initWakes() {
	r.wakeOnce.Do(func() {
		r.wakes = make([]chan struct{}, len(r.Sinks))
		for i := range r.wakes {
			r.wakes[i] = make(chan struct{}, 1)
		}
	})
}

// Notify wakes the relay's sinks: events were just committed. It never
// blocks.
func (r *Relay) Notify() {
	r.initWakes()
	for _, w := range r.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Run registers the sinks and relays until ctx ends; then each sink makes a
// last pass (bounded to 5 s) so that a clean shutdown leaves little of what
// was committed unpublished.
func (r *Relay) Run(ctx context.Context) error {
	r.setDefaults()
	r.initWakes()
	r.txs = make(chan struct{}, r.StoreConns)
	names := make([]string, len(r.Sinks))
	seen := map[string]bool{}
	for i, s := range r.Sinks {
		names[i] = s.Name()
		if seen[names[i]] {
			return fmt.Errorf("outbox: two sinks named %s: each sink needs its own progress", names[i])
		}
		seen[names[i]] = true
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := r.Store.RegisterSinks(ctx, names)
		if err == nil {
			break
		}
		r.Logger.Error("outbox: registering sinks failed; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	r.warnForeignSinks(ctx, names)
	var wg sync.WaitGroup
	for i, s := range r.Sinks {
		gone := new(atomic.Bool) // a 410 stops every worker of the sink
		for range r.Workers {
			wg.Go(func() { r.runSink(ctx, s, r.wakes[i], gone) })
		}
	}
	wg.Go(func() { r.runRetention(ctx, names) })
	if r.Metrics != nil {
		wg.Go(func() { r.runStats(ctx) })
	}
	wg.Wait()
	return nil
}

// runSink is one sink's loop (internal/drain): claim, publish, settle.
func (r *Relay) runSink(ctx context.Context, s Sink, wake <-chan struct{}, gone *atomic.Bool) {
	policy := DefaultPolicy
	if ps, ok := s.(PolicySink); ok {
		policy = ps.Policy()
	}
	owner := uuid.NewString()[:8]
	log := r.Logger.With("sink", s.Name(), "relay", owner)
	loop := drain.Loop{
		Batch: r.BatchSize, Interval: r.Interval, Linger: r.Linger, Wake: wake,
		OnError: func(err error, retryIn time.Duration) {
			log.Warn("outbox: relay pass failed; retrying", "err", err, "retry_in", retryIn)
		},
	}
	if r.Yield != nil && r.MaxYield >= 0 {
		loop.Yield, loop.MaxYield = r.Yield, r.MaxYield
		if r.Metrics != nil {
			held := r.Metrics.yielded.WithLabelValues(s.Name())
			loop.OnYield = func(d time.Duration) { held.Add(d.Seconds()) }
		}
	}
	loop.Run(ctx, func(ctx context.Context) (drain.Pass, error) {
		if gone.Load() {
			return drain.Pass{Stop: true}, nil
		}
		n, ok, isGone, err := r.pass(ctx, s, policy, log, gone)
		if isGone {
			if !gone.Swap(true) {
				log.Error("outbox: the sink's destination is gone (410); its events wait until lapse restarts with the sink fixed or removed")
				if r.Metrics != nil {
					r.Metrics.disabled.WithLabelValues(s.Name()).Set(1)
				}
			}
			return drain.Pass{Stop: true}, nil
		}
		return drain.Pass{Claimed: n, Failed: n > 0 && ok == 0}, err
	})
}

// pass claims one batch for s, publishes it and settles it. It returns how
// many events it claimed and how many were delivered; gone when the sink
// said its destination no longer exists.
func (r *Relay) pass(ctx context.Context, s Sink, policy Policy, log *slog.Logger, disabled *atomic.Bool) (n, ok int, gone bool, err error) {
	if err := r.acquire(ctx); err != nil {
		return 0, 0, false, nil // stopping
	}
	start := time.Now()
	ds, err := r.Store.ClaimEvents(ctx, store.ClaimEventsParams{Sink: s.Name(), Limit: r.BatchSize, Lease: r.Lease})
	r.release()
	if err != nil || len(ds) == 0 {
		return 0, 0, false, err
	}
	evs := make([]order.Event, len(ds))
	for i, d := range ds {
		evs[i] = d.Event
	}
	// Publish within the lease. The deadline is measured from before the
	// claim, so it ends before the lease does on the store's clock too. A
	// shutdown gives the batch in hand shutdownGrace to be confirmed rather
	// than abandoning it at once (its confirmed events are then settled).
	pctx, endPublish := context.WithDeadline(context.WithoutCancel(ctx), start.Add(r.Lease*4/5))
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGrace, endPublish) })
	var errs []error
	if disabled.Load() {
		// Another worker met a 410 while this one claimed: hand the batch
		// back untouched (due again at once, at the next start).
		errs = ErrorsFor(len(evs), fmt.Errorf("sink disabled: %w", ErrGone))
	} else {
		errs = checkResults(s, len(evs), s.Publish(pctx, evs))
	}
	stopGrace()
	endPublish()
	at := time.Now()

	outcomes := make([]store.Outcome, len(ds))
	var delivered []order.Event
	var firstErr error
	for i, d := range ds {
		o, isGone := r.outcome(d, errs[i], policy)
		outcomes[i] = o
		gone = gone || isGone
		if o.Delivered {
			delivered = append(delivered, d.Event)
			continue
		}
		if firstErr == nil {
			firstErr = errs[i]
		}
		if o.Dead {
			log.Error("outbox: event is dead for this sink; later events of its order wait behind it (lapse events retry)",
				"event_id", d.ID, "type", d.Type, "order_id", d.OrderID, "refusals", d.Refusals+1, "err", errs[i])
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.acquire(sctx); err != nil {
		return len(ds), 0, gone, fmt.Errorf("settle: %w", err)
	}
	err = r.Store.SettleEvents(sctx, s.Name(), outcomes)
	r.release()
	if err != nil {
		// The confirmed events go again when their lease runs out: a
		// duplicate, never a loss.
		return len(ds), 0, gone, fmt.Errorf("settle: %w", err)
	}
	if r.Metrics != nil {
		r.Metrics.observe(s.Name(), outcomes, delivered, at)
	}
	if len(delivered) > 0 && r.OnDelivered != nil {
		r.OnDelivered(s.Name(), delivered, at)
	}
	if firstErr != nil && len(delivered) < len(ds) {
		log.Warn("outbox: events not delivered; retrying later", "failed", len(ds)-len(delivered), "of", len(ds), "err", firstErr)
	}
	return len(ds), len(delivered), gone, nil
}

// acquire takes one of the relay's store transactions (StoreConns).
func (r *Relay) acquire(ctx context.Context) error {
	select {
	case r.txs <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Relay) release() { <-r.txs }

// shutdownGrace is how long a batch being published may go on once the
// relay is told to stop.
const shutdownGrace = 2 * time.Second

// outcome decides what becomes of delivery d after the sink answered err.
func (r *Relay) outcome(d store.Delivery, err error, p Policy) (store.Outcome, bool) {
	o := store.Outcome{Seq: d.Seq, Attempts: d.Attempts}
	if err == nil {
		o.Delivered = true
		return o, false
	}
	o.Error = truncate(err.Error(), 1000)
	if errors.Is(err, ErrGone) {
		return o, true // due again at once: at the next start
	}
	var refused *RefusedError
	if !errors.As(err, &refused) {
		// Transport: retried without limit, soon.
		o.RetryIn = drain.Backoff(d.Attempts, 200*time.Millisecond, 30*time.Second)
		return o, false
	}
	o.Refused = true
	refusals := d.Refusals + 1
	refusedFor := time.Duration(0)
	if !d.FirstRefused.IsZero() {
		refusedFor = d.ClaimedAt.Sub(d.FirstRefused)
	}
	o.Dead = refused.Permanent ||
		(p.MaxRefusals > 0 && refusals >= p.MaxRefusals) ||
		(p.MaxAge > 0 && refusedFor >= p.MaxAge)
	o.RetryIn = max(drain.Backoff(refusals, r.RetryBase, r.RetryMax), refused.RetryAfter)
	return o, false
}

// warnForeignSinks logs the registered sinks this relay does not run:
// events keep being fanned out to them, and if no instance runs one any
// more they wait for ever (and are never pruned) until an operator forgets
// it.
func (r *Relay) warnForeignSinks(ctx context.Context, mine []string) {
	st, err := r.Store.OutboxStats(ctx)
	if err != nil {
		return
	}
	for _, s := range st.Sinks {
		if !slices.Contains(mine, s.Sink) {
			r.Logger.Warn("outbox: a sink is registered that this instance does not run; if no instance runs it any more, its events wait for ever: lapse events forget-sink NAME",
				"sink", s.Sink, "pending", s.Pending, "dead", s.Dead)
		}
	}
}

// runRetention deletes published events past retention, 1,000 at a time,
// and registers the sinks again (a sink an operator forgot while this relay
// still runs it comes back, for new events).
func (r *Relay) runRetention(ctx context.Context, names []string) {
	skipped := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(drain.Jitter(r.RetentionInterval)):
		}
		if err := r.Store.RegisterSinks(ctx, names); err != nil && ctx.Err() == nil {
			r.Logger.Warn("outbox: registering sinks again failed", "err", err)
		}
		if r.Retention < 0 {
			continue
		}
		if r.yielding() && skipped < maxSkips {
			skipped++
			continue
		}
		skipped = 0
		if n, err := Prune(ctx, r.Store, r.Retention); err != nil && ctx.Err() == nil {
			r.Logger.Warn("outbox: retention failed; trying again later", "err", err)
		} else if n > 0 {
			r.Logger.Info("outbox: deleted published events past retention", "events", n, "retention", r.Retention)
		}
	}
}

// Prune deletes events published to every sink more than retention ago, in
// transactions of at most 1,000 rows, and returns how many it deleted.
func Prune(ctx context.Context, st store.Outbox, retention time.Duration) (int64, error) {
	const batch = 1000
	var total int64
	for {
		n, err := st.PruneOutbox(ctx, time.Now().Add(-retention), batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}

// yielding reports whether the relay is to yield to a burst of cancels
// (Config.Yield) now.
func (r *Relay) yielding() bool {
	return r.Yield != nil && r.MaxYield >= 0 && r.Yield()
}

// maxSkips is how many refreshes in a row the backlog gauges and retention
// skip while the relay yields: a burst defers them, a sustained one does not
// stop them.
const maxSkips = 2

func (r *Relay) runStats(ctx context.Context) {
	skipped := 0
	for {
		// The counts read every delivery row: a burst's cancels come first.
		if r.yielding() && skipped < maxSkips {
			skipped++
		} else if st, err := r.Store.OutboxStats(ctx); err == nil {
			skipped = 0
			r.Metrics.setStats(st)
		} else if ctx.Err() == nil {
			r.Logger.Warn("outbox: reading backlog stats failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.StatsInterval):
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
