// Package memory is the embedded timer backend: a min-heap in the process,
// woken exactly at the next due time.
//
// It keeps nothing across a restart (it is not timer.Durable): lapse seeds it
// from the store's pending orders at start, so a crash loses no timer, only
// delays the ones due while the process was down until it is back.
package memory

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lapsehq/lapse/timer"
)

// Config configures the scheduler.
type Config struct {
	// BatchSize is the most timers handed to the handler at once. Defaults to 200.
	BatchSize int
	// Backoff is the delay before a failed batch is redelivered. Defaults to timer.Backoff.
	Backoff func(attempt int) time.Duration
	// Gather is how long the loop waits past the next due time before it
	// claims, so timers due a moment apart go to the handler as one batch
	// (one cancel transaction) instead of one each. It adds at most Gather
	// to the lateness. Defaults to 0 (claim exactly at the due time); lapse
	// uses DefaultGather.
	Gather time.Duration
}

// DefaultGather is the Gather lapse runs with: at 1,000 orders due per second
// it turns a thousand one-order cancel transactions into about a hundred,
// leaving the writer to the creates (see docs/measured.md).
const DefaultGather = 10 * time.Millisecond

// Scheduler is the in-process timer.Scheduler.
type Scheduler struct {
	cfg   Config
	mu    sync.Mutex
	h     entries
	byKey map[string]*entry
	wake  chan struct{} // buffered(1): a schedule earlier than the loop's plan
	plan  time.Time     // when the Run loop next wakes; zero when it sleeps without a timer
	run   sync.Mutex    // one Run at a time
}

var _ timer.Scheduler = (*Scheduler)(nil)

// New returns an empty scheduler.
func New(cfg Config) *Scheduler {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 200
	}
	if cfg.Backoff == nil {
		cfg.Backoff = timer.Backoff
	}
	return &Scheduler{cfg: cfg, byKey: map[string]*entry{}, wake: make(chan struct{}, 1)}
}

// Durable reports false: timers live only in this process.
func (s *Scheduler) Durable() bool { return false }

// Len is the number of timers waiting (not counting a batch in the handler).
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// Schedule implements timer.Scheduler.
func (s *Scheduler) Schedule(_ context.Context, key string, due time.Time) error {
	if key == "" {
		return errors.New("memory: empty timer key")
	}
	s.mu.Lock()
	s.put(key, due, 0)
	nudge := s.plan.IsZero() || due.Before(s.plan)
	s.mu.Unlock()
	if nudge {
		s.nudge()
	}
	return nil
}

// put upserts under s.mu.
func (s *Scheduler) put(key string, due time.Time, attempt int) {
	if e, ok := s.byKey[key]; ok {
		e.due, e.attempt, e.firstDue = due, attempt, time.Time{}
		heap.Fix(&s.h, e.index)
		return
	}
	e := &entry{key: key, due: due, attempt: attempt}
	s.byKey[key] = e
	heap.Push(&s.h, e)
}

func (s *Scheduler) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Unschedule implements timer.Scheduler.
func (s *Scheduler) Unschedule(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		heap.Remove(&s.h, e.index)
		delete(s.byKey, key)
	}
	return nil
}

// Run implements timer.Scheduler.
func (s *Scheduler) Run(ctx context.Context, h timer.Handler) error {
	if !s.run.TryLock() {
		return errors.New("memory: Run is already running")
	}
	defer s.run.Unlock()
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, next := s.claim(time.Now())
		if len(batch) > 0 {
			if err := h(context.WithoutCancel(ctx), batch); err != nil {
				s.requeue(batch)
			}
			continue
		}
		var timerC <-chan time.Time
		if !next.IsZero() {
			sleep.Reset(time.Until(next) + s.cfg.Gather)
			timerC = sleep.C
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timerC:
		}
		sleep.Stop()
	}
}

// claim pops up to BatchSize timers due at now, or returns when the next is due.
func (s *Scheduler) claim(now time.Time) ([]timer.Timer, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []timer.Timer
	for len(s.h) > 0 && len(batch) < s.cfg.BatchSize && !s.h[0].due.After(now) {
		e := heap.Pop(&s.h).(*entry)
		delete(s.byKey, e.key)
		due := e.due
		if !e.firstDue.IsZero() {
			due = e.firstDue
		}
		batch = append(batch, timer.Timer{Key: e.key, Due: due, Attempt: e.attempt + 1})
	}
	s.plan = time.Time{}
	if len(batch) == 0 && len(s.h) > 0 {
		s.plan = s.h[0].due
	}
	return batch, s.plan
}

// requeue puts a failed batch back after its backoff, unless a key was
// scheduled again meanwhile (the newer schedule wins).
func (s *Scheduler) requeue(batch []timer.Timer) {
	now := time.Now()
	s.mu.Lock()
	for _, t := range batch {
		if _, again := s.byKey[t.Key]; again {
			continue
		}
		s.put(t.Key, now.Add(s.cfg.Backoff(t.Attempt)), t.Attempt)
		s.byKey[t.Key].firstDue = t.Due
	}
	s.mu.Unlock()
}

type entry struct {
	key      string
	due      time.Time // when to deliver
	firstDue time.Time // the original due time of a redelivery (zero otherwise)
	attempt  int       // deliveries so far
	index    int
}

// entries is a min-heap by due time (container/heap).
type entries []*entry

func (h entries) Len() int           { return len(h) }
func (h entries) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entries) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entries) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entries) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
