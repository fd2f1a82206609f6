package nats_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
	natstimer "github.com/lapsehq/lapse/timer/nats"
)

// The service on NATS timers, end to end: orders with deadlines spread over
// two seconds, one in five paid before its deadline. Every unpaid order is
// cancelled once, never before its deadline and within a bound after it;
// no paid order is cancelled, and paying one removes its schedule from the
// stream. The fallback sweep is off, so the timers are what cancels.
func TestServiceCancelsOrdersOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := servicetest.SQLite(t)
	const n = 60
	storetest.Stock(t, st, n, "sku")
	prefix := newPrefix(t)
	logger := slog.New(slog.DiscardHandler)
	timers := mustNew(t, natstimer.Config{Prefix: prefix, Logger: logger})
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: timers, SweepInterval: -1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)

	paid := func(i int) bool { return i%5 == 0 }
	id := func(i int) string { return fmt.Sprintf("o-%03d.x", i) } // a '.' as order ids may have
	// SQLite under the race detector creates a few dozen orders a second:
	// base leaves time to create them all first.
	start := time.Now()
	base := start.Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := c; i < n; i += 4 {
				deadline := base.Add(time.Duration(i) * 2 * time.Second / n)
				if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
					ID: id(i), Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100,
					Timeout: max(time.Until(deadline), time.Millisecond),
				}); err != nil {
					t.Errorf("create %s: %v", id(i), err)
					return
				}
				if !paid(i) {
					continue
				}
				if _, err := svc.Pay(ctx, id(i)); err != nil {
					t.Errorf("pay %s: %v", id(i), err)
					return
				}
				if _, err := svc.Notify(ctx, lapse.Notification{
					OrderID: id(i), PaymentID: id(i) + "-1", Status: lapse.PaymentSucceeded, AmountCents: 100, CallbackID: "cb-" + id(i),
				}); err != nil {
					t.Errorf("notify %s: %v", id(i), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("created %d orders in %v", n, time.Since(start).Round(time.Millisecond))

	// Paying removed the schedule from the stream.
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := js.Stream(ctx, prefix+"_timers")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 5 {
		if _, err := sched.GetLastMsgForSubject(ctx, schedSubject(prefix, id(i))); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s: paid, and its schedule is still in the stream (%v)", id(i), err)
		}
	}

	last := base.Add(2 * time.Second)
	deadline := time.Now().Add(time.Until(last) + 10*time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rep, err := svc.List(ctx, store.ListOrdersParams{Status: order.Pending, Limit: 1})
		if err == nil && len(rep.Orders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders still pending 10s after the last deadline (%v)", err)
		}
		<-tick.C
	}
	// Watch a moment past the last deadline for a late cancel of a paid order.
	time.Sleep(time.Until(last) + quiet)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = id(i)
	}
	cancelled, maxLate := servicetest.CheckSettled(t, svc, ids, paid, 3*time.Second)
	// Each timer was delivered once: the cancel batches handled exactly the
	// unpaid orders (a second delivery would be counted as skipped), and
	// none came early.
	if got := metric(t, svc, "lapse_cancel_batch_size"); got != float64(cancelled) {
		t.Errorf("the cancel batches handled %v timers, want %d (one per unpaid order)", got, cancelled)
	}
	if got := metric(t, svc, "lapse_timers_early_total"); got != 0 {
		t.Errorf("%v timers delivered before their deadline", got)
	}
	t.Logf("%d orders cancelled, %d paid; latest cancel %v after its deadline", cancelled, n-cancelled, maxLate.Round(time.Millisecond))
	storetest.AuditOK(t, st)
}

// metric returns a counter's value, or a histogram's sum of samples, from
// the service's registry.
func metric(t *testing.T, svc *lapse.Service, name string) float64 {
	t.Helper()
	families, err := svc.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		var v float64
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				v += h.GetSampleSum()
			} else {
				v += m.GetCounter().GetValue()
			}
		}
		return v
	}
	return 0 // a labelled counter that was never set has no series
}
