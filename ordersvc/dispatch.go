package ordersvc

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/lapsehq/lapse/internal/drain"
	"github.com/lapsehq/lapse/store"
)

// Dispatcher sends the commands the store holds to the order service: claim
// a batch with a lease, send each command, settle what the order service
// answered — each answer's transition in the settle's transaction. Any
// number of instances run one over the same store; a command is held by one
// claim at a time, and a dispatcher that dies between sending and settling
// leaves a lease that runs out, after which the command goes again with the
// same id: the receiver answers it as before.
//
// A command the order service refuses (a 4xx other than 408, 409 and 429)
// or answers not_found is DEAD at once: an operator looks at it (`lapse
// commands list --dead`) and sends it again (`lapse commands retry`) or
// purges it. One that fails otherwise is retried with jittered exponential
// backoff, and is DEAD after MaxAttempts failures or MaxAge. An answer of
// paying is not a failure: the command goes again after the answer's
// retry_after_seconds (bounded by PayingMin and PayingMax), or PayingRetry.
type Dispatcher struct {
	Store  store.Commands
	Client Client
	DispatcherConfig

	wake drain.Wake

	// The batches handed over by the cancels that wrote them (Hold).
	runCtx   context.Context
	runMu    sync.Mutex
	held     chan struct{} // a slot per batch in flight, Workers of them
	handedWG sync.WaitGroup
}

// DispatcherConfig tunes a Dispatcher; the zero value takes every default.
type DispatcherConfig struct {
	// Workers is how many batches an instance has in flight at once.
	// Defaults to 2.
	Workers int
	// BatchSize is the most commands claimed at once; a batch's commands
	// are sent concurrently. Defaults to 100.
	BatchSize int
	// Interval is how often an idle dispatcher looks for commands other
	// instances committed (its own instance wakes it with Notify). Defaults
	// to 200 ms.
	Interval time.Duration
	// Linger is how long a woken dispatcher waits for more commands to
	// gather. Defaults to 1 ms.
	Linger time.Duration
	// Lease is how long a claim holds its commands; a batch's sends end
	// within 4/5 of it. Defaults to 30 s.
	Lease time.Duration
	// SendTimeout bounds one command's round trip. Defaults to 10 s.
	SendTimeout time.Duration
	// Concurrency bounds the commands one batch has in flight at once: an
	// order service is an application, not a queue, and a burst of due
	// orders must not arrive as hundreds of simultaneous requests.
	// Defaults to 16.
	Concurrency int
	// MaxAttempts is how many failed sends make a command DEAD
	// (--order-service-max-attempts). Defaults to 20.
	MaxAttempts int
	// MaxAge is how long a command may keep failing before it is DEAD,
	// counted from when it was written or last retried
	// (--order-service-max-age). Defaults to 24 h.
	MaxAge time.Duration
	// RetryBase and RetryMax bound the backoff of a failed command:
	// RetryBase doubled per failure, up to RetryMax, ±20%. Defaults 500 ms
	// and 5 minutes.
	RetryBase, RetryMax time.Duration
	// PayingRetry is when a command answered paying goes again when the
	// answer names no retry_after_seconds; PayingMin and PayingMax bound
	// the answer's. Defaults 30 s, 1 s and 1 h.
	PayingRetry, PayingMin, PayingMax time.Duration
	// StatsInterval is how often the backlog gauges are refreshed.
	// Defaults to 5 s.
	StatsInterval time.Duration
	Logger        *slog.Logger
	// Metrics, when set, receives the dispatcher's counters and gauges.
	Metrics *Metrics
	// OnSettled, when set, is called with each batch's settle (the
	// service counts its transitions and runs what follows them).
	OnSettled func(res store.SettleCommandsResult)
	// AutoRefund (--auto-refund): an answer of cancelled for an order lapse
	// saw paid writes the refund of the attempt that paid it (it owes the
	// money back either way).
	AutoRefund bool
}

func (c *DispatcherConfig) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	def(&c.Interval, 200*time.Millisecond)
	def(&c.Linger, time.Millisecond)
	def(&c.Lease, 30*time.Second)
	def(&c.SendTimeout, 10*time.Second)
	def(&c.MaxAge, 24*time.Hour)
	def(&c.RetryBase, 500*time.Millisecond)
	def(&c.RetryMax, 5*time.Minute)
	def(&c.PayingRetry, 30*time.Second)
	def(&c.PayingMin, time.Second)
	def(&c.PayingMax, time.Hour)
	def(&c.StatsInterval, 5*time.Second)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Notify wakes the dispatcher: commands were just committed. It never blocks.
func (d *Dispatcher) Notify() { d.wake.Notify() }

// Run dispatches until ctx ends, then makes a last bounded pass.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.Store == nil || d.Client == nil {
		return errors.New("ordersvc: a Dispatcher needs a Store and a Client")
	}
	d.setDefaults()
	run := drain.Dispatch{Name: "ordersvc", What: "command", Logger: d.Logger, Workers: d.Workers, StatsInterval: d.StatsInterval,
		Loop: drain.Loop{Batch: d.BatchSize, Interval: d.Interval, Linger: d.Linger, Wake: d.wake.C()}}
	if d.Metrics != nil {
		run.Stats = drain.Gauges(d.Store.CommandStats, d.Metrics.setStats)
	}
	d.runMu.Lock()
	d.runCtx, d.held = ctx, make(chan struct{}, d.Workers)
	d.runMu.Unlock()
	run.Run(ctx, d.pass)
	d.runMu.Lock()
	d.runCtx = nil
	d.runMu.Unlock()
	d.handedWG.Wait()
	return nil
}

// Handoff is a dispatcher's promise to send a batch of commands at once,
// taken before the cancel that writes them claimed
// (store.CancelDueParams.CommandLease, Lease).
type Handoff struct {
	d     *Dispatcher
	ctx   context.Context
	start time.Time
	done  bool
}

// Hold takes a slot for a batch of commands a cancel is about to write
// claimed for this dispatcher, so that it sends them the moment the cancel
// commits: no claim transaction, no wait for a worker's next pass. The
// command lag at 1,000 due/s is the timer, the cancel's commit, the send
// and the settle. ok=false when the dispatcher is not running or Workers
// handed-over batches are in flight already: the cancel writes its commands
// unclaimed, for the workers' claims. Lease is the lease to write them with.
// Exactly one of the Handoff's Deliver and Release must follow.
func (d *Dispatcher) Hold() (h *Handoff, ok bool) {
	d.runMu.Lock()
	defer d.runMu.Unlock()
	if d.runCtx == nil || d.runCtx.Err() != nil {
		return nil, false
	}
	select {
	case d.held <- struct{}{}:
	default:
		d.countHandoff(handoffBusy)
		return nil, false
	}
	d.countHandoff(handoffHeld)
	d.handedWG.Add(1)
	return &Handoff{d: d, ctx: d.runCtx, start: time.Now()}, true
}

func (d *Dispatcher) countHandoff(outcome string) {
	if d.Metrics != nil {
		d.Metrics.handoffs.WithLabelValues(outcome).Inc()
	}
}

// Lease is how long the commands of a Handoff are to be claimed for.
func (h *Handoff) Lease() time.Duration { return h.d.Lease }

// Deliver sends the commands the cancel wrote claimed (empty: none) and
// settles the answers, in the background, then frees the slot. The
// dispatcher's Run waits for it before returning.
func (h *Handoff) Deliver(cs []store.ClaimedCommand) {
	if h.done {
		return
	}
	h.done = true
	if len(cs) == 0 {
		h.free()
		return
	}
	go func() {
		defer h.free()
		if _, err := h.d.deliver(h.ctx, h.start, cs); err != nil {
			// The lease runs out and a worker's claim sends them again.
			h.d.Logger.Warn("ordersvc: settling a handed-over batch failed; its commands go again after their lease", "commands", len(cs), "err", err)
		}
	}()
}

// Release frees the slot of a Handoff whose cancel wrote nothing claimed
// (it failed, or the store cannot claim at write).
func (h *Handoff) Release() {
	if !h.done {
		h.done = true
		h.free()
	}
}

func (h *Handoff) free() {
	<-h.d.held
	h.d.handedWG.Done()
}

// pass claims one batch, sends its commands concurrently and settles it.
func (d *Dispatcher) pass(ctx context.Context) (drain.Pass, error) {
	start := time.Now()
	cs, err := d.Store.ClaimCommands(ctx, store.ClaimTasksParams{Limit: d.BatchSize, Lease: d.Lease})
	if err != nil || len(cs) == 0 {
		return drain.Pass{}, err
	}
	return d.deliver(ctx, start, cs)
}

// deliver sends a claimed batch's commands concurrently and settles it;
// start is from before the claim.
func (d *Dispatcher) deliver(ctx context.Context, start time.Time, cs []store.ClaimedCommand) (drain.Pass, error) {
	answers, errs := drain.SendAll(ctx, drain.Sending{Lease: d.Lease, Timeout: d.SendTimeout, Concurrency: d.Concurrency}, start, cs,
		func(ctx context.Context, c store.ClaimedCommand) (Answer, error) {
			return d.Client.Send(ctx, DeliveryOf(c))
		})

	outcomes := make([]store.CommandOutcome, len(cs))
	answered := 0
	for i, c := range cs {
		o := d.outcome(c, answers[i], errs[i])
		outcomes[i] = o
		switch {
		case o.Dead:
			d.Logger.Error("ordersvc: command is DEAD; an operator must look at it (lapse commands list --dead, lapse commands retry)",
				"command_id", c.ID, "order_id", c.OrderID, "attempts", c.Attempts, "result", o.Result, "err", o.Error)
		case o.Result != "":
			answered++
		}
	}
	res, err := drain.Settle(ctx, func(ctx context.Context) (store.SettleCommandsResult, error) {
		return d.Store.SettleCommands(ctx, outcomes)
	})
	if err != nil {
		// The answers go again when the lease runs out: the receiver
		// answers each command id as before. A duplicate, never a loss.
		return drain.Pass{Claimed: len(cs)}, err
	}
	if d.Metrics != nil {
		d.Metrics.observe(cs, outcomes, res)
	}
	if d.OnSettled != nil {
		d.OnSettled(res)
	}
	for _, cf := range res.Conflicts {
		if cf.RefundRequired {
			d.Logger.Error("ordersvc: the order service cancelled an order lapse saw paid; it stays PAID in lapse and the payment is owed back (refund_required)",
				"command_id", cf.CommandID, "order_id", cf.OrderID, "result", cf.Result, "status", cf.Status, "auto_refund", d.AutoRefund)
			continue
		}
		d.Logger.Error("ordersvc: the order service's answer contradicts lapse's record of the order; left as lapse has it",
			"command_id", cf.CommandID, "order_id", cf.OrderID, "result", cf.Result, "status", cf.Status)
	}
	if failed := len(cs) - answered; failed > 0 {
		d.Logger.Warn("ordersvc: commands not answered; retrying later", "failed", failed, "of", len(cs), "err", firstError(errs))
	}
	return drain.Pass{Claimed: len(cs), Failed: answered == 0}, nil
}

// DeliveryOf is the delivery of claimed command c: its body from its order
// as the claim read it.
func DeliveryOf(c store.ClaimedCommand) Delivery {
	o := c.Order
	attempts := make([]Attempt, len(o.Payments))
	for i, p := range o.Payments {
		attempts[i] = Attempt{PaymentID: p.PaymentID, Status: string(p.Status), AmountCents: p.AmountCents, Currency: p.Currency}
	}
	return Delivery{ID: c.ID, Attempt: c.Attempts, Command: Command{
		Type: Type, OrderID: c.OrderID, Deadline: FormatTime(o.ExpiresAt), CancelAfter: FormatTime(c.CancelAfter),
		AmountCents: o.AmountCents, Currency: o.Currency, Attempts: attempts, SchemaVersion: SchemaVersion,
	}}
}

// outcome decides what becomes of c after the order service answered a
// (err nil) or the send failed with err.
func (d *Dispatcher) outcome(c store.ClaimedCommand, a Answer, err error) store.CommandOutcome {
	o := store.CommandOutcome{ID: c.ID, OrderID: c.OrderID, Attempts: c.Attempts, AutoRefund: d.AutoRefund}
	if err == nil {
		o.Result = string(a.Result)
		switch a.Result {
		case NotFound:
			o.Error = "the order service has no such order"
			o.Dead = true
		case Paying:
			o.RetryIn = d.PayingRetry
			if a.RetryAfterSeconds > 0 {
				o.RetryIn = min(max(time.Duration(a.RetryAfterSeconds)*time.Second, d.PayingMin), d.PayingMax)
			}
		}
		return o
	}
	refused := IsRefusal(err)
	f := d.retry().Failed(err, refused, c.Failures, c.Since, c.ClaimedAt)
	o.Error, o.Dead, o.RetryIn = f.Error, f.Dead, f.RetryIn
	if refused {
		return o
	}
	var serr *StatusError
	if errors.As(err, &serr) && serr.RetryAfter > o.RetryIn {
		o.RetryIn = serr.RetryAfter
	}
	return o
}

func firstError(errs []error) string {
	for _, err := range errs {
		if err != nil {
			return err.Error()
		}
	}
	return ""
}

func (d *Dispatcher) retry() drain.Retry {
	return drain.Retry{MaxAttempts: d.MaxAttempts, MaxAge: d.MaxAge, Base: d.RetryBase, Max: d.RetryMax}
}

// Status names used by the metrics for outcomes that are not a result.
const (
	outcomeFailed   = "failed"
	outcomeDead     = "dead"
	outcomeConflict = "conflict"
)
