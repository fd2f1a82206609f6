package lapse

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
)

// checker asks the payment gateway about orders that cannot be cancelled
// blind (docs/architecture.md §2, §4): PAYING orders, and PENDING orders with a failed
// attempt, once past cancel_after. The rules:
//
//   - gateway says PAID: the order is marked PAID (stock committed, order.paid);
//   - NOT_PAID: the trade is closed at the gateway, then the order cancelled —
//     only once the close succeeded (or the trade was closed already);
//     a close that finds the trade paid sends the order back to the query;
//   - CLOSED: the order is cancelled;
//   - PENDING (a payment in progress): asked again with backoff, for at most
//     Config.GatewayPendingMax, then closed and cancelled;
//   - an error (gateway down, timeout, unknown answer): asked again with
//     backoff; never cancelled on an error;
//   - except payment.ErrUnknownPayment (the gateway does not know an
//     attempt, or knows it as another order's): waited for as PENDING, then
//     that attempt is taken as not paid — the order cancelled and its stock
//     released — without closing it at the gateway (it may be another
//     order's). A buyer naming a payment that will never pay cannot hold
//     the stock forever.
//
// Orders cancelled after a payment attempt get a confirmation query
// Config.ConfirmAfter later: paid after all → refund_required.
//
// Checks run beside the cancel batches, bounded by GatewayConcurrency, so a
// slow or dead gateway never holds up orders that need no gateway call.
// Retry and confirmation times are kept in the process: after a crash the
// orders come back through the fallback sweep (PaymentChecks), and a
// confirmation lost in a crash is what `lapse reconcile` is for.
type checker struct {
	s   *Service
	gw  payment.Gateway
	sem chan struct{}

	mu      sync.Mutex
	pending map[string]*check // by order id: in flight or waiting for a retry
	wg      sync.WaitGroup
	ctx     context.Context // set by run; checks stop when it ends
}

type check struct {
	attempt      int
	pendingSince time.Time // when the gateway first said PENDING
	confirm      bool      // a confirmation query after the cancel
	timer        *time.Timer
}

func newChecker(s *Service, gw payment.Gateway) *checker {
	return &checker{s: s, gw: gw, sem: make(chan struct{}, s.cfg.GatewayConcurrency), pending: map[string]*check{},
		ctx: context.Background()}
}

// run sets the context checks run under and waits, when it ends, for the
// checks in flight (retries waiting on a timer are dropped: see above).
func (c *checker) run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	for id, ch := range c.pending {
		if ch.timer != nil && ch.timer.Stop() {
			delete(c.pending, id)
			c.wg.Done() // its callback will not run
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// enqueue starts a check of an order unless one is already in flight or waiting.
func (c *checker) enqueue(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, busy := c.pending[id]; busy || c.ctx.Err() != nil {
		return
	}
	ch := &check{}
	c.pending[id] = ch
	c.start(id, ch, 0)
}

// confirmLater schedules the confirmation query of an order just cancelled.
func (c *checker) confirmLater(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	ch := &check{confirm: true}
	c.pending[id] = ch
	c.start(id, ch, c.s.cfg.ConfirmAfter)
}

// start runs the check after delay; call under c.mu.
func (c *checker) start(id string, ch *check, delay time.Duration) {
	c.wg.Add(1)
	ch.timer = time.AfterFunc(delay, func() {
		defer c.wg.Done()
		c.sem <- struct{}{}
		defer func() { <-c.sem }()
		c.mu.Lock()
		ctx := c.ctx
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		var next time.Duration
		var again bool
		if ch.confirm {
			next, again = c.confirm(ctx, id, ch)
		} else {
			next, again = c.check(ctx, id, ch)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if again && ctx.Err() == nil {
			ch.attempt++
			c.start(id, ch, next)
			return
		}
		if c.pending[id] == ch {
			delete(c.pending, id)
		}
	})
}

// check applies the rules once; it returns when to ask again, if at all.
func (c *checker) check(ctx context.Context, id string, ch *check) (time.Duration, bool) {
	next, again, _, _ := c.checkOnce(ctx, id, ch)
	return next, again
}

// checkNow runs the deadline's check of an order once, at once, in the
// caller's goroutine (Service.CheckNow): the gateway's answer, and the
// query's error. An answer that leaves the order to be asked again
// (PENDING, a failed close) hands it to the background checks, which go on
// with their backoff.
func (c *checker) checkNow(ctx context.Context, id string) (payment.Status, error) {
	_, again, st, err := c.checkOnce(ctx, id, &check{})
	if again {
		c.enqueue(id)
	}
	return st, err
}

// checkOnce is check, which also returns the gateway's answer and the
// query's error (logged and counted here either way).
func (c *checker) checkOnce(ctx context.Context, id string, ch *check) (time.Duration, bool, payment.Status, error) {
	s := c.s
	retry := timer.Backoff(ch.attempt + 1)
	qctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
	ans, err := c.query(qctx, id)
	st, closeOpen, unknown := ans.Status, ans.closeOpen, ans.unknown
	cancel()
	if err != nil {
		s.metrics.gatewayChecks.WithLabelValues("error").Inc()
		s.log.Warn("gateway query failed; not cancelling, asking again later", "order_id", id, "retry_in", retry, "err", err)
		return retry, true, st, err
	}
	next, again := c.apply(ctx, id, ch, ans, st, closeOpen, unknown, retry)
	return next, again, st, nil
}

// apply applies the rules to an answer the gateway gave.
func (c *checker) apply(ctx context.Context, id string, ch *check, ans answer, st payment.Status, closeOpen func(context.Context) error,
	unknown []string, retry time.Duration) (time.Duration, bool) {
	s := c.s
	if len(unknown) > 0 && st.State == payment.StatePending {
		return c.unknownPayment(ctx, id, ch, st, closeOpen, unknown, retry)
	}
	s.metrics.gatewayChecks.WithLabelValues(string(st.State)).Inc()
	switch st.State {
	case payment.StatePaid:
		res, err := s.recordPaid(ctx, id, st)
		if err != nil {
			s.log.Warn("mark paid after gateway query", "order_id", id, "err", err)
			return retry, true
		}
		if !res.Order.Status.HoldsStock() {
			return 0, false // PAID; or CANCELLED meanwhile, the money flagged
		}
		// A payment that cannot pay the order (another amount or currency,
		// or an attempt that had ended): its money is flagged, and the
		// order is still open past its deadline.
		s.log.Warn("the gateway reports a payment that cannot pay the order: flagged for refund; the order's deadline has passed",
			"order_id", id, "payment_id", st.PaymentID, "gateway_amount_cents", st.AmountCents, "gateway_currency", st.Currency)
		if ans.perAttempt {
			return 0, true // the ended attempt is not asked again: the others are, or none is left open
		}
		// Asked about the order as a whole, the gateway would answer the
		// same again: that trade is paid (and flagged), nothing is open.
		return c.cancelConfirmed(ctx, id, retry, "")
	case payment.StatePending:
		if ch.pendingSince.IsZero() {
			ch.pendingSince = time.Now()
		}
		if time.Since(ch.pendingSince) < s.cfg.GatewayPendingMax {
			return retry, true
		}
		s.log.Warn("payment still in progress at the gateway after the maximum wait: closing the trade", "order_id", id,
			"waited", time.Since(ch.pendingSince).Round(time.Second))
		return c.closeAndCancel(ctx, id, ans.closeOpen, retry, "")
	case payment.StateNotPaid:
		return c.closeAndCancel(ctx, id, ans.closeOpen, retry, "")
	case payment.StateClosed:
		return c.cancelConfirmed(ctx, id, retry, "")
	}
	s.log.Warn("gateway answered an unknown state; asking again later", "order_id", id, "state", st.State)
	return retry, true
}

// unknownPayment handles an answer in which some attempts are unknown to
// the gateway (or another order's) and none is paid: they are waited for,
// with the PENDING ones, for at most GatewayPendingMax; then the attempts
// the gateway knows are closed and the order cancelled, the unknown ones
// left alone (payment.ErrUnknownPayment). The cancel event carries
// cancel_reason "timeout" (the store's reasons are fixed); the log line and
// lapse_gateway_checks_total{result="payment_unknown"} say why.
func (c *checker) unknownPayment(ctx context.Context, id string, ch *check, st payment.Status, closeOpen func(context.Context) error,
	unknown []string, retry time.Duration) (time.Duration, bool) {
	s := c.s
	s.metrics.gatewayChecks.WithLabelValues("payment_unknown").Inc()
	if ch.pendingSince.IsZero() {
		ch.pendingSince = time.Now()
		s.log.Warn("the gateway does not know the order's payment attempt, or knows it as another order's: waiting, then cancelling the order without closing that attempt",
			"order_id", id, "payment_ids", unknown, "wait_max", s.cfg.GatewayPendingMax, "reason", "payment_unknown")
	}
	if time.Since(ch.pendingSince) < s.cfg.GatewayPendingMax {
		return retry, true
	}
	s.log.Warn("cancelling the order: its payment attempt is still unknown to the gateway (or another order's) after the maximum wait; that attempt is not closed at the gateway",
		"order_id", id, "payment_ids", unknown, "waited", time.Since(ch.pendingSince).Round(time.Second), "reason", "payment_unknown")
	return c.closeAndCancel(ctx, id, closeOpen, retry, "payment_unknown")
}

// closeAndCancel closes what the check found open, then cancels the order
// (why, when set, says in the order.cancelled event why it was cancelled).
func (c *checker) closeAndCancel(ctx context.Context, id string, closeOpen func(context.Context) error, retry time.Duration, why string) (time.Duration, bool) {
	s := c.s
	cctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
	err := closeOpen(cctx)
	cancel()
	switch {
	case errors.Is(err, payment.ErrAlreadyPaid):
		s.log.Info("the trade was paid before it could be closed: querying again to mark the order paid", "order_id", id)
		return 0, true
	case err != nil:
		s.metrics.gatewayChecks.WithLabelValues("close_error").Inc()
		s.log.Warn("closing the trade failed; not cancelling, trying again later", "order_id", id, "retry_in", retry, "err", err)
		return retry, true
	}
	return c.cancelConfirmed(ctx, id, retry, why)
}

// cancelConfirmed cancels an order whose trade the gateway confirmed closed.
func (c *checker) cancelConfirmed(ctx context.Context, id string, retry time.Duration, why string) (time.Duration, bool) {
	res, err := c.s.cancelBatch(ctx, store.CancelDueParams{IDs: []string{id}, Confirmed: true, Why: why, Command: c.s.commands != nil})
	if err != nil {
		return retry, true
	}
	if len(res.Cancelled) == 1 {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		c.confirmLater(id)
	}
	return 0, false
}

// confirm is the query after a cancel: a payment that went through after all
// flags the order refund_required.
func (c *checker) confirm(ctx context.Context, id string, ch *check) (time.Duration, bool) {
	s := c.s
	qctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
	ans, err := c.query(qctx, id)
	st := ans.Status
	cancel()
	if err != nil {
		if ch.attempt >= 5 {
			s.log.Error("confirmation query kept failing; run lapse reconcile to settle this order", "order_id", id, "err", err)
			return 0, false
		}
		return timer.Backoff(ch.attempt + 1), true
	}
	if st.State != payment.StatePaid {
		return 0, false
	}
	if _, err := s.recordPaid(ctx, id, st); err != nil {
		s.log.Error("confirmation found a payment that could not be recorded; run lapse reconcile", "order_id", id, "err", err)
	}
	return 0, false
}

// recordPaid records a payment a gateway query found (st is PAID), in the
// currency the gateway reported, and does what follows it.
func (s *Service) recordPaid(ctx context.Context, id string, st payment.Status) (store.PaymentResult, error) {
	currency, err := paymentCurrency(st.Currency)
	if err != nil {
		return store.PaymentResult{}, fmt.Errorf("the gateway's answer about order %s: %w", id, err)
	}
	res, err := s.store.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: st.PaymentID, AmountCents: st.AmountCents, Currency: currency})
	if err != nil {
		return res, err
	}
	if st.Refunded {
		// Paid, then given back (WeChat Pay's REFUND) before lapse heard
		// of the payment: recorded as the payment it was; the refund is
		// recorded only by its own notification or an operator.
		s.log.Warn("the gateway shows this payment refunded since it was made; recorded as paid", "order_id", id,
			"payment_id", st.PaymentID, "outcome", res.Outcome, "order_status", res.Order.Status)
	}
	s.notePayment(ctx, res, st.PaymentID, false)
	return res, nil
}

// answer is what query found: the gateway's answer read as one, whether it
// was read attempt by attempt, how to close what it found open, and which
// attempts the gateway does not know (payment.ErrUnknownPayment).
type answer struct {
	payment.Status
	perAttempt bool
	closeOpen  func(context.Context) error
	unknown    []string
}

// query asks the gateway about an order's payment. A gateway that keeps a
// trade per attempt (payment.AttemptGateway) is asked about each of the
// order's open attempts — the current one, any superseded one not yet
// closed, any failed one — and the answers are read as one: PAID if any attempt is (with
// its payment_id); else PENDING if any is; else NOT_PAID if any is; else
// CLOSED. Other gateways, and orders whose attempts lapse never recorded,
// are asked about the order as a whole; an order whose attempts have all
// ended (REFUND_REQUIRED: their money flagged) has nothing open, CLOSED.
// The answer's closeOpen closes what it found open: the order's trade, or
// each attempt still open; its unknown lists the attempts the gateway
// answered payment.ErrUnknownPayment about (the order's id, asked as a
// whole): they read as PENDING, unless an attempt is PAID, and are never
// closed.
func (c *checker) query(ctx context.Context, id string) (answer, error) {
	closeOrder := func(ctx context.Context) error { return c.gw.Close(ctx, id) }
	ag, perAttempt := c.gw.(payment.AttemptGateway)
	var open, unknown []string
	attempts := 0
	if perAttempt {
		o, err := c.s.store.GetOrder(ctx, id)
		if err != nil {
			return answer{}, err
		}
		attempts = len(o.Payments)
		for _, p := range o.Payments {
			// A failed attempt too: at a gateway that keeps a trade per
			// attempt, a failure leaves the trade open (a declined Stripe
			// PaymentIntent is back to requires_payment_method, for the
			// buyer to try again), so it is asked about and closed. Asked
			// about "the order" instead, such a gateway knows nothing.
			if p.Status == order.PaymentPending || p.Status == order.PaymentSuperseded || p.Status == order.PaymentFailed {
				open = append(open, p.PaymentID)
			}
		}
	}
	if attempts == 0 {
		st, err := c.gw.Query(ctx, id)
		if errors.Is(err, payment.ErrUnknownPayment) {
			return answer{Status: payment.Status{State: payment.StatePending}, closeOpen: func(context.Context) error { return nil },
				unknown: []string{id}}, nil
		}
		return answer{Status: st, closeOpen: closeOrder}, err
	}
	if len(open) == 0 {
		// Each attempt ended (its money flagged for refund): a gateway
		// that keeps trades per attempt has nothing of this order open,
		// and one asked about "the order" (Stripe) could not answer.
		return answer{Status: payment.Status{State: payment.StateClosed}, perAttempt: true, closeOpen: closeOrder}, nil
	}
	seen := payment.Status{State: payment.StateClosed}
	var toClose []string
	for _, pid := range open {
		st, err := ag.QueryAttempt(ctx, id, pid)
		if errors.Is(err, payment.ErrUnknownPayment) {
			unknown = append(unknown, pid)
			seen.State = payment.StatePending
			continue
		}
		if err != nil {
			return answer{}, err
		}
		switch st.State {
		case payment.StatePaid:
			if st.PaymentID == "" {
				st.PaymentID = pid
			}
			return answer{Status: st, perAttempt: true}, nil
		case payment.StatePending:
			seen.State = payment.StatePending
			toClose = append(toClose, pid)
		case payment.StateNotPaid:
			if seen.State != payment.StatePending {
				seen.State = payment.StateNotPaid
			}
			toClose = append(toClose, pid)
		case payment.StateClosed:
		default:
			return answer{Status: st, perAttempt: true}, nil // an unknown state: asked again later
		}
	}
	return answer{Status: seen, perAttempt: true, closeOpen: func(ctx context.Context) error {
		for _, pid := range toClose {
			if err := ag.CloseAttempt(ctx, id, pid); err != nil {
				return err
			}
		}
		return nil
	}, unknown: unknown}, nil
}

// closeSuperseded closes, best effort, the superseded attempts of an order
// at a gateway that keeps a trade per attempt, so that the buyer cannot pay
// an attempt the client abandoned. One found paid after all is recorded
// (money is never dropped). The deadline's check closes whatever is still
// open, so a failure here is only logged.
func (c *checker) closeSuperseded(id string) {
	ag, ok := c.gw.(payment.AttemptGateway)
	if !ok {
		return
	}
	c.mu.Lock()
	ctx := c.ctx
	if ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		s := c.s
		ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.GatewayTimeout)
		defer cancel()
		o, err := s.store.GetOrder(ctx, id)
		if err != nil {
			return
		}
		for _, p := range o.Payments {
			if p.Status != order.PaymentSuperseded {
				continue
			}
			err := ag.CloseAttempt(ctx, id, p.PaymentID)
			if errors.Is(err, payment.ErrAlreadyPaid) {
				var st payment.Status
				if st, err = ag.QueryAttempt(ctx, id, p.PaymentID); err == nil && st.State == payment.StatePaid {
					st.PaymentID = p.PaymentID
					_, err = s.recordPaid(ctx, id, st)
				}
			}
			if err != nil {
				s.log.Warn("close a superseded payment attempt at the gateway (best effort; the deadline's check closes it)",
					"order_id", id, "payment_id", p.PaymentID, "err", err)
			}
		}
	}()
}
