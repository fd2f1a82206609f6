package lapse_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// behind is a store clock that runs d behind lapse's (a database server
// whose clock is off, seen from the instance).
type behind time.Duration

func (b behind) Now() time.Time {
	return time.Now().Add(-time.Duration(b)).UTC().Truncate(time.Millisecond)
}

// skewedService runs lapse on a store whose clock is skew behind lapse's.
func skewedService(t *testing.T, skew time.Duration, cfg lapse.Config) (*lapse.Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "l.db"), Clock: behind(skew), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	svc := newService(t, cfg)
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	return svc, st
}

// A timer that fires early (the store's clock behind lapse's) is set again
// for when the store's clock reaches cancel_after, measured on lapse's clock:
// not for cancel_after itself, which lapse's clock has already passed. That
// rescheduled the order at once, again and again: with a store 3 s behind,
// one order cost about 21,500 cancel transactions before it was due.
func TestEarlyTimerWaitsForTheStoreClockWithoutSpinning(t *testing.T) {
	t.Parallel()
	svc, st := skewedService(t, 2*time.Second, lapse.Config{SweepInterval: -1})
	o := create(t, svc, "skewed", 200*time.Millisecond)
	waitFor(t, 10*time.Second, "the cancel", func() bool { return status(t, svc, o.ID) == order.Cancelled })
	if early := metric(t, svc, "lapse_timers_early_total"); early > 3 {
		t.Errorf("lapse_timers_early_total = %v for one order: the early timer was rescheduled in a loop", early)
	}
	if skew := metric(t, svc, "lapse_store_clock_skew_seconds"); skew < 1.5 || skew > 2.5 {
		t.Errorf("lapse_store_clock_skew_seconds = %v, want about 2 (the store 2 s behind)", skew)
	}
	got, err := svc.Get(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CancelledAt.Before(got.CancelAfter) {
		t.Errorf("cancelled at %v, before cancel_after %v by the store's clock", got.CancelledAt, got.CancelAfter)
	}
	storetest.AuditOK(t, st)
}

// A PAYING order whose timer fires early goes to the gateway check only once
// the store's clock says cancel_after has passed: the check closes the trade,
// and closing it inside the buyer's window took money's way out.
func TestEarlyTimerNeverClosesATradeInTheBuyersWindow(t *testing.T) {
	t.Parallel()
	gw := newScripted()
	clk := behind(2 * time.Second)
	var closedAt atomic.Pointer[time.Time]
	gw.closeFn = func(string) error {
		at := clk.Now()
		closedAt.Store(&at)
		return nil
	}
	svc, st := skewedService(t, time.Duration(clk), lapse.Config{Gateway: gw, SweepInterval: -1})
	o := create(t, svc, "paying", 300*time.Millisecond)
	if _, err := svc.Pay(context.Background(), o.ID); err != nil {
		t.Fatal(err)
	}
	gw.set(o.ID, payment.Status{State: payment.StateNotPaid})
	waitFor(t, 10*time.Second, "the cancel", func() bool { return status(t, svc, o.ID) == order.Cancelled })
	if _, closes := gw.count(o.ID); closes != 1 {
		t.Fatalf("%d closes, want 1", closes)
	}
	if at := *closedAt.Load(); at.Before(o.CancelAfter) {
		t.Errorf("trade closed at %v by the store's clock, %v before cancel_after %v (expires_at %v)",
			at, o.CancelAfter.Sub(at), o.CancelAfter, o.ExpiresAt)
	}
	storetest.AuditOK(t, st)
}
