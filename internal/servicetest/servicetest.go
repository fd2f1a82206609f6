// Package servicetest runs a lapse.Service for a test: the steps every
// end-to-end test of a backend, a sink or a gateway repeats (run it in the
// background, stop it when the test ends, fail the test if it did not stop
// cleanly), written once.
package servicetest

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
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
