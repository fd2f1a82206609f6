package bench

import (
	"context"
	"errors"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/store"
)

// retry calls fn again while it fails for a reason other than the service
// refusing the call, for up to Config.RetryFor after the first failure,
// pausing 20 ms, then 40 ms, … up to 500 ms between calls. Without RetryFor
// fn is called once.
func (r *run) retry(ctx context.Context, fn func() error) error {
	err := fn()
	if err == nil || r.cfg.RetryFor <= 0 || refused(err) {
		return err
	}
	giveUp := time.Now().Add(r.cfg.RetryFor)
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		at := time.Now().Add(pause)
		if at.After(giveUp) || !sleepUntil(ctx, at) {
			return err
		}
		r.retries.Add(1)
		if err = fn(); err == nil || refused(err) {
			return err
		}
	}
}

// refused reports whether err is the service's answer to a call — a
// refusal that the same call would meet again — rather than a failure to
// get an answer (a connection cut, a database away, a 5xx).
func refused(err error) bool {
	var api *client.Error
	if errors.As(err, &api) {
		return api.Status < 500
	}
	var invalid *lapse.InvalidError
	if errors.As(err, &invalid) || errors.Is(err, context.Canceled) {
		return true
	}
	for _, e := range []error{
		errPayMissed, errNotPaid,
		store.ErrNotFound, store.ErrInsufficientStock, store.ErrOrderExists, store.ErrIdempotencyMismatch,
		store.ErrOrderExpired, store.ErrNotPending, store.ErrAmountMismatch, store.ErrInvalidCursor,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
