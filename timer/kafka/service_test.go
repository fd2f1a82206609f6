package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// The service on Kafka timers, end to end: orders with deadlines spread
// over two seconds, one in five paid before its deadline. Every unpaid
// order is cancelled once, never before its deadline; no paid order is
// cancelled (its timer still arrives: the store's guard skips it). The
// topics are new, so the loss check seeds them from the store once. The
// fallback sweep is off, so the timers are what cancels.
func TestServiceCancelsOrdersOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := servicetest.SQLite(t)
	const n = 40
	storetest.Stock(t, st, n, "sku")
	cfg := testConfig(newCluster(t))
	cfg.Logger = slog.New(slog.DiscardHandler)
	timers := mustNew(t, cfg)
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: timers, SweepInterval: -1, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)

	paid := func(i int) bool { return i%5 == 0 }
	id := func(i int) string { return fmt.Sprintf("o-%03d", i) }
	base := time.Now().Add(4 * time.Second) // room for a loaded machine to create and pay before the first deadline
	for i := range n {
		deadline := base.Add(time.Duration(i) * 2 * time.Second / n)
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
			ID: id(i), Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100,
			Timeout: max(time.Until(deadline), time.Millisecond),
		}); err != nil {
			t.Fatalf("create %s: %v", id(i), err)
		}
		if !paid(i) {
			continue
		}
		if _, err := svc.Pay(ctx, id(i)); err != nil {
			t.Fatalf("pay %s: %v", id(i), err)
		}
		if _, err := svc.Notify(ctx, lapse.Notification{
			OrderID: id(i), PaymentID: id(i) + "-1", Status: lapse.PaymentSucceeded, AmountCents: 100, CallbackID: "cb-" + id(i),
		}); err != nil {
			t.Fatalf("notify %s: %v", id(i), err)
		}
	}

	last := base.Add(2 * time.Second)
	deadline := time.Now().Add(time.Until(last) + 15*time.Second)
	for {
		rep, err := svc.List(ctx, store.ListOrdersParams{Status: order.Pending, Limit: 1})
		if err == nil && len(rep.Orders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders still pending 15s after the last deadline (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Until(last) + 300*time.Millisecond) // past the last paid order's timer
	ids := make([]string, n)
	for i := range ids {
		ids[i] = id(i)
	}
	_, maxLate := servicetest.CheckSettled(t, svc, ids, paid, 3*time.Second)
	if maxLate > 3*time.Second {
		t.Errorf("an order was cancelled %v after its deadline", maxLate)
	}
	var losses uint64
	for _, c := range timers.Counters() {
		if c.Name == "lapse_kafka_timers_losses_total" {
			losses = c.Value
		}
	}
	if losses != 1 {
		t.Errorf("lapse_kafka_timers_losses_total %d, want 1 (new topics: seeded once)", losses)
	}
	t.Logf("latest cancel %v after its deadline", maxLate.Round(time.Millisecond))
	storetest.AuditOK(t, st)
}
