package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse/internal/drain"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Dispatcher sends the stock tasks the store holds to the inventory: claim a
// batch with a lease, send each task's command, settle what the inventory
// answered. Any number of instances run one over the same store; a task is
// held by one claim at a time, and a dispatcher that dies mid-batch leaves a
// lease that runs out, after which the task is sent again with the same
// task id — the inventory answers ALREADY_DONE.
//
// A task whose command the inventory rejects (REJECTED) is DEAD at once: an
// operator looks at it (`lapse tasks list --dead`) and sends it again
// (`lapse tasks retry`). A task that fails otherwise (timeouts, connection
// errors, 5xx) is retried with exponential backoff, and is DEAD after
// MaxAttempts failures or MaxAge. DEAD tasks are never dropped.
type Dispatcher struct {
	Store  store.Tasks
	Client Client
	DispatcherConfig

	wake drain.Wake
}

// DispatcherConfig tunes a Dispatcher; the zero value takes every default.
type DispatcherConfig struct {
	// Workers is how many batches an instance has in flight at once.
	// Defaults to 2.
	Workers int
	// BatchSize is the most tasks claimed at once; a batch's commands are
	// sent concurrently. Defaults to 100.
	BatchSize int
	// Interval is how often an idle dispatcher looks for tasks other
	// instances committed (its own instance wakes it with Notify). Defaults
	// to 200 ms.
	Interval time.Duration
	// Linger is how long a woken dispatcher waits for more tasks to gather.
	// Defaults to 2 ms.
	Linger time.Duration
	// Lease is how long a claim holds its tasks; a batch's sends end within
	// 4/5 of it. Defaults to 30 s.
	Lease time.Duration
	// SendTimeout bounds one command's round trip. Defaults to 10 s (and
	// never more than the lease allows).
	SendTimeout time.Duration
	// MaxAttempts is how many failed sends make a task DEAD (--task-max-attempts).
	// Defaults to 20.
	MaxAttempts int
	// MaxAge is how long a task may keep failing before it is DEAD, counted
	// from when it was written or last retried (--task-max-age). Defaults to 24 h.
	MaxAge time.Duration
	// RetryBase and RetryMax bound the backoff of a failed task: RetryBase
	// doubled per failure, up to RetryMax, ±20%. Defaults 500 ms and 5 minutes.
	RetryBase, RetryMax time.Duration
	// StatsInterval is how often the backlog gauges are refreshed. Defaults to 5 s.
	StatsInterval time.Duration
	Logger        *slog.Logger
	// Metrics, when set, receives the dispatcher's counters and gauges.
	Metrics *Metrics
	// OnDone, when set, is called with the tasks a batch settled DONE and
	// when (benchmarks measure task lag with it).
	OnDone func(tasks []store.ClaimedTask, at time.Time)
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
	def(&c.Interval, 200*time.Millisecond)
	def(&c.Linger, 2*time.Millisecond)
	def(&c.Lease, 30*time.Second)
	def(&c.SendTimeout, 10*time.Second)
	def(&c.MaxAge, 24*time.Hour)
	def(&c.RetryBase, 500*time.Millisecond)
	def(&c.RetryMax, 5*time.Minute)
	def(&c.StatsInterval, 5*time.Second)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Notify wakes the dispatcher: tasks were just committed. It never blocks.
func (d *Dispatcher) Notify() { d.wake.Notify() }

// Run dispatches until ctx ends, then makes a last bounded pass.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.Store == nil || d.Client == nil {
		return errors.New("inventory: a Dispatcher needs a Store and a Client")
	}
	d.setDefaults()
	run := drain.Dispatch{Name: "inventory", What: "task", Logger: d.Logger, Workers: d.Workers, StatsInterval: d.StatsInterval,
		Loop: drain.Loop{Batch: d.BatchSize, Interval: d.Interval, Linger: d.Linger, Wake: d.wake.C()}}
	if d.Metrics != nil {
		run.Stats = drain.Gauges(d.Store.TaskStats, d.Metrics.setStats)
	}
	run.Run(ctx, d.pass)
	return nil
}

// pass claims one batch, sends its commands concurrently and settles it.
func (d *Dispatcher) pass(ctx context.Context) (drain.Pass, error) {
	start := time.Now()
	ts, err := d.Store.ClaimTasks(ctx, store.ClaimTasksParams{Limit: d.BatchSize, Lease: d.Lease})
	if err != nil || len(ts) == 0 {
		return drain.Pass{}, err
	}
	answers, errs := drain.SendAll(ctx, drain.Sending{Lease: d.Lease, Timeout: d.SendTimeout}, start, ts, d.send)
	at := time.Now()

	outcomes := make([]store.TaskOutcome, len(ts))
	var done []store.ClaimedTask
	failed := 0
	for i, t := range ts {
		o := d.outcome(t, answers[i], errs[i])
		outcomes[i] = o
		switch {
		case o.Done:
			done = append(done, t)
		case o.Dead:
			failed++
			d.Logger.Error("inventory: stock task is DEAD; an operator must look at it (lapse tasks list --dead, lapse tasks retry)",
				"task_id", t.ID, "order_id", t.OrderID, "action", t.Action, "reservation_id", t.ReservationID,
				"attempts", t.Attempts, "err", o.Error)
		default:
			failed++
		}
	}
	if _, err := drain.Settle(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.Store.SettleTasks(ctx, outcomes)
	}); err != nil {
		// What was applied goes again when the lease runs out: the
		// inventory answers ALREADY_DONE. A duplicate, never a loss.
		return drain.Pass{Claimed: len(ts)}, err
	}
	if d.Metrics != nil {
		d.Metrics.observe(ts, outcomes, at)
	}
	if len(done) > 0 && d.OnDone != nil {
		d.OnDone(done, at)
	}
	if failed > 0 {
		d.Logger.Warn("inventory: stock tasks not done; retrying later", "failed", failed, "of", len(ts), "err", firstError(errs, answers))
	}
	return drain.Pass{Claimed: len(ts), Failed: len(done) == 0}, nil
}

// send sends t's command and checks the answer is for it.
func (d *Dispatcher) send(ctx context.Context, t store.ClaimedTask) (Answer, error) {
	c := CommandOf(t.StockTask)
	a, err := d.Client.Send(ctx, c)
	if err != nil {
		return Answer{}, err
	}
	switch {
	case a.TaskID != "" && a.TaskID != c.TaskID:
		return Answer{}, fmt.Errorf("inventory answered task %q to task %q", a.TaskID, c.TaskID)
	case a.Result != Success && a.Result != AlreadyDone && a.Result != Rejected:
		return Answer{}, fmt.Errorf("inventory answered %q: want %s, %s or %s", a.Result, Success, AlreadyDone, Rejected)
	}
	return a, nil
}

// CommandOf is the command that sends task t.
func CommandOf(t order.StockTask) Command {
	items := make([]Item, len(t.Items))
	for i, it := range t.Items {
		items[i] = Item{SKU: it.SKU, Qty: it.Qty}
	}
	return Command{TaskID: t.ID, Action: Action(t.Action), ReservationID: t.ReservationID, OrderID: t.OrderID, Items: items}
}

// outcome decides what becomes of t after the inventory answered a (err nil)
// or the send failed with err.
func (d *Dispatcher) outcome(t store.ClaimedTask, a Answer, err error) store.TaskOutcome {
	o := store.TaskOutcome{ID: t.ID, Attempts: t.Attempts, Result: string(a.Result),
		Action: t.Action, OrderID: t.OrderID, ReservationID: t.ReservationID}
	final := false
	switch {
	case err == nil && a.Done():
		o.Done = true
		return o
	case err == nil && t.Action == order.TaskReserve:
		// A reserve the inventory refused holds nothing: the reserving
		// step is over, and the create's retry answers insufficient_stock.
		o.Done = true
		return o
	case err == nil: // REJECTED: for good, an operator decides
		err, final = errors.New("REJECTED: "+a.Reason), true
	}
	retry := drain.Retry{MaxAttempts: d.MaxAttempts, MaxAge: d.MaxAge, Base: d.RetryBase, Max: d.RetryMax}
	f := retry.Failed(err, final, t.Failures, t.Since, t.ClaimedAt)
	o.Error, o.Dead, o.RetryIn = f.Error, f.Dead, f.RetryIn
	return o
}

func firstError(errs []error, answers []Answer) string {
	for i, err := range errs {
		if err != nil {
			return err.Error()
		}
		if answers[i].Result == Rejected {
			return "REJECTED: " + answers[i].Reason
		}
	}
	return ""
}
