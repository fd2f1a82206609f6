package drain

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The steps every store-backed dispatcher's Run shares — the order-service
// commands, the stock tasks, the refunds: its wake-up, its workers each
// running a Loop, the goroutine that keeps its backlog gauges fresh, the
// decision for an item whose send failed, and the settle of a batch. What
// the dispatcher claims, sends and settles are its own.

// Wake wakes an idle dispatcher's workers: Notify never blocks, and
// notifications that come while one is pending make one wake-up. The zero
// value is ready to use.
type Wake struct {
	once sync.Once
	ch   chan struct{}
}

func (w *Wake) init() { w.once.Do(func() { w.ch = make(chan struct{}, 1) }) }

// Notify wakes a worker (Loop.Wake); it never blocks.
func (w *Wake) Notify() {
	w.init()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// C is what a Loop's Wake listens on.
func (w *Wake) C() <-chan struct{} {
	w.init()
	return w.ch
}

// Dispatch is how a dispatcher's Run runs: Workers loops over its pass,
// and, when Stats is set, the refresh of its backlog gauges beside them.
type Dispatch struct {
	// Name begins every line logged ("inventory"); What names its items in
	// them ("task").
	Name, What string
	Logger     *slog.Logger
	// Workers is how many loops run pass at once.
	Workers int
	// Loop runs each worker; a pass error it hears is logged (its OnError
	// is set here).
	Loop Loop
	// Stats, when set, refreshes the backlog gauges (Gauges makes one),
	// every StatsInterval until the context ends.
	Stats         func(ctx context.Context) error
	StatsInterval time.Duration
}

// Run runs the workers and the stats refresh until ctx ends and every
// worker has made its last bounded passes.
func (d Dispatch) Run(ctx context.Context, pass func(ctx context.Context) (Pass, error)) {
	loop := d.Loop
	loop.OnError = func(err error, retryIn time.Duration) {
		d.Logger.Warn(d.Name+": dispatch pass failed; retrying", "err", err, "retry_in", retryIn)
	}
	var wg sync.WaitGroup
	for range d.Workers {
		wg.Go(func() { loop.Run(ctx, pass) })
	}
	if d.Stats != nil {
		wg.Go(func() { d.runStats(ctx) })
	}
	wg.Wait()
}

// runStats refreshes the gauges now and every StatsInterval; a failed read
// is logged and tried again at the next tick.
func (d Dispatch) runStats(ctx context.Context) {
	for {
		if err := d.Stats(ctx); err != nil && ctx.Err() == nil {
			d.Logger.Warn(fmt.Sprintf("%s: reading %s stats failed", d.Name, d.What), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.StatsInterval):
		}
	}
}

// Gauges is a Dispatch's Stats: read the backlog, and set the gauges from
// it when the read succeeded.
func Gauges[S any](read func(context.Context) (S, error), set func(S)) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := read(ctx)
		if err == nil {
			set(st)
		}
		return err
	}
}

// SettleTimeout bounds one batch's settle.
const SettleTimeout = 10 * time.Second

// Settle settles a batch with settle, on a context of its own bounded by
// SettleTimeout: a shutdown (ctx ending) lets the answers in hand be
// recorded rather than sent again.
func Settle[R any](ctx context.Context, settle func(context.Context) (R, error)) (R, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
	defer cancel()
	res, err := settle(sctx)
	if err != nil {
		return res, fmt.Errorf("settle: %w", err)
	}
	return res, nil
}

// ErrorLen is the most bytes of an error text kept on an item's row.
const ErrorLen = 1000

// Failure is what becomes of an item whose send failed.
type Failure struct {
	// Error is the failure's text, cut to ErrorLen.
	Error string
	// Dead: given up, for an operator; otherwise the item goes again after
	// RetryIn.
	Dead    bool
	RetryIn time.Duration
}

// Failed decides for an item whose send failed with err: DEAD at once when
// the failure is final (asking again cannot change it); otherwise after
// failures earlier ones (this one not counted), and since when it was
// written or retried to claimedAt (both on the store's clock), whether it
// is DEAD, and when it goes again.
func (r Retry) Failed(err error, final bool, failures int, since, claimedAt time.Time) Failure {
	f := Failure{Error: Truncate(err.Error(), ErrorLen)}
	if final {
		f.Dead = true
		return f
	}
	f.RetryIn, f.Dead = r.After(failures+1, claimedAt.Sub(since))
	return f
}
