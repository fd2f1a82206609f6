package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse/order"
)

func skuName(k int) string { return fmt.Sprintf("bench-sku-%03d", k) }

// sku picks order i's SKU: the hot SKU (0) for HotSKUShare of the orders,
// the others in turn for the rest.
func (r *run) sku(i int64) string {
	k := r.cfg.SKUs
	if r.cfg.HotSKUShare > 0 {
		if unit(i, 1) < r.cfg.HotSKUShare || k == 1 {
			return skuName(0)
		}
		return skuName(1 + int(i%int64(k-1)))
	}
	return skuName(int(i % int64(k)))
}

// pays says whether order i is paid: exactly PayRatio of the orders, evenly spread.
func (r *run) pays(i int64) bool {
	p := r.cfg.PayRatio
	return math.Floor(float64(i+1)*p) > math.Floor(float64(i)*p)
}

// unit is a deterministic pseudo-random number in [0, 1) for order i (a
// splitmix64 hash), so runs are repeatable and goroutines share no generator.
func unit(i int64, salt uint64) float64 {
	z := uint64(i)*0x9e3779b97f4a7c15 + salt*0xbf58476d1ce4e5b9 + 0x632be59bd9b4e5f1
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// create runs the creators until the workload is done or the run fails.
func (r *run) create(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	windowBase := r.start.Add(r.cfg.Lead)
	var interval time.Duration
	if r.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / r.cfg.Rate)
	}
	var startOnce sync.Once
	var endMu sync.Mutex
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if r.cfg.Orders > 0 && i >= int64(r.cfg.Orders) {
					return
				}
				at := r.start.Add(time.Duration(i) * interval)
				if r.cfg.Duration > 0 {
					if (interval > 0 && at.Sub(r.start) >= r.cfg.Duration) || (interval == 0 && time.Since(r.start) >= r.cfg.Duration) {
						return
					}
				}
				if interval > 0 && !sleepUntil(ctx, at) {
					return
				}
				timeout := r.cfg.Timeout
				if !r.cfg.OpenLoop() {
					due := windowBase.Add(time.Duration(float64(r.cfg.Spread) * float64(i) / float64(r.cfg.Orders)))
					timeout = time.Until(due)
					if timeout < time.Millisecond {
						r.fail(fmt.Errorf("bench: order %d created after its deadline: creation is slower than --lead %s allows", i, r.cfg.Lead))
						return
					}
				}
				startOnce.Do(func() { r.createStart = time.Now() })
				id, key := fmt.Sprintf("%s%07d", r.prefix, i), ""
				if r.cfg.RetryFor > 0 {
					key = id // a retry whose first attempt committed replays it
				}
				reservation := ""
				if inv := r.cfg.Inventory; inv != nil {
					// Reserved at the inventory first, as a shop's
					// checkout would, then created with the reservation.
					t0 := time.Now()
					if err := r.retry(ctx, func() error { return inv.reserve(ctx, id, r.sku(i)) }); err != nil {
						if ctx.Err() == nil {
							r.fail(err)
						}
						return
					}
					took := float64(time.Since(t0).Microseconds()) / 1000
					r.mu.Lock()
					r.reserveMS = append(r.reserveMS, took)
					r.mu.Unlock()
					reservation = id
					if !r.cfg.OpenLoop() {
						due := windowBase.Add(time.Duration(float64(r.cfg.Spread) * float64(i) / float64(r.cfg.Orders)))
						if timeout = time.Until(due); timeout < time.Millisecond {
							r.fail(fmt.Errorf("bench: order %d created after its deadline: creation is slower than --lead %s allows", i, r.cfg.Lead))
							return
						}
					}
				}
				var o order.Order
				err := r.retry(ctx, func() (err error) {
					o, err = r.t.create(ctx, id, r.sku(i), 1000, timeout, key, reservation)
					return err
				})
				if err != nil {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("bench: create: %w", err))
					}
					return
				}
				endMu.Lock()
				r.createEnd = time.Now()
				endMu.Unlock()
				r.created.Add(1)
				r.mu.Lock()
				if r.firstCreated.IsZero() || o.CreatedAt.Before(r.firstCreated) {
					r.firstCreated = o.CreatedAt
				}
				r.lastDue = later(r.lastDue, o.CancelAfter)
				r.mu.Unlock()
				if r.pays(i) {
					r.schedulePayment(ctx, o, i)
				} else {
					r.due(o.CancelAfter)
				}
			}
		})
	}
	wg.Wait()
}

func sleepUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// due records an order that will time out (for the progress line).
func (r *run) due(cancelAfter time.Time) {
	r.mu.Lock()
	r.dues = append(r.dues, cancelAfter.UnixNano())
	r.mu.Unlock()
}

// schedulePayment pays o at the time PayAt says.
func (r *run) schedulePayment(ctx context.Context, o order.Order, i int64) {
	window := o.ExpiresAt.Sub(o.CreatedAt)
	margin := min(window/10, 100*time.Millisecond)
	at := o.ExpiresAt.Add(-margin)
	if r.cfg.PayAt == PayRandom {
		at = o.CreatedAt.Add(time.Duration(unit(i, 2) * float64(window-margin)))
	}
	r.payments.Add(1)
	time.AfterFunc(max(0, time.Until(at)), func() {
		defer r.payments.Done()
		if ctx.Err() != nil {
			return
		}
		// Each step on its own: retrying the start of a payment that went
		// through is harmless (PAYING stays PAYING), and so is retrying its
		// success (PAID stays PAID); starting the payment of a PAID order
		// again is not.
		err := r.retry(ctx, func() error { return r.t.startPayment(ctx, o.ID) })
		if err == nil {
			err = r.retry(ctx, func() error { return r.t.completePayment(ctx, o) })
		}
		switch {
		case err == nil:
			r.paid.Add(1)
		case errors.Is(err, errPayMissed),
			// In order-service mode the order service's answer decides: a
			// payment that started after its command went out may find
			// the order cancelled (its attempt is then money to refund).
			errors.Is(err, errNotPaid) && r.cfg.OrderService != nil:
			r.payMissed.Add(1)
			r.due(o.CancelAfter)
		case ctx.Err() == nil:
			r.fail(err)
		}
	})
}
