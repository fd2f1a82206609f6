package lapse_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

// An extended order is cancelled at its new deadline, not its old one; a
// shortened one at its new, earlier deadline — with the in-memory timers
// and with the sql poller, each of which only the rescheduling can wake in
// time (the poller sleeps up to an hour, the first timer is an hour away).
func TestExtendReschedulesTheTimer(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]lapse.Config{
		"memory": {},
		"sql":    {PollStore: true, PollMaxSleep: time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
			t.Cleanup(func() { st.Close() })
			cfg.Store, cfg.SweepInterval, cfg.Grace = st, -1, 50*time.Millisecond
			svc := newService(t, cfg)
			storetest.Stock(t, st, 10, "sku")
			start(t, svc)
			ctx := context.Background()

			// The first deadline leaves room for the extend on a loaded
			// machine: an order already past it may not be extended.
			later := create(t, svc, "later", time.Second)
			sooner := create(t, svc, "sooner", time.Hour)
			moved, err := svc.Extend(ctx, "later", time.Now().Add(1500*time.Millisecond))
			if err != nil {
				t.Fatalf("extend: %v", err)
			}
			if !moved.ExpiresAt.After(later.ExpiresAt) || moved.CancelAfter.Sub(moved.ExpiresAt) != 50*time.Millisecond {
				t.Fatalf("extended %+v; want expires_at after %v and the 50 ms grace kept", moved, later.ExpiresAt)
			}
			time.Sleep(20 * time.Millisecond) // let the poller plan its hour-long sleep
			shortened, err := svc.Extend(ctx, "sooner", time.Now().Add(150*time.Millisecond))
			if err != nil {
				t.Fatalf("shorten: %v", err)
			}
			if !shortened.CancelAfter.Before(sooner.CancelAfter) {
				t.Fatalf("shortened %+v; want cancel_after before %v", shortened, sooner.CancelAfter)
			}
			for _, want := range []order.Order{shortened, moved} {
				waitFor(t, 10*time.Second, want.ID+" cancelled", func() bool { return status(t, svc, want.ID) == order.Cancelled })
				got, err := svc.Get(ctx, want.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.CancelledAt.Before(want.CancelAfter) || !got.CancelAfter.Equal(want.CancelAfter) {
					t.Fatalf("%s cancelled at %v with cancel_after %v; want at or after the new cancel_after %v",
						want.ID, got.CancelledAt, got.CancelAfter, want.CancelAfter)
				}
			}
			storetest.AuditOK(t, st)
		})
	}
}

func TestExtendRefusals(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, SweepInterval: -1, MaxTimeout: time.Hour, Grace: time.Minute})
	storetest.Stock(t, st, 10, "sku")
	ctx := context.Background()
	create(t, svc, "p", time.Minute)
	for name, at := range map[string]time.Time{
		"zero":            {},
		"in the past":     time.Now().Add(-time.Second),
		"over the max":    time.Now().Add(time.Hour + time.Minute),
		"far in the past": time.Unix(0, 0),
	} {
		_, err := svc.Extend(ctx, "p", at)
		var inv *lapse.InvalidError
		if !errors.As(err, &inv) || inv.Field != "expires_at" || inv.Code != "invalid_field" {
			t.Errorf("%s: err = %v, want invalid expires_at", name, err)
		}
	}
	if _, err := svc.Extend(ctx, "nope", time.Now().Add(time.Minute)); !errors.Is(err, lapse.ErrNotFound) {
		t.Errorf("unknown order: err = %v, want ErrNotFound", err)
	}
	create(t, svc, "c", time.Minute)
	if _, err := svc.Cancel(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Extend(ctx, "c", time.Now().Add(time.Minute)); !errors.Is(err, lapse.ErrNotPending) {
		t.Errorf("cancelled order: err = %v, want ErrNotPending", err)
	}
	gone := create(t, svc, "gone", time.Millisecond) // its window closes at once; the grace holds off the cancel
	waitFor(t, time.Second, "the window of gone to close", func() bool { return time.Now().After(gone.ExpiresAt) })
	if _, err := svc.Extend(ctx, "gone", time.Now().Add(time.Minute)); !errors.Is(err, lapse.ErrOrderExpired) {
		t.Errorf("expired order: err = %v, want ErrOrderExpired", err)
	}
	if o, err := svc.Extend(ctx, "p", time.Now().Add(time.Hour-time.Second)); err != nil || o.Status != order.Pending {
		t.Errorf("extend within the max: %+v, %v", o, err)
	}
}
