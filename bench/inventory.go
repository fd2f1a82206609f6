package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Inventory is a remote inventory that holds a run's stock (lapse bench
// --inventory): before the run every SKU is given its stock there
// (SetStock); each order is reserved there first — a reserve command sent
// with Client, reservation id = order id, task id "bench-reserve-<order
// id>" — and created with that reservation; its cancel or payment then makes
// the service write a release or confirm task, which its dispatcher sends.
// Probe measures those tasks: set Probe.OnDone as the service's
// Config.Tasks.OnDone.
type Inventory struct {
	// Client sends the reserve commands, over the transport the service's
	// dispatcher uses.
	Client inventory.Client
	// SetStock gives a SKU its stock at the inventory before the run (the
	// reference inventory's PUT /skus/{sku}); nil when the inventory holds
	// the stock already.
	SetStock func(ctx context.Context, sku string, available int64) error
	// Probe records the tasks the dispatcher settled DONE.
	Probe *TaskProbe
	// Tasks, when set, is the service's store: after the cancels the run
	// waits up to Config.Wait for every task to be DONE and reports those
	// that are not.
	Tasks store.Tasks
}

// reserve holds one unit of sku for order id at the inventory.
func (inv *Inventory) reserve(ctx context.Context, id, sku string) error {
	c := inventory.Command{TaskID: "bench-reserve-" + id, Action: inventory.Reserve, ReservationID: id, OrderID: id,
		Items: []inventory.Item{{SKU: sku, Qty: 1}}}
	a, err := inv.Client.Send(ctx, c)
	switch {
	case err != nil:
		return fmt.Errorf("bench: reserve %s at the inventory: %w", id, err)
	case !a.Done():
		return fmt.Errorf("bench: reserve %s at the inventory: %s %s", id, a.Result, a.Reason)
	}
	return nil
}

// TaskProbe records the stock tasks a dispatcher settled DONE: each task's
// lag from its commit (created_at, the store's clock: the cancel's or the
// payment's transaction) to the moment the dispatcher's settle committed.
type TaskProbe struct {
	mu          sync.Mutex
	seen        map[string]bool
	lags        map[order.TaskAction][]float64 // ms
	claims      map[order.TaskAction][]float64 // ms, commit → claim
	sends       map[order.TaskAction][]float64 // ms, claim → DONE
	batches     int
	settles     []float64 // ms, answers in hand → settle committed, per batch
	first, last time.Time
	again       int
}

// OnDone implements inventory.DispatcherConfig.OnDone: it is called after
// the batch's settle committed, which is the time it takes.
func (p *TaskProbe) OnDone(tasks []store.ClaimedTask, answered time.Time) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen, p.first = map[string]bool{}, now
		p.lags, p.claims, p.sends = map[order.TaskAction][]float64{}, map[order.TaskAction][]float64{}, map[order.TaskAction][]float64{}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p.batches++
	p.settles = append(p.settles, ms(now.Sub(answered)))
	for _, t := range tasks {
		if p.seen[t.ID] {
			p.again++ // settled DONE twice: a claim whose lease ran out
			continue
		}
		p.seen[t.ID] = true
		p.lags[t.Action] = append(p.lags[t.Action], ms(now.Sub(t.CreatedAt)))
		p.claims[t.Action] = append(p.claims[t.Action], ms(t.ClaimedAt.Sub(t.CreatedAt)))
		p.sends[t.Action] = append(p.sends[t.Action], ms(now.Sub(t.ClaimedAt)))
	}
	p.last = now
}

// Done counts the distinct tasks settled DONE so far.
func (p *TaskProbe) Done() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

// TaskResult is the stock tasks of one action in a run.
type TaskResult struct {
	// Action is release (cancels) or confirm (payments).
	Action string `json:"action"`
	// Tasks counts the tasks settled DONE.
	Tasks int `json:"tasks"`
	// LagMS is from each task's commit to its DONE: ClaimMS, from the
	// commit to the dispatcher's claim (waiting in the table), then SendMS,
	// from the claim to DONE (the command's round trip, its batch's
	// slowest, and the settle).
	LagMS   Percentiles `json:"lag_ms"`
	ClaimMS Percentiles `json:"claim_ms"`
	SendMS  Percentiles `json:"send_ms"`
}

// Results returns the lag per action, release first.
func (p *TaskProbe) Results() (rs []TaskResult, doneTwice, batches int, settleMS Percentiles) {
	p.mu.Lock()
	defer p.mu.Unlock()
	actions := make([]string, 0, len(p.lags))
	for a := range p.lags {
		actions = append(actions, string(a))
	}
	slices.Sort(actions)
	slices.Reverse(actions) // release, confirm, …
	for _, a := range actions {
		k := order.TaskAction(a)
		rs = append(rs, TaskResult{Action: a, Tasks: len(p.lags[k]), LagMS: percentiles(p.lags[k]),
			ClaimMS: percentiles(p.claims[k]), SendMS: percentiles(p.sends[k])})
	}
	return rs, p.again, p.batches, percentiles(p.settles)
}

// waitTasks waits until every order of the run has its task DONE (want of
// them), or Wait has passed, and fills the task results of res.
func (r *run) waitTasks(ctx context.Context, res *Result, want int) error {
	inv := r.cfg.Inventory
	deadline := time.Now().Add(r.cfg.Wait)
	for inv.Probe.Done() < want && time.Now().Before(deadline) {
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
	}
	var settle Percentiles
	res.Tasks, res.TasksDoneTwice, res.TaskBatches, settle = inv.Probe.Results()
	if res.TaskBatches > 0 {
		res.TaskSettleMS = &settle
	}
	res.TasksNotDone = max(0, want-inv.Probe.Done())
	if inv.Tasks != nil {
		st, err := inv.Tasks.TaskStats(ctx)
		if err != nil {
			return fmt.Errorf("bench: read the stock tasks: %w", err)
		}
		res.TasksDead = st.Dead
	}
	r.mu.Lock()
	p := percentiles(r.reserveMS)
	r.mu.Unlock()
	res.ReserveMS = &p
	return nil
}
