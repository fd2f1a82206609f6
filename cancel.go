package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
)

// handleDue is the cancel pipeline of DESIGN.md §6, the timer.Handler of the
// scheduler: one store transaction cancels every order of the batch that is
// PENDING and past cancel_after, releasing its stock and writing its event.
// The batch is acknowledged (nil) only after that transaction commits.
//
// The rest of the batch is sorted out here:
//   - PENDING but not yet due by the store's clock (a timer fired early, a
//     clock ahead): scheduled again for its cancel_after;
//   - PAYING: never cancelled blind. Without a gateway to ask, it waits for
//     its callback; a FAILED callback schedules the timer again. It is counted
//     (lapse_payments_stuck) and shown by audit as waiting past its deadline;
//   - PAID, CANCELLED or unknown: nothing to do.
func (s *Service) handleDue(ctx context.Context, due []timer.Timer) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CancelTimeout)
	defer cancel()
	ids := make([]string, len(due))
	for i, t := range due {
		ids[i] = t.Key
	}
	s.metrics.batchSize.Observe(float64(len(ids)))
	res, err := s.store.CancelDue(ctx, store.CancelDueParams{IDs: ids})
	if err != nil {
		s.metrics.batches.WithLabelValues("error").Inc()
		s.log.Error("cancel batch failed; it will be redelivered", "orders", len(ids), "err", err)
		return err
	}
	s.metrics.batches.WithLabelValues("ok").Inc()
	timeout := s.metrics.cancelled.WithLabelValues(string(order.ReasonTimeout))
	for _, c := range res.Cancelled {
		timeout.Inc()
		s.metrics.lateness.Observe(c.CancelledAt.Sub(c.CancelAfter).Seconds())
	}
	for _, sk := range res.Skipped {
		switch {
		case sk.Missing:
		case sk.Status == order.Pending && sk.CancelAfter.After(res.Now):
			s.metrics.early.Inc()
			s.schedule(ctx, sk.ID, sk.CancelAfter)
		case sk.Status == order.Paying:
			s.metrics.payingAtDeadline.Inc()
			s.log.Warn("order still PAYING at its deadline: not cancelled, waiting for the payment outcome",
				"order_id", sk.ID, "cancel_after", sk.CancelAfter)
		}
	}
	if len(res.Cancelled) > 0 {
		s.log.Debug("cancel batch", "cancelled", len(res.Cancelled), "skipped", len(res.Skipped))
	}
	return nil
}
