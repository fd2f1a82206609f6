package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"
)

// asynqSystem is hibiken/asynq: each timer a task enqueued with ProcessAt,
// in a queue of the run's own. asynq keeps scheduled tasks in a ZSet scored
// by the due time in whole seconds (truncated), and its forwarder moves those
// whose score is at most the current second every DelayedTaskCheckInterval:
// a task can run up to a second before its due time, and the report counts
// every such early fire.
type asynqSystem struct {
	cfg    asynq.Config // Queues and LogLevel are set by start
	e      *env
	queue  string
	rdb    *goredis.Client
	client *asynq.Client
	srv    *asynq.Server
}

const asynqTaskType = "lapsecmp:timer"

func (a *asynqSystem) start(ctx context.Context, e *env, rec *recorder) error {
	if e.redis == nil {
		return errNoServer
	}
	a.e = e
	opt, err := goredis.ParseURL(e.redisURL)
	if err != nil {
		return err
	}
	a.rdb = goredis.NewClient(opt)
	a.queue = "lapsecmp-" + e.run + e.tag("asynq")
	a.client = asynq.NewClientFromRedisClient(a.rdb)
	cfg := a.cfg
	cfg.Queues = map[string]int{a.queue: 1}
	cfg.LogLevel = asynq.WarnLevel
	a.srv = asynq.NewServerFromRedisClient(a.rdb, cfg)
	return a.srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		idx, err := strconv.Atoi(string(t.Payload()))
		if err != nil {
			idx = -1
		}
		rec.deliver(idx, time.Now(), time.Time{})
		return nil
	}))
}

// schedule enqueues one task per timer (asynq has no bulk enqueue).
func (a *asynqSystem) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		task := asynq.NewTask(asynqTaskType, []byte(strconv.Itoa(t.idx)))
		if _, err := a.client.EnqueueContext(ctx, task, asynq.Queue(a.queue), asynq.ProcessAt(t.due)); err != nil {
			return err
		}
	}
	return nil
}

func (a *asynqSystem) batch() int { return 1 }

func (a *asynqSystem) stop(ctx context.Context) error {
	if a.srv != nil {
		a.srv.Shutdown() // bounded by Config.ShutdownTimeout (8 s by default)
	}
	var err error
	if a.rdb != nil {
		insp := asynq.NewInspectorFromRedisClient(a.rdb)
		if e := insp.DeleteQueue(a.queue, true); e != nil && !errors.Is(e, asynq.ErrQueueNotFound) {
			err = e
		}
		// Statistics keys (processed and failed counts per day) outlive the queue.
		err = errors.Join(err, a.e.redis.deleteKeys(ctx, "asynq:{"+a.queue+"}*"))
		err = errors.Join(err, a.e.redis.rdb.SRem(ctx, "asynq:queues", a.queue).Err())
		err = errors.Join(err, a.rdb.Close())
	}
	return err
}
