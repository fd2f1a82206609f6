// Package timer is lapse's scheduling layer: one small interface with several
// backends (memory, sql, redis, amqp), all passing the conformance suite in
// timer/timertest.
//
// Timers only trigger; the store decides (docs/architecture.md §1). A timer delivered
// twice, late, or for an order already paid is harmless, because the cancel is
// a conditional update guarded by the database. What a backend must never do
// is deliver a timer before its due time, or lose one.
package timer

import (
	"context"
	"time"
)

// Timer is one due key.
type Timer struct {
	Key string    // the order id
	Due time.Time // when it was scheduled to fire (the original time, also on a redelivery)
	// Attempt counts deliveries of this timer, from 1; above 1 the batch it
	// was in failed before.
	Attempt int
}

// Handler processes a batch of due timers. Returning nil acknowledges the
// whole batch; an error makes the scheduler redeliver it after a backoff. A
// handler that wants one timer back later calls Schedule for it and returns nil.
type Handler func(ctx context.Context, due []Timer) error

// Scheduler keeps timers and delivers them when due.
type Scheduler interface {
	// Schedule sets key to fire at due, replacing any earlier schedule of the
	// same key (an idempotent upsert).
	Schedule(ctx context.Context, key string, due time.Time) error
	// Unschedule removes key if it has not fired yet. Best effort: a timer
	// already claimed may still be delivered.
	Unschedule(ctx context.Context, key string) error
	// Run delivers due timers to h in batches until ctx ends, then returns
	// ctx's error. A batch in hand when ctx ends is finished: h is called with
	// a context that is not cancelled with ctx, so it should bound its own time.
	Run(ctx context.Context, h Handler) error
}

// Durable is implemented by schedulers that keep their timers across a
// restart of the process. A scheduler that is not durable is seeded from the
// store's pending orders when lapse starts.
type Durable interface {
	Durable() bool
}

// Counted is implemented by schedulers that count events of their own — work
// the service cannot see from outside, such as timers sent again or data
// losses detected in the broker. lapse exports each counter as a Prometheus
// counter with its Name, so that an operator sees on the dashboard what the
// backend did, not only what the store did.
type Counted interface {
	// Counters returns the counters' current values, always the same names
	// in the same order.
	Counters() []Counter
}

// Counter is one counter of a Counted scheduler.
type Counter struct {
	// Name is the Prometheus metric name, ending in _total.
	Name string
	// Help is its description.
	Help  string
	Value uint64
}

// Backoff is the delay before a failed batch is redelivered: 100 ms doubling
// per attempt, capped at 30 s.
func Backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// Seeder is implemented by schedulers that keep their timers outside the
// process and can lose them (Redis after a FLUSHALL, or a restart without
// persistence). lapse hands such a scheduler a seed function that schedules
// every pending order again from the store; the scheduler calls it when it
// starts on an empty index and whenever it detects that its data was lost,
// without blocking Schedule meanwhile.
type Seeder interface {
	SetSeed(seed func(ctx context.Context) error)
}

// BatchScheduler is implemented by schedulers that set many timers in one
// round trip; lapse uses it when seeding a scheduler from the store.
type BatchScheduler interface {
	ScheduleMany(ctx context.Context, timers []Timer) error
}

// Watch runs check at once, then every interval and whenever wake fires
// (a nil wake never does), until ctx ends. After a failure the next check
// waits at least Backoff of the failures in a row, and failed hears of it
// (the error, how many in a row, the wait). The data-loss checks of the
// backends that keep timers outside the process (Redis, NATS, RabbitMQ) run
// on it.
func Watch(ctx context.Context, interval time.Duration, wake <-chan struct{}, check func(context.Context) error, failed func(err error, failures int, retryIn time.Duration)) {
	t := time.NewTimer(0)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		next := interval
		if err := check(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			next = max(next, Backoff(failures))
			failed(err, failures, next)
		} else {
			failures = 0
		}
		t.Reset(next)
	}
}
