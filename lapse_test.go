package lapse_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
	"github.com/lapsehq/lapse/timer"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs svc until the test ends and checks Run returns nil on shutdown.
func start(t *testing.T, svc *lapse.Service) {
	t.Helper()
	servicetest.Run(t, svc)
}

func newService(t *testing.T, cfg lapse.Config) *lapse.Service {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	svc, err := lapse.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func create(t *testing.T, svc *lapse.Service, id string, timeout time.Duration) order.Order {
	t.Helper()
	res, err := svc.CreateOrder(context.Background(), lapse.CreateOrderRequest{
		ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100, Timeout: timeout,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return res.Order
}

func status(t *testing.T, svc *lapse.Service, id string) order.Status {
	t.Helper()
	o, err := svc.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o.Status
}

func TestTimeoutCancelsAfterCancelAfterNeverBefore(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Grace: 50 * time.Millisecond})
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("t-%d", i)
		create(t, svc, id, time.Duration(20+i*10)*time.Millisecond)
		ids = append(ids, id)
	}
	waitFor(t, 10*time.Second, "every order cancelled", func() bool {
		for _, id := range ids {
			if status(t, svc, id) != order.Cancelled {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		o, _ := svc.Get(context.Background(), id)
		if o.CancelledAt.Before(o.CancelAfter) {
			t.Errorf("%s cancelled at %v, before cancel_after %v", id, o.CancelledAt, o.CancelAfter)
		}
		if o.CancelReason != order.ReasonTimeout {
			t.Errorf("%s reason %q", id, o.CancelReason)
		}
	}
	if got := metric(t, svc, "lapse_orders_cancelled_total"); got != 30 {
		t.Errorf("lapse_orders_cancelled_total = %v, want 30", got)
	}
	storetest.AuditOK(t, st)
}

// metric sums a counter or gauge of the service's registry over its labels.
func metric(t *testing.T, svc *lapse.Service, name string) float64 {
	t.Helper()
	mfs, err := svc.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func TestPayingOrderIsNeverCancelledBlind(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	ctx := context.Background()
	// A second to start the payment in: a loaded machine took over 100 ms.
	o := create(t, svc, "paying", time.Second)
	if _, err := svc.PayAttempt(ctx, "paying", "p1"); err != nil {
		t.Fatal(err)
	}
	create(t, svc, "witness", time.Second) // about the same deadline, not paying
	waitFor(t, 5*time.Second, "the witness cancelled", func() bool { return status(t, svc, "witness") == order.Cancelled })
	waitFor(t, 5*time.Second, "the stuck payment counted", func() bool {
		return metric(t, svc, "lapse_timers_paying_total") == 1 && metric(t, svc, "lapse_payments_stuck") == 1
	})
	if got := status(t, svc, "paying"); got != order.Paying {
		t.Fatalf("PAYING order past its deadline is %s", got)
	}
	// The gateway says it failed: the order is PENDING again, past its
	// deadline, and the timer set again cancels it at once.
	if time.Now().Before(o.CancelAfter) {
		t.Fatal("test setup: deadline not passed")
	}
	res, err := svc.Notify(ctx, lapse.Notification{OrderID: "paying", PaymentID: "p1", Status: lapse.PaymentFailed, AmountCents: 100})
	if err != nil || res.Outcome != store.OutcomeFailed {
		t.Fatalf("failed callback: %+v %v", res, err)
	}
	waitFor(t, 5*time.Second, "the failed payment's order cancelled", func() bool { return status(t, svc, "paying") == order.Cancelled })
	// Money arriving now is flagged for refund, never un-cancels.
	res, err = svc.Notify(ctx, lapse.Notification{OrderID: "paying", PaymentID: "p2", Status: lapse.PaymentSucceeded, AmountCents: 100})
	if err != nil || res.Outcome != store.OutcomeRefundRequired || res.Order.Status != order.Cancelled || !res.Order.RefundRequired {
		t.Fatalf("late success: %+v %v", res, err)
	}
	storetest.AuditOK(t, st)
}

// A crash: orders created, the process gone without any shutdown, reopened
// after their deadlines passed. The memory timers died with the process; the
// store seeds them again and every order is cancelled, once.
func TestCrashLosesNoTimer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "l.db")
	st := openStore(t, path)
	svc := newService(t, lapse.Config{Store: st})
	storetest.Stock(t, st, 100, "sku")
	create(t, svc, "c-0", time.Minute)
	var last order.Order
	for i := 1; i < 40; i++ {
		last = create(t, svc, fmt.Sprintf("c-%d", i), 50*time.Millisecond)
	}
	if _, err := svc.Pay(context.Background(), "c-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Notify(context.Background(), lapse.Notification{OrderID: "c-0", PaymentID: "p", Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
		t.Fatal(err)
	}
	// Crash: Run never ran, nothing shut down; only the file handles go.
	st.Close()
	time.Sleep(time.Until(last.CancelAfter.Add(10 * time.Millisecond)))

	st2 := openStore(t, path)
	t.Cleanup(func() { st2.Close() })
	svc2 := newService(t, lapse.Config{Store: st2})
	start(t, svc2)
	// The metric counts after the cancel commits: wait on it, not on the
	// rows, or the rows can be seen cancelled before it moves.
	waitFor(t, 10*time.Second, "every unpaid order cancelled", func() bool {
		return metric(t, svc2, "lapse_orders_cancelled_total") >= 39
	})
	if res, err := st2.ListOrders(context.Background(), store.ListOrdersParams{Status: order.Pending, Limit: 1}); err != nil || len(res.Orders) != 0 {
		t.Fatalf("PENDING orders left after the restart: %+v %v", res.Orders, err)
	}
	if got := status(t, svc2, "c-0"); got != order.Paid {
		t.Fatalf("paid order is %s after the restart", got)
	}
	if got := metric(t, svc2, "lapse_orders_cancelled_total"); got != 39 {
		t.Fatalf("cancelled %v, want 39", got)
	}
	storetest.AuditOK(t, st2) // includes: exactly one order.cancelled event per order
}

// lossy is a timer backend that loses every timer: only the fallback sweep
// can cancel anything.
type lossy struct{}

func (lossy) Schedule(context.Context, string, time.Time) error { return nil }
func (lossy) Unschedule(context.Context, string) error          { return nil }
func (lossy) Durable() bool                                     { return true }
func (lossy) Run(ctx context.Context, _ timer.Handler) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestFallbackSweepCatchesLostTimers(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Scheduler: lossy{}, SweepInterval: 20 * time.Millisecond, SweepLag: 30 * time.Millisecond})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	o := create(t, svc, "lost", 10*time.Millisecond)
	waitFor(t, 5*time.Second, "the sweep to cancel the lost order", func() bool { return status(t, svc, "lost") == order.Cancelled })
	got, _ := svc.Get(context.Background(), "lost")
	if lag := got.CancelledAt.Sub(o.CancelAfter); lag < 30*time.Millisecond {
		t.Fatalf("the sweep took an order overdue by %s, under its lag", lag)
	}
	if n := metric(t, svc, "lapse_sweep_caught_total"); n != 1 {
		t.Fatalf("lapse_sweep_caught_total = %v, want 1", n)
	}
	storetest.AuditOK(t, st)
}

// A negative SweepLag is no lag: the sweep takes an order as soon as its
// cancel_after has passed, and never before it. (It used to take orders
// that were not due yet: cancel_after <= now - lag with lag < 0.)
func TestNegativeSweepLagIsNoLag(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Scheduler: lossy{}, SweepInterval: 20 * time.Millisecond, SweepLag: -time.Hour})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	o := create(t, svc, "lost", 300*time.Millisecond)
	waitFor(t, 5*time.Second, "the sweep to cancel the lost order", func() bool { return status(t, svc, "lost") == order.Cancelled })
	got, _ := svc.Get(context.Background(), "lost")
	if got.CancelledAt.Before(o.CancelAfter) {
		t.Fatalf("the sweep cancelled an order %s before its cancel_after", o.CancelAfter.Sub(got.CancelledAt))
	}
	storetest.AuditOK(t, st)
}

func TestPollStoreWakesForAnEarlierDeadline(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	// A long max sleep: only the next-deadline plan and the nudge can make it on time.
	svc := newService(t, lapse.Config{Store: st, PollStore: true, PollMaxSleep: time.Hour, SweepInterval: -1})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	create(t, svc, "late", time.Hour)
	time.Sleep(20 * time.Millisecond) // let the poller plan its hour-long sleep
	o := create(t, svc, "soon", 50*time.Millisecond)
	waitFor(t, 5*time.Second, "the earlier order cancelled", func() bool { return status(t, svc, "soon") == order.Cancelled })
	got, _ := svc.Get(context.Background(), "soon")
	if got.CancelledAt.Before(o.CancelAfter) {
		t.Fatalf("cancelled early: %v < %v", got.CancelledAt, o.CancelAfter)
	}
	if status(t, svc, "late") != order.Pending {
		t.Fatal("the hour-long order was cancelled")
	}
	storetest.AuditOK(t, st)
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st})
	storetest.Stock(t, st, 10, "sku")
	many := make([]order.Item, lapse.MaxItems+1)
	for i := range many {
		many[i] = order.Item{SKU: fmt.Sprintf("s%d", i), Qty: 1}
	}
	cases := []struct {
		name  string
		req   lapse.CreateOrderRequest
		field string
	}{
		{"no items", lapse.CreateOrderRequest{AmountCents: 1}, "items"},
		{"too many items", lapse.CreateOrderRequest{Items: many}, "items"},
		{"zero qty", lapse.CreateOrderRequest{Items: []order.Item{{SKU: "sku"}}}, "items[0].qty"},
		{"empty sku", lapse.CreateOrderRequest{Items: []order.Item{{Qty: 1}}}, "items[0].sku"},
		{"duplicate sku", lapse.CreateOrderRequest{Items: []order.Item{{SKU: "sku", Qty: 1}, {SKU: "sku", Qty: 1}}}, "items[1].sku"},
		{"negative amount", lapse.CreateOrderRequest{Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: -1}, "amount_cents"},
		{"bad currency", lapse.CreateOrderRequest{Items: []order.Item{{SKU: "sku", Qty: 1}}, Currency: "eur"}, "currency"},
		{"bad id", lapse.CreateOrderRequest{ID: "a b", Items: []order.Item{{SKU: "sku", Qty: 1}}}, "id"},
		{"timeout over max", lapse.CreateOrderRequest{Items: []order.Item{{SKU: "sku", Qty: 1}}, Timeout: 8 * 24 * time.Hour}, "timeout_seconds"},
	}
	for _, c := range cases {
		_, err := svc.CreateOrder(context.Background(), c.req)
		var inv *lapse.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field || inv.Code != "invalid_field" {
			t.Errorf("%s: err = %v, want invalid %s", c.name, err, c.field)
		}
	}
	if sku, _ := st.GetSKU(context.Background(), "sku"); sku.Locked != 0 {
		t.Fatal("a refused order reserved stock")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	for name, cfg := range map[string]lapse.Config{
		"no store":          {},
		"negative grace":    {Store: st, Grace: -time.Second},
		"poll and schedule": {Store: st, PollStore: true, Scheduler: lossy{}},
		"bad currency":      {Store: st, DefaultCurrency: "euro"},
	} {
		if _, err := lapse.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Many goroutines create, pay, call back and cancel while the service's own
// timers fire at the deadline: the invariants hold afterwards.
func TestServiceRaceAtTheDeadline(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st})
	storetest.Stock(t, st, 1000, "sku")
	start(t, svc)
	ctx := context.Background()
	const n = 150
	var wg sync.WaitGroup
	accepted := make([]bool, n)
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		o := create(t, svc, id, 200*time.Millisecond)
		wg.Add(3)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(o.ExpiresAt.Add(-time.Millisecond)))
			if i%3 == 0 { // a failed attempt: back to PENDING, the timer may cancel it
				if _, err := svc.Pay(ctx, id); err == nil {
					_, _ = svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: "x" + id, Status: lapse.PaymentFailed, AmountCents: 100})
				}
				return
			}
			if _, err := svc.Pay(ctx, id); err == nil {
				if _, err := svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: "p" + id, Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
					t.Errorf("notify %s: %v", id, err)
				}
				accepted[i] = true
			}
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(o.ExpiresAt))
			_, _ = svc.Cancel(ctx, id)
		}()
		go func() { // a stray duplicate of the success callback
			defer wg.Done()
			time.Sleep(time.Until(o.ExpiresAt))
			_, _ = svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: "p" + id, Status: lapse.PaymentSucceeded, AmountCents: 100})
		}()
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "no order left PENDING", func() bool {
		res, err := st.ListOrders(ctx, store.ListOrdersParams{Status: order.Pending, Limit: 1})
		return err == nil && len(res.Orders) == 0
	})
	for i := range n {
		if accepted[i] {
			if got := status(t, svc, fmt.Sprintf("r-%d", i)); got != order.Paid {
				t.Errorf("r-%d: payment accepted, ended %s", i, got)
			}
		}
	}
	storetest.AuditOK(t, st)
}
