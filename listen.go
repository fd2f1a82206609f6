package lapse

// Deadlines heard from the store (store.DueListener: PostgreSQL's NOTIFY at
// commit). Timers that live in this process — the memory scheduler, or the
// sql poller's plan — only know the orders this process created; an order
// created by another instance, or in a caller's transaction that commits
// after its timer was set (CreateOrderTx), is told to every instance as it
// commits, and each hands it to its own timers.

import (
	"context"
	"sync"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
)

// dueListener is the store's DueListener when this instance's timers need
// it: the sql poller, or a scheduler that keeps its timers in this process
// (memory). A shared, durable index (Redis, a broker) already holds every
// instance's timers.
func (s *Service) dueListener() (store.DueListener, bool) {
	dl, ok := s.cfg.Store.(store.DueListener)
	if !ok {
		return nil, false
	}
	if s.poll != nil {
		return dl, true
	}
	if _, seeded := s.timers.(timer.Seeder); seeded {
		return nil, false
	}
	if d, ok := s.timers.(timer.Durable); ok && d.Durable() {
		return nil, false
	}
	return dl, true
}

// listen hears deadlines until ctx ends, listening again after a failure
// with backoff (100 ms doubling to 30 s). Once listening again it plans
// again from the store (replan): deadlines committed while it was not
// listening were told to nobody. started is closed once the first listen
// holds or fails, so that Run seeds the timers after it: an order committed
// between the seed and the listen would be neither seeded nor heard.
func (s *Service) listen(ctx context.Context, dl store.DueListener, started chan<- struct{}) {
	var once sync.Once
	begun := func() { once.Do(func() { close(started) }) }
	defer begun()
	lost := false
	for attempt := 0; ; {
		err := dl.ListenDue(ctx, func() {
			begun()
			if lost {
				s.replan(ctx)
			}
			lost, attempt = false, 0
		}, s.heard)
		begun()
		if ctx.Err() != nil {
			return
		}
		lost = true
		attempt++
		s.metrics.listenLost.Inc()
		wait := timer.Backoff(attempt)
		s.log.Warn("listening for deadlines failed; listening again, then planning from the store", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// heard hands a deadline told by the store to this instance's timers.
func (s *Service) heard(key string, at time.Time) {
	s.metrics.heard.Inc()
	s.schedule(context.Background(), key, at)
}

// replan makes the timers whole after deadlines may have been missed: the
// poller plans again from the store; a memory scheduler is seeded again
// (an upsert of every pending order's timer).
func (s *Service) replan(ctx context.Context) {
	if s.poll != nil {
		s.poll.replan()
		return
	}
	if err := s.seed(ctx); err != nil && ctx.Err() == nil {
		s.log.Error("seeding timers after listening again failed: orders created meanwhile wait for the sweep", "err", err)
	}
}

// Wake sets the timer of order id from the store, as it is now: for a
// PENDING or PAYING order, at its cancel_after; for any other, nothing. It
// is for an instance that learns of an order another process committed by
// other means than the store, where the store cannot tell it (MySQL,
// SQLite: PostgreSQL's instances hear every commit, listen.go); without it
// the instance finds the order at its poller's next plan or at its sweep.
// The instance that created the order needs none: CreateOrderTx set its
// timer. It answers ErrNotFound when there is no such order (a transaction
// rolled back, or not committed yet).
func (s *Service) Wake(ctx context.Context, id string) error {
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return err
	}
	if o.Status == order.Pending || o.Status == order.Paying {
		s.schedule(ctx, o.ID, o.CancelAfter)
	}
	return nil
}
