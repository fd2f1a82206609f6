package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Schedule implements timer.Scheduler. It replaces a pending schedule of key
// and voids a claim on it: a batch in hand that holds key is neither
// acknowledged nor requeued for it, so the new schedule wins.
//
// Concurrent calls are written together (group commit): a call made while
// another is being written waits for it, then goes with every call that came
// meanwhile, one script call per shard, all in one pipeline. A lone call is
// written at once. Schedule returns when its timer is stored, or when ctx
// ends (the timer may then be stored or not).
func (s *Scheduler) Schedule(ctx context.Context, key string, due time.Time) error {
	if key == "" {
		return errors.New("redis: empty timer key")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: schedule timer %s: %w", key, err)
	}
	r := &scheduleReq{shard: s.keys.shard(key), score: ceilMs(due), key: key, done: make(chan struct{})}
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
			return fmt.Errorf("redis: schedule timer %s: %w", key, ctx.Err())
		}
	}
	if r.err != nil {
		return fmt.Errorf("redis: schedule timer %s: %w", key, r.err)
	}
	return nil
}

// committer queues the Schedule calls made while one is written.
type committer struct {
	mu    sync.Mutex
	queue []*scheduleReq
	busy  bool // a flush is running; it takes the queue when done
}

type scheduleReq struct {
	shard int
	score int64
	key   string
	err   error         // set before done is closed
	done  chan struct{} // closed when written
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

// write stores a batch of Schedule requests: one schedule.lua call per shard
// (at most 1000 timers each), pipelined when there are several.
func (s *Scheduler) write(ctx context.Context, batch []*scheduleReq) {
	type call struct {
		shard int
		reqs  []*scheduleReq
		args  []any
		cmd   *goredis.Cmd
	}
	var calls []*call
	open := map[int]*call{}
	for _, r := range batch {
		c := open[r.shard]
		if c == nil || len(c.reqs) == 1000 {
			c = &call{shard: r.shard}
			open[r.shard] = c
			calls = append(calls, c)
		}
		c.reqs = append(c.reqs, r)
		c.args = append(c.args, r.score, r.key)
	}
	keysOf := func(c *call) []string {
		k := s.keys.shards[c.shard]
		return []string{k.due, k.lease, k.meta}
	}
	if len(calls) == 1 {
		calls[0].cmd = scheduleScript.Run(ctx, s.rdb, keysOf(calls[0]), calls[0].args...)
	} else {
		_, _ = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, c := range calls {
				c.cmd = scheduleScript.EvalSha(ctx, p, keysOf(c), c.args...)
			}
			return nil
		})
	}
	for _, c := range calls {
		err := c.cmd.Err()
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			// Not cached on that server yet: EVALSHA falls back to EVAL.
			err = scheduleScript.Run(ctx, s.rdb, keysOf(c), c.args...).Err()
		}
		earliest := c.reqs[0].score
		for _, r := range c.reqs {
			r.err = err
			earliest = min(earliest, r.score)
		}
		if err == nil {
			s.lower(c.shard, earliest, true)
		}
		for _, r := range c.reqs {
			close(r.done)
		}
	}
}
