package drain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWakeCoalescesNotificationsAndNeverBlocks(t *testing.T) {
	t.Parallel()
	var w Wake
	w.Notify()
	w.Notify() // a second one while the first is pending must not block
	select {
	case <-w.C():
	default:
		t.Fatal("a notified Wake did not deliver")
	}
	select {
	case <-w.C():
		t.Fatal("two notifications made two wake-ups")
	default:
	}
}

func TestFailedIsDeadAtOnceWhenFinalAndOtherwiseRetries(t *testing.T) {
	t.Parallel()
	r := Retry{MaxAttempts: 3, MaxAge: time.Hour, Base: time.Second, Max: time.Minute}
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	long := errors.New(strings.Repeat("x", 2*ErrorLen))

	f := r.Failed(long, true, 0, since, since.Add(time.Minute))
	if !f.Dead || f.RetryIn != 0 || len(f.Error) != ErrorLen {
		t.Fatalf("final failure: dead=%v retry in %v, error %d bytes; want DEAD at once, the error cut to %d", f.Dead, f.RetryIn, len(f.Error), ErrorLen)
	}
	f = r.Failed(long, false, 0, since, since.Add(time.Minute))
	if f.Dead || f.RetryIn < 800*time.Millisecond || f.RetryIn > 1200*time.Millisecond {
		t.Fatalf("first failure: dead=%v retry in %v, want a retry after about 1 s", f.Dead, f.RetryIn)
	}
	if f = r.Failed(long, false, 2, since, since.Add(time.Minute)); !f.Dead {
		t.Fatal("the third failure of MaxAttempts 3 is not DEAD")
	}
	if f = r.Failed(long, false, 0, since, since.Add(time.Hour)); !f.Dead {
		t.Fatal("a failure MaxAge after since is not DEAD")
	}
}

func TestSettleOutlivesTheCallersContextAndWrapsItsError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := Settle(ctx, func(ctx context.Context) (int, error) { return 7, ctx.Err() })
	if err != nil || got != 7 {
		t.Fatalf("Settle after shutdown = %d, %v; want 7, nil (its context outlives the caller's)", got, err)
	}
	boom := errors.New("boom")
	if _, err := Settle(ctx, func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "settle: ") {
		t.Fatalf("Settle error = %v, want boom wrapped as settle: …", err)
	}
}
