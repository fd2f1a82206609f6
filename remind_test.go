package lapse_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

// sinkRecorder records the events published to it.
type sinkRecorder struct {
	mu  sync.Mutex
	evs []order.Event
}

func (r *sinkRecorder) Publish(_ context.Context, evs []order.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, evs...)
	return nil
}

func (r *sinkRecorder) of(typ string) map[string]order.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]order.Event{}
	for _, e := range r.evs {
		if e.Type == typ {
			out[e.OrderID] = e
		}
	}
	return out
}

func TestReminderBeforeExpiry(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	sink := &sinkRecorder{}
	svc := newService(t, lapse.Config{Store: st, Sink: sink, RemindBefore: 300 * time.Millisecond, Grace: time.Second})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	ctx := context.Background()
	unpaid := create(t, svc, "unpaid", 600*time.Millisecond)
	create(t, svc, "paid", 600*time.Millisecond)
	if _, err := svc.Pay(ctx, "paid"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "paid", PaymentID: "p", Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
		t.Fatal(err)
	}
	create(t, svc, "too-short", 200*time.Millisecond) // shorter than RemindBefore: no reminder
	waitFor(t, 5*time.Second, "the reminder", func() bool { _, ok := sink.of(lapse.EventExpiring)["unpaid"]; return ok })
	e := sink.of(lapse.EventExpiring)["unpaid"]
	if at := unpaid.ExpiresAt.Add(-300 * time.Millisecond); e.CreatedAt.Before(at) {
		t.Fatalf("reminder sent at %v, before %v", e.CreatedAt, at)
	}
	if !e.CreatedAt.Before(unpaid.ExpiresAt) {
		t.Fatalf("reminder sent at %v, after expires_at %v", e.CreatedAt, unpaid.ExpiresAt)
	}
	waitFor(t, 5*time.Second, "the cancels", func() bool { return status(t, svc, "unpaid") == order.Cancelled })
	got := sink.of(lapse.EventExpiring)
	if _, ok := got["paid"]; ok {
		t.Fatal("a paid order was reminded")
	}
	if _, ok := got["too-short"]; ok {
		t.Fatal("an order shorter than RemindBefore was reminded")
	}
	if n := metric(t, svc, "lapse_reminders_sent_total"); n != 1 {
		t.Fatalf("lapse_reminders_sent_total = %v", n)
	}
	storetest.AuditOK(t, st)
}
