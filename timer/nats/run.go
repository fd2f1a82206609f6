package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
)

const (
	// pollWait bounds one wait for the next fired timer; Run then asks
	// again. It only bounds how long a consumer deleted behind the
	// scheduler's back goes unnoticed when no timer fires.
	pollWait = 5 * time.Second
	// settleTimeout bounds acknowledging a batch (or requeueing it) after
	// its handler returned, Run's ctx ended or not.
	settleTimeout = 5 * time.Second
)

// Run implements timer.Scheduler: it pulls fired timers from the durable
// consumer in batches and hands them to h, and a watcher reseeds the stream
// when it lost its data, until ctx ends. Then Run finishes the batch in hand
// (its handler gets a context that is not cancelled with ctx), acknowledges
// or requeues it, and returns ctx's error.
//
// Server errors are logged and retried; they do not end Run. A server older
// than MinServerVersion, or a stream of the same name that is not this
// scheduler's or does not keep AllowMsgSchedules, does: Run returns that
// error at once.
func (s *Scheduler) Run(ctx context.Context, h timer.Handler) error {
	if !s.run.TryLock() {
		return errors.New("nats: Run is already running")
	}
	defer s.run.Unlock()
	// Refuse a wrong server or stream at once, rather than log and retry.
	if _, err := s.consumer(ctx); isPermanent(err) {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var wg sync.WaitGroup
	wg.Go(func() { s.watch(watchCtx) })
	err := s.consume(ctx, h)
	stopWatch()
	wg.Wait()
	return err
}

// consume pulls fired timers until ctx ends or a permanent error, and
// hands them to a dispatcher that delivers each batch at its due time: the
// server fires timers Config.Lead early (see Lead), and pulling goes on
// while earlier ones wait to be due.
func (s *Scheduler) consume(ctx context.Context, h timer.Handler) error {
	hold := newHold(s.cfg.AckWait, s.log)
	s.held.Store(hold)
	defer s.held.Store(nil)
	var wg sync.WaitGroup
	wg.Go(func() { s.dispatch(ctx, hold, h) })
	wg.Go(func() { hold.keepLeases(ctx) })
	defer func() {
		wg.Wait()
		hold.release() // not handed over: to the next consumer, at once
	}()
	failures := 0
	for ctx.Err() == nil {
		if !hold.waitRoom(ctx, maxHeldBatches*s.cfg.BatchSize) {
			break
		}
		cons, err := s.consumer(ctx)
		var msgs []jetstream.Msg
		if err == nil {
			msgs, err = s.pull(ctx, cons)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if isPermanent(err) {
				return err
			}
			// The stream or the consumer may be gone: look them up again.
			s.forget()
			failures++
			// At most a second: timers fire on the server meanwhile, and
			// wait here until the consumer is reached again.
			wait := min(timer.Backoff(failures), time.Second)
			if failures == 1 {
				s.log.Error("nats timers: pulling fired timers failed; retrying", "err", err)
			} else {
				s.log.Debug("nats timers: pulling fired timers failed again", "err", err, "retry_in", wait)
			}
			sleep(ctx, wait)
			continue
		}
		if failures > 0 {
			s.log.Info("nats timers: pulling fired timers works again", "failures", failures)
			failures = 0
		}
		for _, m := range msgs {
			t, err := s.decode(m)
			if err != nil {
				// Not a timer this scheduler wrote: delivering it again would
				// not make it one.
				s.log.Error("nats timers: dropping a malformed message on the timer subjects", "subject", m.Subject(), "err", err)
				if err := m.Term(); err != nil {
					s.log.Warn("nats timers: terminate a malformed message failed", "subject", m.Subject(), "err", err)
				}
				continue
			}
			hold.add(m, t, s.cfg.Lead)
		}
	}
	return ctx.Err()
}

// maxHeldBatches bounds the timers one instance holds waiting for their due
// time, in batches: the rest stay with the server for the other instances.
const maxHeldBatches = 10

// dispatch hands the held timers to h, in batches, once they are due.
func (s *Scheduler) dispatch(ctx context.Context, hold *hold, h timer.Handler) {
	for {
		msgs, timers := hold.next(ctx, s.cfg.BatchSize)
		if len(msgs) == 0 {
			return
		}
		s.deliver(ctx, msgs, timers, h)
	}
}

// pull returns the next batch: what is there now, up to BatchSize, or else
// the first timer to arrive within pollWait and whatever arrived with it.
// Each request ends as soon as the server has nothing more for it, so the
// instance holds only the timers it hands over; the others stay with the
// server for the other instances. No timers and no error: nothing arrived.
func (s *Scheduler) pull(ctx context.Context, cons jetstream.Consumer) ([]jetstream.Msg, error) {
	msgs, err := s.pullNoWait(cons, s.cfg.BatchSize)
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	wait, cancel := context.WithTimeout(ctx, pollWait)
	first, err := cons.Next(jetstream.FetchContext(wait))
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// A timer the server sent as ctx ended is delivered again after
		// AckWait.
		return nil, nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, natsgo.ErrTimeout):
		return nil, nil
	default:
		return nil, fmt.Errorf("wait for a fired timer: %w", err)
	}
	msgs = []jetstream.Msg{first}
	if s.cfg.BatchSize > 1 {
		more, err := s.pullNoWait(cons, s.cfg.BatchSize-1)
		if err != nil {
			// The first one is delivered; the others come with the next pull.
			s.log.Debug("nats timers: pulling the rest of a batch failed", "err", err)
		}
		msgs = append(msgs, more...)
	}
	return msgs, nil
}

// pullNoWait returns up to n timers the server has for the consumer now.
func (s *Scheduler) pullNoWait(cons jetstream.Consumer, n int) ([]jetstream.Msg, error) {
	batch, err := cons.FetchNoWait(n)
	if err != nil {
		return nil, fmt.Errorf("pull fired timers: %w", err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil && len(msgs) == 0 {
		return nil, fmt.Errorf("pull fired timers: %w", err)
	}
	return msgs, nil
}

// deliver hands timers (of msgs) to h in one call, keeping their lease
// while h runs, then acknowledges them all or requeues each after its
// backoff.
func (s *Scheduler) deliver(ctx context.Context, held []jetstream.Msg, timers []timer.Timer, h timer.Handler) {
	stop := s.keepLease(ctx, held)
	err := h(context.WithoutCancel(ctx), timers)
	stop()

	settle, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var failed int
	for i, m := range held {
		var aerr error
		if err == nil {
			aerr = m.Ack()
		} else {
			aerr = m.NakWithDelay(s.cfg.Backoff(timers[i].Attempt))
		}
		if aerr != nil {
			failed++
		}
	}
	// One round trip for the whole batch: the acknowledgements have reached
	// the server when deliver returns (when Run returns, after a cancel).
	ferr := s.nc.FlushWithContext(settle)
	if failed > 0 || ferr != nil {
		what := "acknowledge a batch"
		if err != nil {
			what = "requeue a failed batch"
		}
		s.log.Error("nats timers: "+what+" failed; it will be delivered again after its AckWait",
			"timers", len(held), "failed", failed, "flush_err", ferr)
	}
}

// decode reads the timer a fired message carries.
func (s *Scheduler) decode(m jetstream.Msg) (timer.Timer, error) {
	key := string(m.Data())
	if err := validKey(key); err != nil {
		return timer.Timer{}, err
	}
	if want := s.subj.due + token(key); m.Subject() != want {
		return timer.Timer{}, fmt.Errorf("key %q belongs on %s", key, want)
	}
	due, err := time.Parse(time.RFC3339Nano, m.Headers().Get(hdrDue))
	if err != nil {
		return timer.Timer{}, fmt.Errorf("header %s: %w", hdrDue, err)
	}
	md, err := m.Metadata()
	if err != nil {
		return timer.Timer{}, fmt.Errorf("delivery metadata: %w", err)
	}
	return timer.Timer{Key: key, Due: due, Attempt: int(md.NumDelivered)}, nil
}

// keepLease tells the server every AckWait/3 that the batch msgs is still
// being worked on, while ctx is alive, until the returned stop is called.
// Once ctx ends (the process is shutting down) the lease runs out, so a
// batch whose handler never returns is delivered again elsewhere.
func (s *Scheduler) keepLease(ctx context.Context, msgs []jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(s.cfg.AckWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				for _, m := range msgs {
					if err := m.InProgress(); err != nil && ctx.Err() == nil {
						s.log.Warn("nats timers: extend the lease of a batch in hand failed", "err", err)
						break
					}
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
