// Package bench is lapse's load harness: it drives a real Service on a real
// store and timer backend, and measures how late timeout cancels land
// (cancelled_at − cancel_after, both stamped by the store's clock), whether
// any landed early, and whether the invariants still hold afterwards.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Config is one workload.
type Config struct {
	// Orders is how many orders to create. Defaults to 2000.
	Orders int
	// Lead is how far ahead of the start the first deadline lies; creation
	// must finish within it. Defaults to 5 s.
	Lead time.Duration
	// Spread is the window the deadlines are spread over, evenly. Defaults to 1 s.
	Spread time.Duration
	// PayRatio is the fraction of orders paid (start + success callback) before their deadline.
	PayRatio float64
	// SKUs is how many SKUs the orders spread over. Defaults to 100.
	SKUs int
	// Concurrency is how many goroutines create orders. Defaults to 8.
	Concurrency int
	// Progress receives a live line every 500 ms (nil for none).
	Progress io.Writer
}

func (c *Config) setDefaults() {
	if c.Orders == 0 {
		c.Orders = 2000
	}
	if c.Lead == 0 {
		c.Lead = 5 * time.Second
	}
	if c.Spread == 0 {
		c.Spread = time.Second
	}
	if c.SKUs == 0 {
		c.SKUs = 100
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
}

// Percentiles of lateness in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Result is what a run measured.
type Result struct {
	Orders       int         `json:"orders"`
	CreatedPerS  float64     `json:"created_per_s"`
	Cancelled    int         `json:"cancelled"`
	Paid         int         `json:"paid"`
	LatenessMS   Percentiles `json:"lateness_ms"`
	Early        int         `json:"early"`
	DrainSeconds float64     `json:"drain_seconds"` // last deadline → last cancel
	AuditOK      bool        `json:"audit_ok"`
	Audit        []string    `json:"audit_violations,omitempty"`
}

// Run creates the workload on svc (already running) and st (its store),
// waits for every order to be settled, and measures.
func Run(ctx context.Context, svc *lapse.Service, st store.Store, cfg Config) (Result, error) {
	cfg.setDefaults()
	res := Result{Orders: cfg.Orders}
	if cfg.Orders < 1 || cfg.PayRatio < 0 || cfg.PayRatio > 1 {
		return res, fmt.Errorf("bench: want orders >= 1 and 0 <= pay-ratio <= 1")
	}
	perSKU := int64(cfg.Orders/cfg.SKUs + 1)
	for k := range cfg.SKUs {
		if _, err := svc.SetStock(ctx, skuName(k), perSKU); err != nil {
			return res, err
		}
	}
	start := time.Now()
	base := start.Add(cfg.Lead)
	var created, paid, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	next := atomic.Int64{}
	stopProgress := progress(cfg.Progress, func() string {
		due := 0
		if now := time.Now(); now.After(base) {
			due = min(cfg.Orders, int(float64(cfg.Orders)*float64(now.Sub(base))/float64(cfg.Spread)))
		}
		cancelled := int(metric(svc, "lapse_orders_cancelled_total"))
		waiting := max(0, due-cancelled-int(float64(due)*cfg.PayRatio))
		return fmt.Sprintf("created %d/%d  paid %d  cancelled %d  due but not cancelled %d",
			created.Load(), cfg.Orders, paid.Load(), cancelled, waiting)
	})
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Orders) || ctx.Err() != nil {
					return
				}
				due := base.Add(time.Duration(float64(cfg.Spread) * float64(i) / float64(cfg.Orders)))
				timeout := time.Until(due)
				if timeout < time.Millisecond {
					failed.Add(1)
					errOnce.Do(func() {
						firstErr = fmt.Errorf("bench: order %d created after its deadline: creation is slower than --lead %s allows", i, cfg.Lead)
					})
					return
				}
				r, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
					ID:    fmt.Sprintf("bench-%d-%07d", start.UnixMilli(), i),
					Items: []order.Item{{SKU: skuName(int(i) % cfg.SKUs), Qty: 1}}, AmountCents: 1000, Timeout: timeout,
				})
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("bench: create: %w", err) })
					return
				}
				created.Add(1)
				if float64(i%1000) < cfg.PayRatio*1000 {
					if err := pay(ctx, svc, r.Order); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
					paid.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.CreatedPerS = float64(created.Load()) / time.Since(start).Seconds()
	if firstErr != nil {
		stopProgress()
		return res, firstErr
	}
	// Wait for every unpaid order to be cancelled, bounded well past the last deadline.
	last := base.Add(time.Duration(float64(cfg.Spread) * float64(cfg.Orders-1) / float64(cfg.Orders)))
	limit := time.Until(last) + 60*time.Second
	want := float64(int64(cfg.Orders) - paid.Load())
	deadline := time.Now().Add(limit)
	for metric(svc, "lapse_orders_cancelled_total") < want {
		if time.Now().After(deadline) {
			stopProgress()
			return res, fmt.Errorf("bench: only %v of %v orders cancelled %s after the last deadline",
				metric(svc, "lapse_orders_cancelled_total"), want, limit)
		}
		select {
		case <-ctx.Done():
			stopProgress()
			return res, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	stopProgress()
	res.Paid = int(paid.Load())
	late, lastCancel, err := lateness(ctx, st)
	if err != nil {
		return res, err
	}
	res.Cancelled = len(late)
	for _, l := range late {
		if l < 0 {
			res.Early++
		}
	}
	res.LatenessMS = percentiles(late)
	res.DrainSeconds = lastCancel.Sub(last).Seconds()
	rep, err := st.Audit(ctx, store.AuditParams{AllowedLag: 30 * time.Second})
	if err != nil {
		return res, err
	}
	res.AuditOK = rep.OK()
	for _, c := range rep.Checks {
		if c.Count > 0 && !c.Warning {
			res.Audit = append(res.Audit, fmt.Sprintf("%s: %d", c.Name, c.Count))
		}
	}
	return res, nil
}

func skuName(k int) string { return fmt.Sprintf("bench-sku-%03d", k) }

// pay starts a payment and reports success, as buyer and gateway would.
func pay(ctx context.Context, svc *lapse.Service, o order.Order) error {
	if _, err := svc.Pay(ctx, o.ID); err != nil {
		return fmt.Errorf("bench: pay %s: %w", o.ID, err)
	}
	_, err := svc.Notify(ctx, lapse.Notification{OrderID: o.ID, PaymentID: "bench-" + o.ID, Status: lapse.PaymentSucceeded, AmountCents: o.AmountCents})
	if err != nil {
		return fmt.Errorf("bench: payment callback %s: %w", o.ID, err)
	}
	return nil
}

// lateness reads every timeout-cancelled order's cancelled_at − cancel_after in ms.
func lateness(ctx context.Context, st store.Store) ([]float64, time.Time, error) {
	var out []float64
	var last time.Time
	cursor := ""
	for {
		page, err := st.ListOrders(ctx, store.ListOrdersParams{Status: order.Cancelled, Limit: 500, Cursor: cursor})
		if err != nil {
			return nil, last, err
		}
		for _, o := range page.Orders {
			if o.CancelReason != order.ReasonTimeout {
				continue
			}
			out = append(out, float64(o.CancelledAt.Sub(o.CancelAfter))/float64(time.Millisecond))
			if o.CancelledAt.After(last) {
				last = o.CancelledAt
			}
		}
		if page.NextCursor == "" {
			return out, last, nil
		}
		cursor = page.NextCursor
	}
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

func metric(svc *lapse.Service, name string) float64 {
	mfs, err := svc.Registry().Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// progress prints line() every 500 ms until the returned stop is called.
func progress(w io.Writer, line func() string) func() {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(w, "\r%s\n", line())
				return
			case <-t.C:
				fmt.Fprintf(w, "\r%s   ", line())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
