// Package servicetest runs a lapse.Service for a test: the steps every
// end-to-end test of a backend, a sink or a gateway repeats (run it in the
// background, stop it when the test ends, fail the test if it did not stop
// cleanly), written once.
package servicetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/sqlite"
)

// stopWait bounds how long Run waits for the service to stop.
const stopWait = 10 * time.Second

// Run runs svc.Run in the background until t ends, then stops it and fails
// t if it returns an error or does not return within 10 s.
func Run(t testing.TB, svc *lapse.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Service.Run returned %v on shutdown, want nil", err)
			}
		case <-time.After(stopWait):
			t.Errorf("Service.Run still running %v after it was stopped", stopWait)
		}
	})
}

// CheckSettled checks each order of ids through svc: the paid ones (paid
// reports which) PAID, every other one CANCELLED, not before its
// cancel_after and at most within late after it (counted from its creation
// when it was created past its deadline). It returns how many were
// cancelled and the latest of those cancels.
func CheckSettled(t testing.TB, svc *lapse.Service, ids []string, paid func(i int) bool, within time.Duration) (cancelled int, maxLate time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i, id := range ids {
		o, err := svc.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if paid(i) {
			if o.Status != order.Paid {
				t.Errorf("%s: paid, now %s", o.ID, o.Status)
			}
			continue
		}
		if o.Status != order.Cancelled {
			t.Errorf("%s: %s, want CANCELLED", o.ID, o.Status)
			continue
		}
		cancelled++
		if o.CancelledAt.Before(o.CancelAfter) {
			t.Errorf("%s: cancelled %v before cancel_after", o.ID, o.CancelAfter.Sub(o.CancelledAt))
		}
		late := o.CancelledAt.Sub(o.CancelAfter)
		if o.CreatedAt.After(o.CancelAfter) {
			late = o.CancelledAt.Sub(o.CreatedAt)
		}
		if late > within {
			t.Errorf("%s: cancelled %v after cancel_after, want within %v", o.ID, late, within)
		}
		maxLate = max(maxLate, late)
	}
	return cancelled, maxLate
}

// SQLite opens a migrated SQLite store of t's own (a file in t.TempDir(),
// synchronous NORMAL: fast, and the tests need no durability), closed when
// t ends.
func SQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}
