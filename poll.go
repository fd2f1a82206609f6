package lapse

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/memory"
)

// poller cancels due orders that the store finds itself (CancelDue in claim
// mode: FOR UPDATE SKIP LOCKED on the orders table), so any number of lapse
// instances can run it at once without a leader and without double work.
//
// It runs in two roles:
//   - the sql timer backend (--timers sql): no lag, sleeping until the next
//     deadline in the store and woken early when this process creates an order
//     due sooner than that;
//   - the fallback sweep behind any other backend: every SweepInterval, only
//     orders overdue by more than SweepLag. Each order it cancels is a timer
//     the primary backend lost, so it is counted (lapse_sweep_caught_total).
type poller struct {
	s        *Service
	lag      time.Duration
	maxSleep time.Duration
	follow   bool // sleep until the store's next deadline (sql timers)
	onCancel func(n int)

	mu     sync.Mutex
	plan   time.Time // when the loop next wakes; zero while it is awake
	missed time.Time // the earliest deadline nudged while awake, for the next plan
	wake   chan struct{}
}

func newPoller(s *Service, lag, maxSleep time.Duration, follow bool, onCancel func(int)) *poller {
	return &poller{s: s, lag: lag, maxSleep: maxSleep, follow: follow, onCancel: onCancel, wake: make(chan struct{}, 1)}
}

// nudge wakes the loop if due is earlier than its plan. While the loop is
// awake the deadline is remembered for its next plan instead: waking it again
// would cost an empty claim transaction per order created. Woken, the loop
// remembers it too: an order created in a caller's transaction (CreateOrderTx)
// is nudged before it commits, so the store cannot show it to the plan yet.
func (p *poller) nudge(due time.Time) {
	p.mu.Lock()
	if p.missed.IsZero() || due.Before(p.missed) {
		p.missed = due
	}
	if p.plan.IsZero() {
		p.mu.Unlock()
		return
	}
	early := due.Before(p.plan)
	p.mu.Unlock()
	if early {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// replan wakes the loop to claim and plan again from the store, whatever
// its plan: deadlines may have been set that it was never told of.
func (p *poller) replan() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *poller) run(ctx context.Context) {
	batch := p.s.cfg.BatchSize
	attempt, width := 0, 1
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	for ctx.Err() == nil {
		p.mu.Lock()
		p.plan = time.Time{}
		p.mu.Unlock()
		res, full, err := p.claim(ctx, batch, width)
		p.enqueueChecks(ctx)
		var wait time.Duration
		switch {
		case err != nil && !full:
			attempt++
			width = 1
			wait = timer.Backoff(attempt)
		case full:
			attempt = 0
			if p.follow {
				width = burstClaimers
			}
			continue // more are due
		default:
			attempt, width = 0, 1
			wait = p.untilNext(ctx, res.Now)
		}
		p.mu.Lock()
		if !p.missed.IsZero() && p.follow {
			wait = min(wait, max(time.Until(p.missed.Add(p.lag)), 0)+memory.DefaultGather)
		}
		p.missed = time.Time{}
		p.plan = time.Now().Add(wait)
		p.mu.Unlock()
		sleep.Reset(wait)
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-sleep.C:
		}
		sleep.Stop()
	}
}

// burstClaimers is how many claimers the sql timers run at once while claims
// come back full (a burst of due orders): each runs its transactions on its
// own connection of the pool, one after another, and SKIP LOCKED gives them
// disjoint batches, so the database works on one claimer's batch while lapse
// encodes another's. Outside a burst one claim at a time: no empty
// transactions.
const burstClaimers = 2

// burstRound bounds one round of a burst: then the loop comes back up to
// hand the orders that need a gateway check to the checker (the claims skip
// them) before claiming again.
const burstRound = time.Second

// claim runs width claimers at once and returns the last result (its Now),
// whether the round ended on full claims (more are due), and the first
// error. With width 1 it is one claim. Wider, each claimer claims again as
// long as its claims come back full, without waiting for the others, until
// one comes back short or fails, or burstRound has passed.
func (p *poller) claim(ctx context.Context, batch, width int) (store.CancelDueResult, bool, error) {
	params := store.CancelDueParams{Claim: batch, Lag: p.lag, SkipAttempted: p.s.checks != nil, Command: p.s.commands != nil}
	var (
		mu    sync.Mutex
		last  store.CancelDueResult
		full  = true
		first error
		short atomic.Bool // a claim came back short or failed: the burst is over
	)
	end := time.Now().Add(burstRound)
	claimer := func() {
		for {
			res, err := p.s.cancelBatch(context.WithoutCancel(ctx), params)
			n := len(res.Cancelled)
			if err == nil && p.onCancel != nil && n > 0 {
				p.onCancel(n)
			}
			mu.Lock()
			switch {
			case err != nil:
				first, full = cmp.Or(first, err), false
			case n < batch:
				full = false
			}
			if err == nil && res.Now.After(last.Now) {
				last = res
			}
			mu.Unlock()
			if err != nil || n < batch {
				short.Store(true)
				return
			}
			if width == 1 || short.Load() || ctx.Err() != nil || time.Now().After(end) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for range width {
		wg.Go(claimer)
	}
	wg.Wait()
	return last, full, first
}

// untilNext is how long to sleep: until the next deadline (sql timers), never
// longer than maxSleep.
func (p *poller) untilNext(ctx context.Context, now time.Time) time.Duration {
	if !p.follow {
		return p.maxSleep
	}
	next, ok, err := p.s.store.NextDeadline(ctx, p.s.checks != nil)
	if err != nil || !ok {
		return p.maxSleep
	}
	// The store's clock said now; sleep by the difference on ours, plus the
	// gather window so orders due a moment apart are cancelled in one batch.
	return min(max(next.Add(p.lag).Sub(now), 0)+memory.DefaultGather, p.maxSleep)
}

// enqueueChecks hands the orders past their deadline that need a gateway
// check (PAYING, or attempted) to the checker, which ignores those it is
// already on.
func (p *poller) enqueueChecks(ctx context.Context) {
	if p.s.checks == nil {
		return
	}
	due, err := p.s.store.PaymentChecks(ctx, p.lag, 1000)
	if err != nil {
		p.s.log.Warn("list orders due for a gateway check", "err", err)
		return
	}
	for _, d := range due {
		p.s.checks.enqueue(d.OrderID)
	}
}
