package lapse

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
)

// handleDue is the cancel pipeline of docs/architecture.md §4 as the timer.Handler of a
// scheduler: the batch's orders are cancelled in one store transaction, and
// the batch is acknowledged (nil) only after it commits.
func (s *Service) handleDue(ctx context.Context, due []timer.Timer) error {
	ids := make([]string, 0, len(due))
	var reminders []string
	for _, t := range due {
		if id, ok := strings.CutPrefix(t.Key, reminderPrefix); ok {
			reminders = append(reminders, id)
			continue
		}
		ids = append(ids, t.Key)
	}
	if len(reminders) > 0 {
		s.remindLater(ctx, reminders)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := s.cancelBatch(ctx, store.CancelDueParams{IDs: ids, SkipAttempted: s.checks != nil, Command: s.commands != nil})
	return err
}

// cancelBatch runs one cancel transaction — a batch of due timers, or a claim
// of due orders by the store itself (sql timers, fallback sweep) — in which
// every order that is PENDING and past cancel_after is cancelled, its stock
// released and its event written. The rest of a batch is sorted out here:
//   - PENDING but not yet due by the store's clock (a timer fired early, a
//     clock ahead), PENDING or PAYING: scheduled again for when the store's
//     clock reaches cancel_after, on this clock (clock.go), never cancelled
//     early, never sent to the gateway check early;
//   - PAYING, or PENDING with a failed attempt while a gateway is configured:
//     never cancelled blind. With a gateway they go to the gateway check
//     (checker). Without one, a PAYING order waits for its callback (a FAILED
//     callback schedules the timer again); it is counted (lapse_payments_stuck)
//     and audit shows it as waiting past its deadline;
//   - PAID, CANCELLED or unknown: nothing to do.
func (s *Service) cancelBatch(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CancelTimeout)
	defer cancel()
	// Order-service mode: the commands are written claimed for this
	// instance's dispatcher, which sends them as the batch commits.
	var handoff *ordersvc.Handoff
	if p.Command && s.commands != nil {
		if h, ok := s.commands.Hold(); ok {
			handoff, p.CommandLease = h, h.Lease()
		}
	}
	before := time.Now()
	res, err := s.store.CancelDue(ctx, p)
	s.metrics.skew.observe(before, time.Now(), res.Now)
	if handoff != nil {
		if err != nil {
			handoff.Release()
		} else {
			handoff.Deliver(res.Commands)
		}
	}
	if err != nil {
		s.metrics.batches.WithLabelValues("error").Inc()
		s.log.Error("cancel batch failed; it will be retried", "orders", len(p.IDs), "claim", p.Claim, "err", err)
		return res, err
	}
	s.metrics.batches.WithLabelValues("ok").Inc()
	s.metrics.batchSize.Observe(float64(len(res.Cancelled) + len(res.Skipped)))
	if len(res.Cancelled) >= s.cfg.BatchSize {
		s.burstUntil.Store(time.Now().Add(burstHold).UnixNano())
	}
	timeout := s.metrics.cancelled.WithLabelValues(string(order.ReasonTimeout))
	for _, he := range res.HookFailed {
		// The batch committed without it: the order is still due, tried
		// again with backoff, its own lateness growing.
		s.metrics.hookFailures.WithLabelValues(he.Event).Inc()
		retry, attempts := s.recordHookFailure(ctx, he)
		s.log.Error("an OnCancelled hook failed: the order's cancel was rolled back, to be tried again",
			"order_id", he.OrderID, "attempts", attempts, "retry_in", retry, "err", he.Err)
		s.schedule(ctx, he.OrderID, time.Now().Add(retry))
	}
	for _, c := range res.Cancelled {
		if p.Command {
			// Commanded, not cancelled: the answer cancels (commandsSettled).
			s.early.forget(c.ID)
			continue
		}
		timeout.Inc()
		s.early.forget(c.ID)
		s.hookTries.forget(c.ID)
		s.metrics.lateness.Observe(c.CancelledAt.Sub(c.CancelAfter).Seconds())
	}
	for _, sk := range res.Skipped {
		switch {
		case sk.Missing:
		case (sk.Status == order.Pending || sk.Status == order.Paying) && sk.CancelAfter.After(res.Now):
			// Early by the store's clock: set again for when that clock gets
			// there (clock.go). A PAYING order too — the gateway check closes
			// the trade, which must not happen in the buyer's window.
			s.metrics.early.Inc()
			s.schedule(ctx, sk.ID, localDue(sk.CancelAfter, res.Now, s.early.floor(sk.ID)))
		case s.checks != nil && (sk.Status == order.Paying || sk.Status == order.Pending):
			s.checks.enqueue(sk.ID)
		case sk.Status == order.Paying:
			s.metrics.payingAtDeadline.Inc()
			s.log.Warn("order still PAYING at its deadline: not cancelled, waiting for the payment outcome",
				"order_id", sk.ID, "cancel_after", sk.CancelAfter)
		}
	}
	if len(res.Cancelled) > 0 {
		s.log.Debug("cancel batch", "cancelled", len(res.Cancelled), "skipped", len(res.Skipped))
	}
	return res, nil
}

// burstHold is how long after a full cancel batch the service still counts
// as cancelling a burst (bursting): in a burst full batches follow each
// other a few milliseconds apart.
const burstHold = 100 * time.Millisecond

// bursting reports whether a cancel batch came back full within burstHold:
// due orders are arriving faster than one batch at a time. The outbox relay
// yields to the cancels meanwhile (outbox.Config.Yield): in a burst of
// 20,000 due orders on PostgreSQL its statements cost the database more
// than the cancels, and halved the drain.
func (s *Service) bursting() bool {
	return time.Now().UnixNano() < s.burstUntil.Load()
}

// commandsSettled follows a settle of the order service's answers: the
// orders they cancelled count as timeout cancels, with their lateness; their
// events go out.
func (s *Service) commandsSettled(res store.SettleCommandsResult) {
	timeout := s.metrics.cancelled.WithLabelValues(string(order.ReasonTimeout))
	for _, o := range res.Cancelled {
		timeout.Inc()
		s.metrics.lateness.Observe(o.CancelledAt.Sub(o.CancelAfter).Seconds())
	}
	owed := 0
	for _, cf := range res.Conflicts {
		if cf.RefundRequired {
			owed++
			s.metrics.refundRequired.Inc()
		}
	}
	if owed > 0 && s.refunds != nil {
		s.refunds.Notify()
	}
	if len(res.Cancelled)+len(res.Paid)+owed > 0 {
		s.relay.Notify()
	}
}

// refundsSettled follows a settle of refunds: their order.refunded events
// go out.
func (s *Service) refundsSettled(res store.SettleRefundsResult) {
	if len(res.Refunded) > 0 {
		s.relay.Notify()
	}
}

// recordHookFailure records in the store that he's hook failed once more
// (store.HookFailures: every instance, the audit and the dashboard see it,
// and claims of due orders leave the order alone until its next try), and
// returns how long until that try and the attempts so far. The error is
// kept without the secrets a URL in it may carry. If the store cannot
// record it, the backoff is counted here alone.
func (s *Service) recordHookFailure(ctx context.Context, he *store.HookError) (time.Duration, int) {
	f, err := s.store.RecordHookFailure(ctx, &store.HookError{OrderID: he.OrderID, Event: he.Event, Err: errors.New(redactText(he.Err.Error()))}, timer.Backoff)
	if err != nil {
		n := s.hookTries.next(he.OrderID) + 1
		s.log.Error("recording a failed hook failed: its backoff is this instance's alone", "order_id", he.OrderID, "err", err)
		return timer.Backoff(n), n
	}
	return f.NextAt.Sub(f.LastFailedAt), f.Attempts
}

// redactText is s with every word that looks like a URL redacted
// (redact.URL): a hook's error may quote a connection string.
func redactText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	words := strings.Fields(s)
	for i, w := range words {
		if strings.Contains(w, "://") {
			words[i] = redact.URL(w)
		}
	}
	return strings.Join(words, " ")
}

// HookFailures returns up to limit PENDING orders whose OnCancelled hook
// keeps failing (store.HookFailures), the oldest first failure first, as
// the audit's hook_failing warning and the dashboard's page list them.
func (s *Service) HookFailures(ctx context.Context, limit int) ([]store.HookFailure, error) {
	if limit < 0 || limit > 500 {
		return nil, invalid("limit", "must be between 1 and 500")
	}
	if limit == 0 {
		limit = 100
	}
	return s.store.ListHookFailures(ctx, limit)
}
