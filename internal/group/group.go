// Package group gathers calls that arrive while earlier ones are being
// committed, so a store can commit them together (group commit).
//
// Grouping is natural, not timed: one group runs at a time; what arrives
// meanwhile waits in the queue, and the next group takes all of it (up to a
// maximum). Under light load every group holds one call and nothing waits
// for a timer; under load the groups grow with it.
package group

import (
	"context"
	"sync"
	"time"
)

// Timeout bounds one group's work (its transaction): well under the HTTP
// API's request timeout (20 s) and the server's write timeout (30 s), so a
// caller waiting for its group is answered in time.
const Timeout = 15 * time.Second

// Context is what a group runs on: the values of ctx (one of its callers'),
// not its cancellation — a group serves many callers, and one that gives up
// must not roll back the others' — bounded by Timeout.
func Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), Timeout)
}

// Queue runs groups of the values added to it, one group at a time, each on
// a goroutine of its own that keeps running groups until the queue is empty.
// Answering the callers is run's business (a value usually carries a
// channel its caller waits on).
type Queue[T any] struct {
	max int
	run func(group []T)

	mu      sync.Mutex
	pending []T
	running bool
}

// New returns a Queue whose groups hold at most size values (at least 1).
func New[T any](size int, run func(group []T)) *Queue[T] {
	return &Queue[T]{max: max(1, size), run: run}
}

// Add queues v for the next group, starting one if none is running.
func (q *Queue[T]) Add(v T) {
	q.mu.Lock()
	q.pending = append(q.pending, v)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
}

// drain runs groups until the queue is empty.
func (q *Queue[T]) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		n := min(len(q.pending), q.max)
		group := q.pending[:n:n]
		if n == len(q.pending) {
			q.pending = nil
		} else {
			q.pending = append([]T(nil), q.pending[n:]...)
		}
		q.mu.Unlock()
		q.run(group)
	}
}
