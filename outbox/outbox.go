// Package outbox relays the events that transitions write to the store's
// outbox table (in the same transaction as the change) to a sink, at least
// once and in order.
//
// The relay here is the single-process one of the embedded default; sinks for
// webhooks, RabbitMQ and NATS plug in behind Sink.
package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse/store"
)

// Relay moves events from the store to the sink.
type Relay struct {
	Store store.Outbox
	Sink  Sink
	// Interval is how long the relay waits when the outbox is empty. Defaults to 500 ms.
	Interval time.Duration
	// BatchSize is the most events read at once. Defaults to 500.
	BatchSize int
	Logger    *slog.Logger
	// OnPublished is called with the number of events delivered (metrics).
	OnPublished func(n int)
}

// Run relays until ctx ends, then makes one last pass (bounded to 5 s) so a
// clean shutdown leaves nothing that was committed unpublished.
func (r *Relay) Run(ctx context.Context) error {
	defer func() {
		flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for {
			if n, err := r.once(flush, max(r.BatchSize, 500)); err != nil || n == 0 {
				return
			}
		}
	}()
	interval, batch := r.Interval, r.BatchSize
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	if batch <= 0 {
		batch = 500
	}
	attempt := 0
	for {
		n, err := r.once(ctx, batch)
		wait := interval
		switch {
		case err != nil && ctx.Err() == nil:
			attempt++
			wait = backoff(attempt)
			r.Logger.Warn("outbox relay failed; retrying", "err", err, "retry_in", wait)
		case n == batch:
			attempt = 0
			continue // more waiting
		default:
			attempt = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (r *Relay) once(ctx context.Context, limit int) (int, error) {
	evs, err := r.Store.UnpublishedEvents(ctx, limit)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	for _, err := range checkResults(r.Sink, len(evs), r.Sink.Publish(ctx, evs)) {
		if err != nil {
			return 0, err
		}
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	// Published: record it even if shutdown began meanwhile, or the last pass
	// would deliver these events a second time.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.Store.MarkPublished(mctx, seqs); err != nil {
		return 0, err
	}
	if r.OnPublished != nil {
		r.OnPublished(len(evs))
	}
	return len(evs), nil
}

func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt-1, 5)
	return min(d, 30*time.Second)
}
