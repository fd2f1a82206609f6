package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Refunds (--auto-refund, store.Refunds): an attempt that ends
// REFUND_REQUIRED gets a refund task in the transaction that records it; a
// dispatcher claims it, asks the gateway, and settles the answer. A refund
// done moves the attempt to REFUNDED with order.refunded, and clears the
// order's refund_required once no attempt of it owes money. What is decided
// here is the order of those steps; each statement is the driver's
// (RefundExecutor).
//
// Every transaction that moves an attempt to REFUNDED (a settle's Done, an
// operator's MarkRefunded) holds the order's row first, then changes the
// refund row and the attempt: the two never wait on each other the other
// way round.

// RefundExecutor is what a driver adds for the refunds: one statement per
// method, on a transaction's executor (and, for the reads, the store's).
type RefundExecutor interface {
	// InsertRefund writes r PENDING, due at now; a refund the payment has
	// already is left as it is.
	InsertRefund(ctx context.Context, r NewRefund, now time.Time) error
	// ClaimRefunds leases up to limit PENDING refunds with next_at <= now,
	// earliest first, skipping rows other claims hold: next_at becomes
	// leaseUntil and attempts grows by one.
	ClaimRefunds(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedRefund, error)
	// SettleRefund records o on its row, as status, if the row is PENDING
	// and its attempts still the claim's (ok=false otherwise): DONE with
	// done_at = now and the refund id, or one more failure with next_at,
	// the error and, when DEAD, dead_at = now.
	SettleRefund(ctx context.Context, o store.RefundOutcome, status order.TaskStatus, now, nextAt time.Time) (ok bool, err error)
	// RecordRefunded writes r DONE at now with m's refund id, manual, note
	// and actor: the row is inserted, or whatever its status it becomes
	// DONE (dead_at cleared).
	RecordRefunded(ctx context.Context, r NewRefund, m store.MarkRefundedParams, now time.Time) error
	// RefundPayment moves the attempt (orderID, paymentID) REFUND_REQUIRED
	// → REFUNDED, updated_at = now; ok=false when it was not REFUND_REQUIRED.
	RefundPayment(ctx context.Context, orderID, paymentID string, now time.Time) (ok bool, err error)
	// ClearRefundRequired clears refund_required on the order (the caller
	// holds its row) if no attempt of it is REFUND_REQUIRED, version + 1;
	// ok=false when it was not set or an attempt still owes money.
	ClearRefundRequired(ctx context.Context, orderID string) (order.Order, bool, error)
	// GetRefund reads the refund of paymentID, or store.ErrNotFound.
	GetRefund(ctx context.Context, paymentID string) (order.Refund, error)
	// ListRefunds pages refunds in payment id order (see store.ListTasksParams).
	ListRefunds(ctx context.Context, p store.ListTasksParams) ([]order.Refund, error)
	// RetryRefunds makes the DEAD refunds p selects PENDING, due at now,
	// with no failures since now, and returns how many.
	RetryRefunds(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error)
	// RefundStats counts PENDING and DEAD refunds (Now is the caller's).
	RefundStats(ctx context.Context) (store.TaskStats, error)
}

// NewRefund is one refund to write: what the gateway is asked to give back.
type NewRefund struct {
	PaymentID   string
	OrderID     string
	AmountCents int64
	Currency    string
}

// ErrNoRefunds: the store's driver does not implement the refunds.
var ErrNoRefunds = errors.New("store: this store does not support refunds")

func refundsOf(e any) (RefundExecutor, error) {
	re, ok := e.(RefundExecutor)
	if !ok {
		return nil, ErrNoRefunds
	}
	return re, nil
}

// autoRefund writes the refund task of the attempt p that tx just recorded
// REFUND_REQUIRED for o (p.AutoRefund).
func autoRefund(ctx context.Context, tx *Tx, now time.Time, o order.Order, p store.PaymentParams) error {
	re, err := refundsOf(tx.ExecutorTx)
	if err != nil {
		return err
	}
	r := NewRefund{PaymentID: p.PaymentID, OrderID: o.ID, AmountCents: p.AmountCents, Currency: cmp.Or(p.Currency, o.Currency)}
	if err := re.InsertRefund(ctx, r, now); err != nil {
		return fmt.Errorf("write the refund of %s: %w", p.PaymentID, err)
	}
	return nil
}

// ClaimRefunds implements store.Refunds.
func (s *Store) ClaimRefunds(ctx context.Context, p store.ClaimTasksParams) ([]store.ClaimedRefund, error) {
	return claimOn(ctx, s, "refunds", p, func(r *store.ClaimedRefund) *time.Time { return &r.ClaimedAt },
		func(tx *Tx, now, leaseUntil time.Time) ([]store.ClaimedRefund, error) {
			re, err := refundsOf(tx.ExecutorTx)
			if err != nil {
				return nil, err
			}
			return re.ClaimRefunds(ctx, p.Limit, now, leaseUntil)
		})
}

// SettleRefunds implements store.Refunds: one transaction for the batch,
// its orders locked in byte order (the lock order of every batch).
func (s *Store) SettleRefunds(ctx context.Context, outcomes []store.RefundOutcome) (store.SettleRefundsResult, error) {
	var res store.SettleRefundsResult
	if len(outcomes) == 0 {
		return res, nil
	}
	outcomes = inLockOrder(outcomes, func(a, b store.RefundOutcome) int {
		return cmp.Or(cmp.Compare(a.OrderID, b.OrderID), cmp.Compare(a.PaymentID, b.PaymentID))
	})
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		res = store.SettleRefundsResult{Now: now} // fresh on every retry
		re, err := refundsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		for _, o := range outcomes {
			if !o.Done {
				ok, err := re.SettleRefund(ctx, o, refundStatus(o), now, now.Add(max(o.RetryIn, 0)))
				if err != nil {
					return fmt.Errorf("settle refund %s: %w", o.PaymentID, err)
				}
				if !ok {
					res.Stale = append(res.Stale, o.PaymentID)
				}
				continue
			}
			locked, err := tx.LockOrder(ctx, o.OrderID)
			if err != nil {
				return fmt.Errorf("settle refund %s: lock order %s: %w", o.PaymentID, o.OrderID, err)
			}
			ok, err := re.SettleRefund(ctx, o, order.TaskDone, now, now)
			if err != nil {
				return fmt.Errorf("settle refund %s: %w", o.PaymentID, err)
			}
			if !ok {
				res.Stale = append(res.Stale, o.PaymentID)
				continue
			}
			r, err := re.GetRefund(ctx, o.PaymentID)
			if err != nil {
				return fmt.Errorf("settle refund %s: %w", o.PaymentID, err)
			}
			after, moved, err := s.refundedIn(ctx, tx, re, now, locked, r)
			if err != nil {
				return fmt.Errorf("settle refund %s: %w", o.PaymentID, err)
			}
			if !moved {
				res.Conflicts = append(res.Conflicts, o.PaymentID)
				continue
			}
			res.Refunded = append(res.Refunded, after)
		}
		return nil
	})
	if err != nil {
		return store.SettleRefundsResult{}, fmt.Errorf("settle %d refunds: %w", len(outcomes), err)
	}
	return res, nil
}

// refundedIn moves the attempt of r (its refund row DONE) to REFUNDED, in
// tx holding the row of its order o: the order's refund_required is
// cleared if no attempt still owes money, and order.refunded is written.
// It returns the order as it is then; moved=false (nothing written) when
// the attempt was not REFUND_REQUIRED.
func (s *Store) refundedIn(ctx context.Context, tx *Tx, re RefundExecutor, now time.Time, o order.Order, r order.Refund) (_ order.Order, moved bool, _ error) {
	ok, err := re.RefundPayment(ctx, r.OrderID, r.PaymentID, now)
	if err != nil || !ok {
		// !ok: the refund row was PENDING while its attempt owed nothing,
		// which only a row written by hand can be. Failing the batch would
		// hold every other refund back; the row stays DONE and the audit
		// (refunds_match_attempts) reports it.
		return o, false, err
	}
	cleared, ok, err := re.ClearRefundRequired(ctx, o.ID)
	if err != nil {
		return o, false, fmt.Errorf("clear refund_required of %s: %w", o.ID, err)
	}
	if ok {
		o = cleared
	}
	if err := refundedEvent(ctx, tx, now, o, r); err != nil {
		return o, false, err
	}
	return o, true, nil
}

// refundedEvent writes order.refunded for o: the order as events carry it,
// and the money given back ("refund": the payment, its amount and currency,
// the gateway's refund id, and for an operator's refund manual, note and
// actor).
func refundedEvent(ctx context.Context, tx *Tx, now time.Time, o order.Order, r order.Refund) error {
	base, err := EventPayload(o)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefunded, err)
	}
	refund, err := json.Marshal(struct {
		PaymentID   string `json:"payment_id"`
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
		RefundID    string `json:"refund_id"`
		Manual      bool   `json:"manual"`
		Note        string `json:"note,omitempty"`
		Actor       string `json:"actor,omitempty"`
	}{r.PaymentID, r.AmountCents, r.Currency, r.RefundID, r.Manual, r.Note, r.Actor})
	if err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefunded, err)
	}
	// The payload is a JSON object: one more member before its end.
	payload := append(append(base[:len(base)-1:len(base)-1], `,"refund":`...), refund...)
	payload = append(payload, '}')
	e := Effects{Now: now, Type: order.EventRefunded, Events: []NewEvent{{ID: uuid.Must(uuid.NewV7()).String(), OrderID: o.ID, Payload: payload}}}
	if err := tx.WriteEffects(ctx, e); err != nil {
		return fmt.Errorf("write %s effects: %w", order.EventRefunded, err)
	}
	return nil
}

// refundStatus is the status a failed send leaves its refund in.
func refundStatus(o store.RefundOutcome) order.TaskStatus {
	switch {
	case o.Done:
		return order.TaskDone
	case o.Dead:
		return order.TaskDead
	}
	return order.TaskPending
}

// attemptOf reads, in tx, the order that has the attempt paymentID, holding
// its row, and the attempt.
func attemptOf(ctx context.Context, tx *Tx, paymentID string) (order.Order, order.Payment, error) {
	ids, err := tx.OrdersOfPayment(ctx, paymentID)
	switch {
	case err != nil:
		return order.Order{}, order.Payment{}, err
	case len(ids) == 0:
		return order.Order{}, order.Payment{}, store.ErrNotFound
	case len(ids) > 1:
		return order.Order{}, order.Payment{}, fmt.Errorf("orders %s and %s both have it: %w", ids[0], ids[1], store.ErrInvalid)
	}
	o, err := tx.LockOrder(ctx, ids[0])
	if err != nil {
		return o, order.Payment{}, err
	}
	if o.Payments, err = tx.Payments(ctx, o.ID); err != nil {
		return o, order.Payment{}, err
	}
	i := slices.IndexFunc(o.Payments, func(p order.Payment) bool { return p.PaymentID == paymentID })
	if i < 0 {
		return o, order.Payment{}, store.ErrNotFound
	}
	return o, o.Payments[i], nil
}

// refundOf is the refund that gives back the money of attempt p of o.
func refundOf(o order.Order, p order.Payment) NewRefund {
	return NewRefund{PaymentID: p.PaymentID, OrderID: o.ID, AmountCents: p.AmountCents, Currency: cmp.Or(p.Currency, o.Currency)}
}

// EnqueueRefund implements store.Refunds.
func (s *Store) EnqueueRefund(ctx context.Context, paymentID string) (order.Refund, error) {
	var r order.Refund
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		re, err := refundsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		o, p, err := attemptOf(ctx, tx, paymentID)
		if err != nil {
			return err
		}
		if p.Status != order.PaymentRefundRequired {
			return fmt.Errorf("attempt of order %s is %s: %w", o.ID, p.Status, store.ErrNotRefundable)
		}
		if err := re.InsertRefund(ctx, refundOf(o, p), now); err != nil {
			return err
		}
		// A refund the dispatcher gave up on is asked for again.
		if _, err := re.RetryRefunds(ctx, store.RetryTasksParams{IDs: []string{paymentID}}, now); err != nil {
			return err
		}
		r, err = re.GetRefund(ctx, paymentID)
		return err
	})
	if err != nil {
		return order.Refund{}, fmt.Errorf("enqueue refund of %s: %w", paymentID, err)
	}
	return r, nil
}

// MarkRefunded implements store.Refunds.
func (s *Store) MarkRefunded(ctx context.Context, m store.MarkRefundedParams) (order.Order, error) {
	var res order.Order
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		re, err := refundsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		o, p, err := attemptOf(ctx, tx, m.PaymentID)
		if err != nil {
			return err
		}
		switch p.Status {
		case order.PaymentRefunded:
			res = o
			return nil // recorded before: the same answer, nothing written
		case order.PaymentRefundRequired:
		default:
			return fmt.Errorf("attempt of order %s is %s: %w", o.ID, p.Status, store.ErrNotRefundable)
		}
		nr := refundOf(o, p)
		if err := re.RecordRefunded(ctx, nr, m, now); err != nil {
			return fmt.Errorf("record the refund: %w", err)
		}
		r := order.Refund{PaymentID: nr.PaymentID, OrderID: nr.OrderID, AmountCents: nr.AmountCents, Currency: nr.Currency,
			Status: order.TaskDone, RefundID: m.RefundID, Manual: m.Manual, Note: m.Note, Actor: m.Actor}
		o.Payments = nil
		out, moved, err := s.refundedIn(ctx, tx, re, now, o, r)
		if err == nil && !moved {
			err = fmt.Errorf("order changed while locked")
		}
		if err != nil {
			return err
		}
		if out.Payments, err = tx.Payments(ctx, o.ID); err != nil {
			return err
		}
		res = out
		return nil
	})
	if err != nil {
		return order.Order{}, fmt.Errorf("mark payment %s refunded: %w", m.PaymentID, err)
	}
	return res, nil
}

// ListRefunds implements store.Refunds.
func (s *Store) ListRefunds(ctx context.Context, p store.ListTasksParams) ([]order.Refund, error) {
	re, err := refundsOf(s.d)
	if err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	out, err := re.ListRefunds(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	return out, nil
}

// RetryRefunds implements store.Refunds.
func (s *Store) RetryRefunds(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	if len(p.IDs) == 0 && !p.AllDead {
		return 0, nil
	}
	var n int64
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		re, err := refundsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		n, err = re.RetryRefunds(ctx, p, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retry refunds: %w", err)
	}
	return n, nil
}

// RefundStats implements store.Refunds.
func (s *Store) RefundStats(ctx context.Context) (store.TaskStats, error) {
	re, err := refundsOf(s.d)
	if err != nil {
		return store.TaskStats{}, err
	}
	return s.stats(ctx, "refund", re.RefundStats)
}
