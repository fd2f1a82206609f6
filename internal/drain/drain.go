// Package drain is the loop shared by lapse's store-backed workers — the
// outbox relay and the stock-task dispatcher: claim a batch with a lease,
// work it, settle it, and decide when to look again.
//
// The loop, written once: a pass that fills its batch runs again at once
// (more are waiting); a pass that fails backs off, doubling up to a limit;
// otherwise the worker sleeps until its own instance wakes it (after a short
// linger, so a burst gathers into one batch) or an interval passes (work
// committed by other instances). A worker can be told to yield to work of a
// higher priority (Loop.Yield): it holds its passes back for a bounded time.
// When the context ends, passes go on for a bounded flush (never held) until
// one comes back short, so a clean shutdown leaves little of what was just
// committed behind.
package drain

import (
	"context"
	"time"
)

// Pass is what one pass of a worker reports.
type Pass struct {
	// Claimed is how many items the pass claimed.
	Claimed int
	// Failed: none of what was claimed got through (the destination is
	// down): back off as after an error.
	Failed bool
	// Stop: the worker stops for good (its destination is gone); Run
	// returns when the context ends.
	Stop bool
}

// Loop says when a worker runs its passes.
type Loop struct {
	// Batch is the most items one pass claims: a full pass runs again at once.
	Batch int
	// Interval is how long an idle worker sleeps when nothing wakes it.
	Interval time.Duration
	// Linger is how long a woken worker waits for more work to gather.
	Linger time.Duration
	// Wake, when it delivers, wakes an idle worker.
	Wake <-chan struct{}
	// BackoffBase and BackoffMax bound the pause after a failed pass
	// (defaults 100 ms and 30 s).
	BackoffBase, BackoffMax time.Duration
	// Flush bounds the passes run after the context ends (default 5 s; a
	// negative Flush runs none).
	Flush time.Duration
	// OnError, when set, hears every pass error and the pause before the next.
	OnError func(err error, retryIn time.Duration)
	// Yield, when set, is asked before each pass: while it reports true the
	// worker holds the pass back (work of a higher priority has the
	// store), for at most MaxYield at a time — then one pass runs whatever
	// Yield says, so a worker that yields is slowed, never stopped.
	Yield func() bool
	// MaxYield bounds one hold (default 1 s).
	MaxYield time.Duration
	// OnYield, when set, hears how long each hold lasted.
	OnYield func(held time.Duration)
}

// yieldPoll is how often a holding worker asks Yield again.
const yieldPoll = 10 * time.Millisecond

// hold waits while Yield reports true, at most MaxYield, or until ctx ends.
func (l Loop) hold(ctx context.Context) {
	if l.Yield == nil || !l.Yield() {
		return
	}
	start := time.Now()
	limit := l.MaxYield
	if limit <= 0 {
		limit = time.Second
	}
	for ctx.Err() == nil && time.Since(start) < limit && l.Yield() {
		Sleep(ctx, min(yieldPoll, limit-time.Since(start)))
	}
	if l.OnYield != nil {
		l.OnYield(time.Since(start))
	}
}

// Run runs pass until ctx ends, then flushes. pass is given ctx while it
// runs, and a context bounded by Flush afterwards.
func (l Loop) Run(ctx context.Context, pass func(ctx context.Context) (Pass, error)) {
	base, limit := l.BackoffBase, l.BackoffMax
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if limit <= 0 {
		limit = 30 * time.Second
	}
	failures := 0
	for ctx.Err() == nil {
		l.hold(ctx)
		if ctx.Err() != nil {
			break
		}
		p, err := pass(ctx)
		switch {
		case p.Stop:
			<-ctx.Done()
			return
		case err != nil || (p.Claimed > 0 && p.Failed):
			failures++
			wait := Backoff(failures, base, limit)
			if err != nil && l.OnError != nil && ctx.Err() == nil {
				l.OnError(err, wait)
			}
			Sleep(ctx, wait)
			continue
		}
		failures = 0
		if l.Batch > 0 && p.Claimed >= l.Batch {
			continue // more are waiting
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.Interval):
		case <-l.Wake:
			Sleep(ctx, l.Linger)
		}
	}
	if l.Flush < 0 {
		return
	}
	flush := l.Flush
	if flush == 0 {
		flush = 5 * time.Second
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flush)
	defer cancel()
	for fctx.Err() == nil {
		p, err := pass(fctx)
		if err != nil || p.Stop || p.Failed || l.Batch <= 0 || p.Claimed < l.Batch {
			return
		}
	}
}

// Backoff is base doubled per attempt after the first, at most limit, with
// ±20% jitter.
func Backoff(attempt int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return Jitter(min(d, limit))
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
