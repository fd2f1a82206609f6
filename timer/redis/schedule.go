package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lapsehq/lapse/timer"
)

// Schedule implements timer.Scheduler. It replaces a pending schedule of key
// and voids a claim on it: a batch in hand that holds key is neither
// acknowledged nor requeued for it, so the new schedule wins.
//
// Concurrent calls (of Schedule and ScheduleMany) are written together
// (group commit): a call made while another is being written waits for it,
// then goes with every call that came meanwhile, one script call per shard
// for all their timers, all in one pipeline. A lone call is written at once.
// Schedule returns when its timer is stored, or when ctx ends (the timer may
// then be stored or not).
func (s *Scheduler) Schedule(ctx context.Context, key string, due time.Time) error {
	if key == "" {
		return errors.New("redis: empty timer key")
	}
	if err := s.enqueue(ctx, []timer.Timer{{Key: key, Due: due}}); err != nil {
		return fmt.Errorf("redis: schedule timer %s: %w", key, err)
	}
	return nil
}

// ScheduleMany implements timer.BatchScheduler: Schedule for many timers at
// once — the timers of a group of orders created together, a page of a seed
// — written with the calls in flight: one script call per shard (and 1000
// timers), all in one pipeline. Each timer's Key and Due are used (Attempt is
// ignored). An empty Key is an error and schedules nothing; an error from
// Redis may leave some timers scheduled.
func (s *Scheduler) ScheduleMany(ctx context.Context, timers []timer.Timer) error {
	if len(timers) == 0 {
		return nil
	}
	for _, t := range timers {
		if t.Key == "" {
			return errors.New("redis: empty timer key")
		}
	}
	if err := s.enqueue(ctx, timers); err != nil {
		return fmt.Errorf("redis: schedule %d timers: %w", len(timers), err)
	}
	return nil
}

// enqueue queues the timers as one request, writes the queue if no write is
// running, and waits until the request is written or ctx ends.
func (s *Scheduler) enqueue(ctx context.Context, timers []timer.Timer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &scheduleReq{items: make([]scheduleItem, len(timers)), done: make(chan struct{})}
	for i, t := range timers {
		r.items[i] = scheduleItem{shard: s.keys.shard(t.Key), score: ceilMs(t.Due), key: t.Key}
	}
	c := &s.commit
	c.mu.Lock()
	c.queue = append(c.queue, r)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if lead {
		s.flushOnce(ctx)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		select {
		case <-r.done:
		default:
			return ctx.Err()
		}
	}
	return r.err
}

// committer queues the schedule requests made while one write runs.
type committer struct {
	mu    sync.Mutex
	queue []*scheduleReq
	busy  bool // a flush is running; it takes the queue when done
}

// scheduleReq is one call of Schedule or ScheduleMany.
type scheduleReq struct {
	items []scheduleItem
	err   error         // the first error of a script call holding its timers; set before done is closed
	done  chan struct{} // closed when written
}

type scheduleItem struct {
	shard int
	score int64
	key   string
}

// flushOnce writes the queue (which holds the caller's request) and, if
// calls queued meanwhile, leaves them to a goroutine, so that a caller waits
// for one flush at most after its own was queued.
func (s *Scheduler) flushOnce(ctx context.Context) {
	if s.flush(context.WithoutCancel(ctx)) {
		go func() {
			for s.flush(context.WithoutCancel(ctx)) {
			}
		}()
	}
}

// flush writes the queued requests and reports whether more are queued;
// when none are, it clears busy.
func (s *Scheduler) flush(ctx context.Context) (more bool) {
	c := &s.commit
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	if len(batch) > 0 {
		s.write(ctx, batch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.busy = false
		return false
	}
	return true
}

// maxScheduleCall is the most timers of one schedule.lua call: it unpacks
// two arguments per timer, and Lua allows 8000.
const maxScheduleCall = 1000

// write stores a batch of requests: one schedule.lua call per shard (at most
// maxScheduleCall timers each) for the timers of every request, pipelined
// when there are several, then closes each request's done.
func (s *Scheduler) write(ctx context.Context, batch []*scheduleReq) {
	type call struct {
		shard    int
		args     []any // score, key, score, key, …
		reqs     []*scheduleReq
		earliest int64
	}
	var calls []*call
	open := make([]*call, len(s.keys.shards))
	for _, r := range batch {
		for _, it := range r.items {
			c := open[it.shard]
			if c == nil || len(c.args) == 2*maxScheduleCall {
				c = &call{shard: it.shard, earliest: it.score}
				open[it.shard] = c
				calls = append(calls, c)
			}
			if n := len(c.reqs); n == 0 || c.reqs[n-1] != r {
				c.reqs = append(c.reqs, r)
			}
			c.args = append(c.args, it.score, it.key)
			c.earliest = min(c.earliest, it.score)
		}
	}
	sc := make([]*scriptCall, len(calls))
	for i, c := range calls {
		k := s.keys.shards[c.shard]
		sc[i] = &scriptCall{script: scheduleScript, keys: []string{k.due, k.meta}, args: c.args}
	}
	s.evalAll(ctx, sc)
	for i, c := range calls {
		if err := sc[i].cmd.Err(); err != nil {
			for _, r := range c.reqs {
				if r.err == nil {
					r.err = err
				}
			}
			continue
		}
		s.lower(c.shard, c.earliest, true)
	}
	for _, r := range batch {
		close(r.done)
	}
}
