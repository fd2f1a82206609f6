package amqp_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// Deadlines moved on RabbitMQ timers, which cannot take a timer back: an
// extended order's first timer still fires at the old deadline, is skipped
// by the store's guard and set again, and the order is cancelled at its new
// deadline, not before; a shortened order gets a new, earlier timer and is
// cancelled at its new deadline, an hour before its first timer. The
// fallback sweep is off.
func TestServiceExtendOnRabbitMQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := servicetest.SQLite(t)
	storetest.Stock(t, st, 10, "sku")
	logger := slog.New(slog.DiscardHandler)
	timers := mustOpen(t, amqptimer.Config{Prefix: newPrefix(t, amqptimer.DefaultLevels), Logger: logger, LossCheck: lossCheck})
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: timers, SweepInterval: -1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)
	waitStats(t, timers, "the first seed", 5*time.Second, func(st amqptimer.Stats) bool { return st.Seeds == 1 })

	create := func(id string, timeout time.Duration) {
		t.Helper()
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100, Timeout: timeout}); err != nil {
			t.Fatal(err)
		}
	}
	create("later", 300*time.Millisecond)
	create("sooner", time.Hour)
	later, err := svc.Extend(ctx, "later", time.Now().Add(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sooner, err := svc.Extend(ctx, "sooner", time.Now().Add(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []order.Order{sooner, later} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := svc.Get(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status == order.Cancelled {
				if got.CancelledAt.Before(want.CancelAfter) {
					t.Fatalf("%s cancelled at %v, before its new cancel_after %v", want.ID, got.CancelledAt, want.CancelAfter)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (cancel_after %v) not cancelled within 10 s", want.ID, want.CancelAfter)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	storetest.AuditOK(t, st)
}
