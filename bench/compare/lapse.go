package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/memory"
	lredis "github.com/lapsehq/lapse/timer/redis"
)

// runner runs functions until halted, in the background.
type runner struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// goRun runs f in a goroutine with a context that halt cancels.
func (r *runner) goRun(f func(ctx context.Context)) {
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancel(context.Background())
	}
	r.wg.Go(func() { f(r.ctx) })
}

// halt cancels every function started and waits for them, at most until ctx ends.
func (r *runner) halt(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("consumer did not stop: %w", ctx.Err())
	}
}

// recordBatch is the timer.Handler of the lapse schedulers under test: it
// notes the delivery of every timer of the batch at the moment the batch
// arrives, and acknowledges it.
func recordBatch(rec *recorder) timer.Handler {
	return func(_ context.Context, due []timer.Timer) error {
		now := time.Now()
		for _, t := range due {
			rec.deliver(keyIndex(t.Key), now, time.Time{})
		}
		return nil
	}
}

// lapseMemory is timer/memory: the in-process heap.
type lapseMemory struct {
	s *memory.Scheduler
	r runner
}

func (l *lapseMemory) start(_ context.Context, _ *env, rec *recorder) error {
	l.s = memory.New(memory.Config{})
	l.r.goRun(func(ctx context.Context) { _ = l.s.Run(ctx, recordBatch(rec)) })
	return nil
}

func (l *lapseMemory) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		if err := l.s.Schedule(ctx, t.key, t.due); err != nil {
			return err
		}
	}
	return nil
}

func (l *lapseMemory) batch() int                     { return 1 }
func (l *lapseMemory) stop(ctx context.Context) error { return l.r.halt(ctx) }

// lapseRedis is timer/redis: sharded ZSets claimed by a Lua script.
type lapseRedis struct {
	cfg    lredis.Config // Prefix and Logger are set by start
	e      *env
	prefix string
	s      *lredis.Scheduler
	r      runner
}

func (l *lapseRedis) start(ctx context.Context, e *env, rec *recorder) error {
	l.e = e
	rdb, err := lredis.ParseURL(e.redisURL)
	if err != nil {
		return err
	}
	l.prefix = "lapsecmp-" + e.run + e.tag("redis")
	if err := e.redis.deleteKeys(ctx, l.prefix+":*"); err != nil {
		rdb.Close()
		return err
	}
	cfg := l.cfg
	cfg.Prefix, cfg.Logger = l.prefix, e.log
	s, err := lredis.New(rdb, cfg)
	if err != nil {
		rdb.Close()
		return err
	}
	l.s = s
	l.r.goRun(func(ctx context.Context) {
		_ = s.Run(ctx, recordBatch(rec))
		rdb.Close()
	})
	return nil
}

// schedule uses ScheduleMany, one call per create group: lapse commits
// concurrent creates together (PostgreSQL's group commit, up to
// postgres.DefaultCreateGroup orders), and the timers of a group reach Redis
// together. The scheduler writes concurrent calls in one pipeline, one script
// call per shard.
func (l *lapseRedis) schedule(ctx context.Context, ts []item) error {
	timers := make([]timer.Timer, len(ts))
	for i, t := range ts {
		timers[i] = timer.Timer{Key: t.key, Due: t.due}
	}
	return l.s.ScheduleMany(ctx, timers)
}

func (l *lapseRedis) batch() int { return postgres.DefaultCreateGroup }

func (l *lapseRedis) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.prefix != "" {
		err = errors.Join(err, l.e.redis.deleteKeys(ctx, l.prefix+":*"))
	}
	return err
}

// lapseSQL is lapse's sql timers (--timers sql, lapse.Config.PollStore): no
// scheduler; each timer is an order in PostgreSQL whose cancel_after is the
// due time, and the service claims due orders with FOR UPDATE SKIP LOCKED and
// cancels them in the same transaction. A timer is "delivered" when the
// cancel transaction that took it has committed: this measures more work
// (stock release, ledger, outbox) than a handler that only notes the time.
type lapseSQL struct {
	instances int           // services sharing the store, each running its poller
	maxSleep  time.Duration // lapse.Config.PollMaxSleep (0: default)
	e         *env
	schema    string
	st        *postgres.Store
	svcs      []*lapse.Service
	r         runner
}

// skus is how many SKUs the orders spread over, so that creating orders in
// parallel does not queue on one stock row.
const skus = 1000

func (l *lapseSQL) start(ctx context.Context, e *env, rec *recorder) error {
	if e.pg == nil {
		return errNoServer
	}
	l.e = e
	l.schema = "lapsecmp_" + e.run + e.tag("sql")
	u, err := e.pg.createSchema(ctx, l.schema, e.appName())
	if err != nil {
		return err
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: u})
	if err != nil {
		return err
	}
	l.st = st
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	for i := range skus {
		if _, err := st.SetStock(ctx, skuName(i), int64(e.w.n)); err != nil {
			return err
		}
	}
	wrapped := recordingStore{Store: st, rec: rec}
	for range max(l.instances, 1) {
		svc, err := lapse.New(lapse.Config{
			Store:         wrapped,
			PollStore:     true,
			PollMaxSleep:  l.maxSleep,
			SweepInterval: -1, // the poller is the timer backend here; no fallback sweep
			Logger:        e.log,
		})
		if err != nil {
			return err
		}
		l.svcs = append(l.svcs, svc)
		l.r.goRun(func(ctx context.Context) { _ = svc.Run(ctx) })
	}
	return nil
}

func skuName(i int) string { return fmt.Sprintf("sku-%04d", i%skus) }

// schedule creates one order per timer, its payment window ending at the
// timer's due time (the store computes cancel_after from its own clock).
func (l *lapseSQL) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		svc := l.svcs[t.idx%len(l.svcs)]
		_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
			ID:          t.key,
			Items:       []order.Item{{SKU: skuName(t.idx), Qty: 1}},
			AmountCents: 1000,
			Timeout:     max(time.Until(t.due), time.Millisecond),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *lapseSQL) batch() int { return 1 }

func (l *lapseSQL) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.st != nil {
		err = errors.Join(err, l.st.Close())
	}
	if l.schema != "" {
		err = errors.Join(err, l.e.pg.dropSchema(ctx, l.schema))
	}
	return err
}

// recordingStore notes, for every order a cancel transaction cancelled, the
// moment the transaction returned, against the order's cancel_after.
type recordingStore struct {
	store.Store
	rec *recorder
}

func (s recordingStore) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	res, err := s.Store.CancelDue(ctx, p)
	if err == nil {
		now := time.Now()
		for _, c := range res.Cancelled {
			s.rec.deliver(keyIndex(c.ID), now, c.CancelAfter)
		}
	}
	return res, err
}
