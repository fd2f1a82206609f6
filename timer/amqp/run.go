package amqp

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/timer"
)

// gather is how long Run waits for more timers once one arrived, to hand
// them over in one batch.
const gather = 2 * time.Millisecond

// settleTimeout bounds handing a refused batch back to the broker once its
// handler returned, Run's ctx ended or not.
const settleTimeout = 5 * time.Second

// Run implements timer.Scheduler: it consumes the ready queue and hands the
// timers to h in batches of up to BatchSize, and checks for lost timers
// every LossCheck, until ctx ends. Then it finishes the batch in hand (its
// handler gets a context that is not cancelled with ctx), settles it, and
// returns ctx's error; timers it held but had not handed over go back to the
// queue. Broker errors are logged and retried; they do not end Run. It
// returns before ctx ends only when the scheduler is closed
// (rabbit.ErrClosed).
func (s *Scheduler) Run(ctx context.Context, h timer.Handler) error {
	if !s.run.TryLock() {
		return errors.New("amqp timers: Run is already running")
	}
	defer s.run.Unlock()

	// The subscription outlives ctx until the batch in hand is settled:
	// closing its channel would return the batch to the queue, and an
	// acknowledgement after that would be lost.
	subCtx, unsubscribe := context.WithCancel(context.WithoutCancel(ctx))
	defer unsubscribe()
	in := make(chan amqp091.Delivery, s.cfg.Prefetch)
	consumed := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		consumed <- s.conn.Consume(subCtx, s.names.ready(), s.cfg.Prefetch, func(ctx context.Context, d amqp091.Delivery) {
			select {
			case in <- d:
			case <-ctx.Done(): // left unsettled: back to the queue with the channel
			}
		})
	})
	checkCtx, stopChecks := context.WithCancel(ctx)
	wg.Go(func() { s.watch(checkCtx) })

	err := s.deliver(ctx, in, consumed, h)
	stopChecks()
	unsubscribe()
	wg.Wait()
	return err
}

// arrival is a delivery from the ready queue with the timer it carries.
type arrival struct {
	d amqp091.Delivery
	t timer.Timer
}

// deliver gathers arrivals into batches and hands each to h until ctx ends
// (its error) or the subscription ends for good (the Conn was closed).
func (s *Scheduler) deliver(ctx context.Context, in <-chan amqp091.Delivery, consumed <-chan error, h timer.Handler) error {
	var held earliest // arrived early by up to Lead + Base: handed over when due
	holdUpTo := max(s.cfg.Lead, 0) + s.cfg.Base
	wakeup := time.NewTimer(time.Hour)
	defer wakeup.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err // no new batch once ctx ended
		}
		wakeup.Reset(time.Hour)
		if len(held) > 0 {
			wakeup.Reset(time.Until(held[0].t.Due))
		}
		var got []amqp091.Delivery
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-consumed:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("amqp timers: consume %s: %w", s.names.ready(), err)
		case d := <-in:
			got = append(got, d)
		case <-wakeup.C:
		}
		// What arrives within gather joins the batch: the broker sends a
		// burst of due timers one message after the other. At most the
		// prefetch can be in hand.
		if len(got) > 0 {
			gathered := time.NewTimer(gather)
			for more := true; more && len(got) < s.cfg.BatchSize; {
				select {
				case d := <-in:
					got = append(got, d)
				case <-gathered.C:
					more = false
				}
			}
			gathered.Stop()
		}
		now := time.Now()
		var batch, early []arrival
		dropped := 0
		for _, d := range got {
			if closedChannel(d) {
				dropped++ // the broker delivers it again on the new channel
				continue
			}
			t, err := decode(d)
			if err != nil {
				// Not a timer this package wrote: delivering it again
				// would not make it one.
				s.log.Error("amqp timers: dropping a malformed message from the ready queue",
					"message_id", d.MessageId, "routing_key", d.RoutingKey, "err", err)
				if err := d.Reject(false); err != nil {
					s.log.Warn("amqp timers: reject a malformed message failed", "err", err)
				}
				continue
			}
			a := arrival{d: d, t: t}
			switch ahead := t.Due.Sub(now); {
			case ahead <= 0:
				heap.Push(&held, a)
			case ahead <= holdUpTo:
				s.stats.held.Add(1)
				heap.Push(&held, a)
			default:
				early = append(early, a)
			}
		}
		// The earliest due first, a batch at most: the rest go next round
		// (wakeup fires at once for a due time past).
		for len(held) > 0 && len(batch) < s.cfg.BatchSize && !held[0].t.Due.After(now) {
			a := heap.Pop(&held).(arrival)
			if closedChannel(a.d) {
				dropped++
				continue
			}
			batch = append(batch, a)
		}
		if dropped > 0 {
			s.log.Debug("amqp timers: dropped timers of a lost channel; the broker delivers them again", "timers", dropped)
		}
		if len(early) > 0 {
			s.sendAgain(ctx, early)
		}
		if len(batch) > 0 {
			s.handle(ctx, batch, h)
		}
	}
}

// closedChannel reports whether d came on a channel that has closed since
// (the connection was lost, or the subscription ended). The broker has then
// put d back in the queue and delivers it again on the new channel, so
// handing this copy over too would reach the handler twice, and its
// acknowledgement would fail. Arrivals held for their due time (the lead)
// are the ones this happens to: they wait in the process up to Lead + Base.
func closedChannel(d amqp091.Delivery) bool {
	ch, ok := d.Acknowledger.(interface{ IsClosed() bool })
	return ok && ch.IsClosed()
}

// handle hands batch to h and settles it: acknowledged if h accepts it,
// else handed back to the broker for a later attempt.
func (s *Scheduler) handle(ctx context.Context, batch []arrival, h timer.Handler) {
	timers := make([]timer.Timer, len(batch))
	for i, a := range batch {
		timers[i] = a.t
	}
	if err := h(context.WithoutCancel(ctx), timers); err != nil {
		s.retry(ctx, batch, err)
		return
	}
	failed := 0
	for _, a := range batch {
		if err := a.d.Ack(false); err != nil {
			failed++
		}
	}
	if failed > 0 {
		s.log.Warn("amqp timers: acknowledge a handled batch failed (the channel closed); its timers are delivered again",
			"timers", failed)
	}
}

// retry hands a refused batch back to the broker: each timer is sent again
// with Attempt+1 and a delay of Backoff(Attempt), and its delivery
// acknowledged once the copy is confirmed. Deliveries whose copy could not
// be sent are requeued after the backoff instead.
func (s *Scheduler) retry(ctx context.Context, batch []arrival, cause error) {
	maxAttempt := 0
	for _, a := range batch {
		maxAttempt = max(maxAttempt, a.t.Attempt)
	}
	s.log.Warn("amqp timers: handler refused a batch; delivering it again after a backoff",
		"timers", len(batch), "attempt", maxAttempt, "retry_in", s.cfg.Backoff(maxAttempt), "err", cause)
	settle, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	next := make([]timer.Timer, len(batch))
	for i, a := range batch {
		next[i] = timer.Timer{Key: a.t.Key, Due: a.t.Due, Attempt: a.t.Attempt + 1}
	}
	sent := s.sendEach(settle, next, func(t timer.Timer) time.Duration { return s.cfg.Backoff(t.Attempt - 1) })
	var requeue []arrival
	for i, a := range batch {
		if sent[i] {
			s.stats.retried.Add(1)
			if err := a.d.Ack(false); err != nil {
				// The copy is in the ladder and the original comes back: twice, harmless.
				s.log.Debug("amqp timers: acknowledge a retried timer failed", "key", a.t.Key, "err", err)
			}
			continue
		}
		requeue = append(requeue, a)
	}
	if len(requeue) == 0 {
		return
	}
	// The broker did not take the copies: hold the deliveries for the
	// backoff, so that a failing store does not spin, then requeue them.
	// The end of ctx cuts the wait short: Run is stopping.
	_ = sleep(ctx, s.cfg.Backoff(maxAttempt))
	for _, a := range requeue {
		if err := a.d.Nack(false, true); err != nil {
			s.log.Debug("amqp timers: requeue a refused timer failed (it comes back with the channel)", "key", a.t.Key, "err", err)
		}
	}
}

// sendAgain sends timers that arrived more than Lead + Base before their due time
// (beyond the ladder's reach, or sent by a clock ahead of this one) again for
// the remainder, and acknowledges each once its copy is confirmed; those
// that could not be sent are requeued, to be looked at again.
func (s *Scheduler) sendAgain(ctx context.Context, early []arrival) {
	settle, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	ts := make([]timer.Timer, len(early))
	for i, a := range early {
		ts[i] = a.t
	}
	sent := s.sendEach(settle, ts, nil)
	if slices.Contains(sent, false) {
		// The broker refuses the copies: requeued at once, they would
		// come straight back.
		_ = sleep(ctx, time.Second)
	}
	for i, a := range early {
		var err error
		if sent[i] {
			s.stats.republished.Add(1)
			err = a.d.Ack(false)
		} else {
			err = a.d.Nack(false, true)
		}
		if err != nil {
			s.log.Debug("amqp timers: settle an early timer failed (it comes back with the channel)", "key", a.t.Key, "err", err)
		}
	}
}

// sendEach is publish for timers that are settled one by one: it logs
// the first error and reports which were confirmed.
func (s *Scheduler) sendEach(ctx context.Context, ts []timer.Timer, delay func(timer.Timer) time.Duration) []bool {
	sent := make([]bool, len(ts))
	logged := false
	for i, err := range s.publish(ctx, ts, delay) {
		sent[i] = err == nil
		if err != nil && !logged {
			s.log.Warn("amqp timers: send timers again failed", "timers", len(ts), "err", err)
			logged = true
		}
	}
	return sent
}

// decode reads the timer a delivery carries.
func decode(d amqp091.Delivery) (timer.Timer, error) {
	key := string(d.Body)
	if err := validKey(key); err != nil {
		return timer.Timer{}, err
	}
	raw, ok := d.Headers[hdrDue].(string)
	if !ok {
		return timer.Timer{}, fmt.Errorf("no %s header", hdrDue)
	}
	due, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return timer.Timer{}, fmt.Errorf("header %s: %w", hdrDue, err)
	}
	attempt := 1
	if n, ok := integer(d.Headers[hdrAttempt]); ok && n > 1 {
		attempt = int(n)
	}
	// Deliveries the broker made before this one without a settlement (a
	// consumer that died, a channel lost): a quorum queue counts them, a
	// classic queue only says there was at least one.
	if n, ok := integer(d.Headers[hdrDeliveryCount]); ok && n > 0 {
		attempt += int(n)
	} else if d.Redelivered {
		attempt++
	}
	return timer.Timer{Key: key, Due: due, Attempt: attempt}, nil
}

// integer reads an AMQP table's integer of any width.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// earliest is a min-heap of arrivals by due time.
type earliest []arrival

func (e earliest) Len() int           { return len(e) }
func (e earliest) Less(i, j int) bool { return e[i].t.Due.Before(e[j].t.Due) }
func (e earliest) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *earliest) Push(x any)        { *e = append(*e, x.(arrival)) }
func (e *earliest) Pop() any {
	old := *e
	a := old[len(old)-1]
	*e = old[:len(old)-1]
	return a
}
