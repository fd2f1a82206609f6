// Package refund gives money back by itself (--auto-refund): a payment
// attempt that ends REFUND_REQUIRED — a success for an order already
// cancelled, a second success for a paid one, a wrong amount or currency —
// gets a refund task in the transaction that records it (store.Refunds),
// and the Dispatcher here asks the gateway to refund it
// (payment.Refunder), with a key derived from the attempt
// (payment.RefundKey), until the gateway has: the attempt is then REFUNDED,
// order.refunded is written, and the order's refund_required clears once no
// attempt of it still owes money.
//
// A crash or a gateway outage never loses or doubles a refund: the task is
// a row, claimed with a lease; a dispatcher that dies between asking and
// recording leaves the lease to run out, and the refund is asked again with
// the same key, which the gateway answers with the refund it made.
package refund

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lapsehq/lapse/internal/drain"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Dispatcher sends the refund tasks the store holds to the gateway: claim
// a batch with a lease, refund each, settle. Any number of instances run
// one over the same store.
//
// A refund the gateway answers finally — it does not know the payment
// (payment.ErrUnknownPayment), holds no money of it
// (payment.ErrNotRefundable), refunds only whole payments
// (payment.ErrPartialRefund), took the refund and failed it
// (payment.ErrRefundFailed), or refunded another amount than asked — is
// DEAD at once: a person looks at it (`lapse refunds list --dead`), then
// retries it or marks it refunded by hand. Any other failure is retried
// with jittered exponential backoff, and is DEAD after MaxAttempts
// failures or MaxAge. A refund the gateway is still processing
// (payment.RefundPending) is asked again after PendingRetry, with the same
// key, until it answers its final state.
type Dispatcher struct {
	Store    store.Refunds
	Refunder payment.Refunder
	Config

	wake drain.Wake
}

// Config tunes a Dispatcher; the zero value takes every default.
type Config struct {
	// Workers is how many batches an instance has in flight. Defaults to 1.
	Workers int
	// BatchSize is the most refunds claimed at once. Defaults to 20.
	BatchSize int
	// Concurrency bounds the refunds of one batch in flight at once: a
	// gateway rate-limits its refund API. Defaults to 4.
	Concurrency int
	// Interval is how often an idle dispatcher looks for refunds other
	// instances committed. Defaults to 1 s.
	Interval time.Duration
	// Lease is how long a claim holds its refunds. Defaults to 60 s.
	Lease time.Duration
	// SendTimeout bounds one refund's round trip. Defaults to 20 s.
	SendTimeout time.Duration
	// MaxAttempts and MaxAge: a refund failing that often, or that long
	// since it was written or retried, is DEAD. Defaults 20 and 72 h.
	MaxAttempts int
	MaxAge      time.Duration
	// RetryBase and RetryMax bound the backoff. Defaults 2 s and 10 min.
	RetryBase, RetryMax time.Duration
	// PendingRetry is when a refund the gateway is processing is asked
	// again. Defaults to 1 min.
	PendingRetry time.Duration
	Logger       *slog.Logger
	// Metrics, when set, counts the outcomes.
	Metrics *Metrics
	// OnSettled, when set, hears each settle (the service wakes its relay
	// for the order.refunded events).
	OnSettled func(store.SettleRefundsResult)
}

func (c *Config) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 20
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 20
	}
	def(&c.Interval, time.Second)
	def(&c.Lease, time.Minute)
	def(&c.SendTimeout, 20*time.Second)
	def(&c.MaxAge, 72*time.Hour)
	def(&c.RetryBase, 2*time.Second)
	def(&c.RetryMax, 10*time.Minute)
	def(&c.PendingRetry, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Notify wakes the dispatcher: a refund task was just committed. It never
// blocks.
func (d *Dispatcher) Notify() { d.wake.Notify() }

// Run dispatches until ctx ends, then makes a last bounded pass.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.Store == nil || d.Refunder == nil {
		return errors.New("refund: a Dispatcher needs a Store and a Refunder")
	}
	d.setDefaults()
	drain.Dispatch{Name: "refund", What: "refund", Logger: d.Logger, Workers: d.Workers,
		Loop: drain.Loop{Batch: d.BatchSize, Interval: d.Interval, Linger: time.Millisecond, Wake: d.wake.C()}}.Run(ctx, d.pass)
	return nil
}

// pass claims one batch, refunds each concurrently and settles the batch.
func (d *Dispatcher) pass(ctx context.Context) (drain.Pass, error) {
	start := time.Now()
	rs, err := d.Store.ClaimRefunds(ctx, store.ClaimTasksParams{Limit: d.BatchSize, Lease: d.Lease})
	if err != nil || len(rs) == 0 {
		return drain.Pass{}, err
	}
	results, errs := drain.SendAll(ctx, drain.Sending{Lease: d.Lease, Timeout: d.SendTimeout, Concurrency: d.Concurrency}, start, rs,
		func(ctx context.Context, r store.ClaimedRefund) (payment.RefundResult, error) {
			return d.Refunder.Refund(ctx, Request(r))
		})
	outcomes := make([]store.RefundOutcome, len(rs))
	done := 0
	for i, r := range rs {
		o := d.outcome(r, results[i], errs[i])
		outcomes[i] = o
		switch {
		case o.Done:
			done++
		case o.Dead:
			d.Logger.Error("refund: a refund is DEAD; a person must look at it (lapse refunds list --dead, then retry it or mark it refunded)",
				"payment_id", r.PaymentID, "order_id", r.OrderID, "amount_cents", r.AmountCents, "currency", r.Currency,
				"attempts", r.Attempts, "err", o.Error)
		default:
			d.Logger.Warn("refund: not refunded yet; asking again later", "payment_id", r.PaymentID, "order_id", r.OrderID,
				"retry_in", o.RetryIn, "err", o.Error)
		}
	}
	res, err := drain.Settle(ctx, func(ctx context.Context) (store.SettleRefundsResult, error) {
		return d.Store.SettleRefunds(ctx, outcomes)
	})
	if err != nil {
		// The refunds made go again when the lease runs out, with the
		// same keys: the gateway answers the refund it made. Never a
		// second refund.
		return drain.Pass{Claimed: len(rs)}, err
	}
	if d.Metrics != nil {
		d.Metrics.observe(outcomes, res)
	}
	if d.OnSettled != nil {
		d.OnSettled(res)
	}
	for _, id := range res.Conflicts {
		d.Logger.Error("refund: refunded at the gateway, but the attempt did not owe money in lapse's record; left for the audit", "payment_id", id)
	}
	return drain.Pass{Claimed: len(rs), Failed: done == 0}, nil
}

// Request is the gateway refund of a claimed refund task: the attempt's
// whole amount, in its currency, keyed by the attempt.
func Request(r store.ClaimedRefund) payment.Refund {
	return payment.Refund{OrderID: r.OrderID, PaymentID: r.PaymentID, AmountCents: r.AmountCents, Currency: r.Currency,
		Key: payment.RefundKey(r.PaymentID), Reason: "lapse: the payment did not pay its order"}
}

// final are the gateway's answers that asking again with the same key
// cannot change: a person decides.
var final = []error{payment.ErrUnknownPayment, payment.ErrNotRefundable, payment.ErrPartialRefund, payment.ErrRefundFailed}

// outcome decides what becomes of r after the gateway answered res (err
// nil) or the refund failed with err.
func (d *Dispatcher) outcome(r store.ClaimedRefund, res payment.RefundResult, err error) store.RefundOutcome {
	o := store.RefundOutcome{PaymentID: r.PaymentID, OrderID: r.OrderID, Attempts: r.Attempts}
	retry := drain.Retry{MaxAttempts: d.MaxAttempts, MaxAge: d.MaxAge, Base: d.RetryBase, Max: d.RetryMax}
	age := r.ClaimedAt.Sub(r.Since)
	switch {
	case err != nil:
		f := retry.Failed(err, slices.ContainsFunc(final, func(f error) bool { return errors.Is(err, f) }), r.Failures, r.Since, r.ClaimedAt)
		o.Error, o.Dead, o.RetryIn = f.Error, f.Dead, f.RetryIn
	case res.AmountCents != 0 && (res.AmountCents != r.AmountCents || (res.Currency != "" && r.Currency != "" && res.Currency != r.Currency)):
		o.Error = fmt.Sprintf("the gateway answered a refund of %d %s (refund %s), not the %d %s asked", res.AmountCents, res.Currency, res.RefundID, r.AmountCents, r.Currency)
		o.Dead = true
	case res.State == payment.RefundSucceeded:
		o.Done, o.RefundID = true, res.RefundID
	case res.State == payment.RefundPending:
		o.Error = "the gateway is processing the refund " + res.RefundID
		_, o.Dead = retry.After(r.Failures+1, age)
		o.RetryIn = d.PendingRetry
	default:
		o.Error = fmt.Sprintf("the gateway answered the refund in state %q", res.State)
		o.RetryIn, o.Dead = retry.After(r.Failures+1, age)
	}
	return o
}
