package lapse_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store/storetest"
)

// sinkRecorder records the events published to it.
type sinkRecorder struct {
	mu  sync.Mutex
	evs []order.Event
}

func (r *sinkRecorder) Name() string { return "recorder" }

func (r *sinkRecorder) Publish(_ context.Context, evs []order.Event) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, evs...)
	return make([]error, len(evs))
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
	svc := newService(t, lapse.Config{Store: st, Sinks: []outbox.Sink{sink}, RemindBefore: 300 * time.Millisecond, Grace: time.Second})
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

// hangingSink never answers until its context ends: a webhook that holds the
// connection open.
type hangingSink struct{}

func (hangingSink) Name() string { return "hanging" }

func (hangingSink) Publish(ctx context.Context, evs []order.Event) []error {
	<-ctx.Done()
	return outbox.ErrorsFor(len(evs), ctx.Err())
}

// A sink that hangs costs the reminders, never the cancels: reminders used
// to run inline in the timer handler with no deadline, so one hanging
// webhook stopped every timeout cancel, and shutdown with them.
func TestHangingSinkNeverHoldsUpCancels(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Sinks: []outbox.Sink{hangingSink{}}, RemindBefore: 200 * time.Millisecond, SweepInterval: -1})
	storetest.Stock(t, st, 10, "sku")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(stop)
	create(t, svc, "a", 500*time.Millisecond)
	create(t, svc, "b", 700*time.Millisecond)
	waitFor(t, 5*time.Second, "both orders cancelled past their reminders", func() bool {
		return status(t, svc, "a") == order.Cancelled && status(t, svc, "b") == order.Cancelled
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s of shutdown: a reminder holds it")
	}
}
