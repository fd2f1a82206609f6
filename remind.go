package lapse

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
)

// reminderPrefix marks a reminder's timer key; an order id never starts with it
// (ids start with a letter or digit).
const reminderPrefix = "~remind:"

// EventExpiring is the best-effort reminder that an unpaid order's payment
// window is about to close (Config.RemindBefore).
const EventExpiring = "order.expiring"

// scheduleReminder sets the order's reminder timer, if reminders are on and
// there is still time for one.
func (s *Service) scheduleReminder(ctx context.Context, o order.Order) {
	if s.cfg.RemindBefore <= 0 || s.timers == nil {
		return
	}
	at := o.ExpiresAt.Add(-s.cfg.RemindBefore)
	if !at.After(o.CreatedAt) {
		return
	}
	if err := s.timers.Schedule(ctx, reminderPrefix+o.ID, at); err != nil {
		s.log.Warn("schedule reminder (best effort)", "order_id", o.ID, "err", err)
	}
}

// remindTimeout bounds one batch of reminders: a sink that hangs costs a
// reminder, never a cancel or a shutdown.
const remindTimeout = 5 * time.Second

// remindSlots bounds the reminder batches in flight; beyond it reminders are
// dropped (they are best effort) rather than queued behind a slow sink.
const remindSlots = 4

// remindLater sends reminders off the cancel path: the timer handler that
// delivered them goes on to cancel its batch at once, whatever the sink does.
// Run waits for the reminders in flight when it stops, at most remindTimeout.
func (s *Service) remindLater(ctx context.Context, ids []string) {
	select {
	case s.remindSem <- struct{}{}:
	default:
		s.log.Warn("reminders dropped: the sink is slow and earlier reminders are still in flight (best effort)", "orders", len(ids))
		return
	}
	s.reminding.Go(func() {
		defer func() { <-s.remindSem }()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), remindTimeout)
		defer cancel()
		s.remind(rctx, ids)
	})
}

// remind sends order.expiring for each order still unpaid, straight to the
// sink: a reminder is a courtesy, so it is neither stored nor retried.
func (s *Service) remind(ctx context.Context, ids []string) {
	var evs []order.Event
	for _, id := range ids {
		o, err := s.store.GetOrder(ctx, id)
		if err != nil || (o.Status != order.Pending && o.Status != order.Paying) {
			continue
		}
		payload, err := json.Marshal(o)
		if err != nil {
			continue
		}
		evs = append(evs, order.Event{ID: uuid.Must(uuid.NewV7()).String(), Type: EventExpiring, OrderID: id,
			Payload: payload, CreatedAt: time.Now().UTC()})
	}
	if len(evs) == 0 {
		return
	}
	sent := 0
	var failed error
	for _, sink := range s.cfg.Sinks {
		for _, err := range sink.Publish(ctx, evs) {
			if err == nil {
				sent++
			} else {
				failed = err
			}
		}
	}
	if failed != nil {
		s.log.Warn("send order.expiring reminders (best effort)", "orders", len(evs), "sent", sent, "err", failed)
	}
	s.metrics.reminders.Add(float64(sent))
}
