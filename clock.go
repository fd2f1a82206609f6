package lapse

import (
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The store's clock decides (docs/architecture.md §1): a timer that fires
// before the store's clock reaches cancel_after changes nothing and is set
// again. It must be set again for when the store's clock gets there, on this
// process's clock — local now + (cancel_after − store now) — not for
// cancel_after itself: with the store's clock behind ours, cancel_after is
// already past here, and the timer would fire at once, again and again.

// earlyFloor is the least wait before an early timer fires again: a store
// clock that lags ours by more than the remaining time (its now read at the
// start of a transaction) cannot make the loop spin faster than this.
const earlyFloor = 20 * time.Millisecond

// skewWarnAbove is how far apart the clocks may be before lapse says so.
const skewWarnAbove = time.Second

// skewWatch keeps lapse_store_clock_skew_seconds: this process's clock minus
// the store's, as each cancel transaction measures it, and warns (once a
// minute at most) while it is over skewWarnAbove either way.
type skewWatch struct {
	gauge prometheus.Gauge
	log   *slog.Logger

	mu     sync.Mutex
	warned time.Time
}

func newSkewWatch(log *slog.Logger) *skewWatch {
	return &skewWatch{log: log, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lapse_store_clock_skew_seconds",
		Help: "This instance's clock minus the store's (positive: the store's clock is behind), measured by each cancel transaction; timers are set on this clock, guards run on the store's.",
	})}
}

// observe records one measurement: the store read storeNow while this
// process's clock went from before to after.
func (w *skewWatch) observe(before, after, storeNow time.Time) time.Duration {
	if storeNow.IsZero() {
		return 0
	}
	mid := before.Add(after.Sub(before) / 2)
	skew := mid.Sub(storeNow)
	w.gauge.Set(skew.Seconds())
	if math.Abs(skew.Seconds()) > skewWarnAbove.Seconds() {
		w.mu.Lock()
		warn := time.Since(w.warned) > time.Minute
		if warn {
			w.warned = time.Now()
		}
		w.mu.Unlock()
		if warn {
			w.log.Warn("this instance's clock and the store's disagree: timers fire early or late by as much (guards still run on the store's clock)",
				"skew", skew.Round(time.Millisecond), "store_now", storeNow)
		}
	}
	return skew
}

// earlyMaxFloor caps earlyBackoff.
const earlyMaxFloor = 5 * time.Second

// localDue is when, on this process's clock, the store's clock reaches at,
// given that it read storeNow a moment ago: at least floor from now.
func localDue(at, storeNow time.Time, floor time.Duration) time.Time {
	return time.Now().Add(max(at.Sub(storeNow), floor))
}

// earlyBackoff is the least wait before an order's early timer fires again:
// earlyFloor the first time, doubled each time the same order comes back
// early, up to earlyMaxFloor — a store clock that runs slower than this one
// cannot make one order loop. An order's count is forgotten when it is
// cancelled; the map is dropped whole past maxEarlyOrders (orders paid
// meanwhile never come back), which only restarts their backoff.
type earlyBackoff struct{ tries }

func (b *earlyBackoff) floor(id string) time.Duration {
	return min(earlyFloor<<min(b.next(id), 16), earlyMaxFloor)
}

// tries counts, per order, how often something was tried again, for a
// backoff. It holds at most maxTriedOrders orders: past that it starts
// afresh (a backoff forgotten is a shorter wait, never a lost order).
type tries struct {
	mu sync.Mutex
	n  map[string]int
}

const maxTriedOrders = 100_000

// next returns how often id was tried before, and counts one more.
func (t *tries) next(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil || len(t.n) >= maxTriedOrders {
		t.n = map[string]int{}
	}
	k := t.n[id]
	t.n[id] = k + 1
	return k
}

func (t *tries) forget(id string) {
	t.mu.Lock()
	delete(t.n, id)
	t.mu.Unlock()
}
