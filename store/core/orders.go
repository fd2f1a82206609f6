package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// CreateOrder implements store.Orders. Concurrent calls are committed
// together in groups (group.go) unless Config.CreateGroup is 1.
func (s *Store) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	p.Items = store.ItemsBySKU(p.Items)
	// A create whose stock a remote inventory holds locks no SKU row: a
	// lone transaction is all it needs (as does a create that may only
	// replay).
	if s.groups != nil && p.ReservationID == "" && p.ReplayOnly == nil {
		return s.groups.create(ctx, p)
	}
	return s.createOne(ctx, p)
}

// createOne creates one order in a transaction of its own.
func (s *Store) createOne(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	var res store.CreateOrderResult
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		var err error
		res, err = s.createIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("create order %s: %w", p.ID, err)
	}
	return res, nil
}

// createIn creates one order (items in SKU order) in tx; an error leaves tx
// to be rolled back, or rolled back to a savepoint taken before (in a
// caller's transaction, a create sent in one round trip has undone itself
// already). The checks come in the order Admit applies them to a group: the
// idempotency key, the order id, then the stock of each SKU in byte order. A
// driver that sends a whole create at once has Admit decide from what its
// statement found (createSent); a create that may only replay takes the
// steps below, which stop after the key.
func (s *Store) createIn(ctx context.Context, tx *Tx, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	if ce, ok := tx.ExecutorTx.(CreateExecutor); ok && p.ReplayOnly == nil {
		return s.createSent(ctx, tx, ce, p)
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return store.CreateOrderResult{}, err
	}
	o := p.NewOrder(now)
	if p.IdempotencyKey != "" {
		// The key goes first: a concurrent request with the same key waits
		// here until this transaction ends, then finds the key and replays.
		claimed, err := tx.ClaimKey(ctx, Key{Key: p.IdempotencyKey, RequestHash: p.RequestHash, OrderID: o.ID}, now)
		if err != nil {
			return store.CreateOrderResult{}, fmt.Errorf("idempotency key: %w", err)
		}
		if !claimed {
			return s.replayKey(ctx, tx, p)
		}
	}
	if p.ReplayOnly != nil {
		return store.CreateOrderResult{}, p.ReplayOnly
	}
	if err := tx.InsertOrder(ctx, o); err != nil {
		if errors.Is(err, store.ErrOrderExists) {
			return store.CreateOrderResult{}, err
		}
		return store.CreateOrderResult{}, fmt.Errorf("insert order: %w", err)
	}
	for _, it := range o.Items {
		if o.RemoteStock() {
			break
		}
		ok, err := tx.ReserveSKU(ctx, it.SKU, it.Qty, now)
		if err != nil {
			return store.CreateOrderResult{}, fmt.Errorf("reserve %s: %w", it.SKU, err)
		}
		if !ok {
			return store.CreateOrderResult{}, shortOf(it.SKU)
		}
	}
	if err := s.effects(ctx, tx, now, MoveReserve, order.EventCreated, o); err != nil {
		return store.CreateOrderResult{}, err
	}
	return store.CreateOrderResult{Order: o}, nil
}

// replayKey answers a create whose idempotency key another request took:
// that request's order, or ErrIdempotencyMismatch for a different request.
func (s *Store) replayKey(ctx context.Context, tx *Tx, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	hash, id, err := tx.KeyOwner(ctx, p.IdempotencyKey)
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("idempotency key: %w", err)
	}
	if hash != p.RequestHash {
		return store.CreateOrderResult{}, store.ErrIdempotencyMismatch
	}
	existing, err := getOrder(ctx, tx, id)
	if err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("load order %s of idempotency key: %w", id, err)
	}
	return store.CreateOrderResult{Order: existing, Replayed: true}, nil
}

// shortOf is the refusal of an order for want of sku.
func shortOf(sku string) error {
	return fmt.Errorf("%w: sku %q", store.ErrInsufficientStock, sku)
}

// getOrder reads one order, or store.ErrNotFound.
func getOrder(ctx context.Context, e Executor, id string) (order.Order, error) {
	os, err := e.Orders(ctx, []string{id})
	if err != nil {
		return order.Order{}, err
	}
	if len(os) == 0 {
		return order.Order{}, store.ErrNotFound
	}
	return os[0], nil
}

// GetOrder implements store.Orders: the order, then its payment attempts.
func (s *Store) GetOrder(ctx context.Context, id string) (order.Order, error) {
	o, err := getOrder(ctx, s.d, id)
	if err == nil {
		o.Payments, err = s.d.Payments(ctx, id)
	}
	if err == nil {
		err = s.orderTasks(ctx, &o)
	}
	if err == nil {
		err = s.orderCommands(ctx, &o)
	}
	if err != nil {
		return order.Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	if o.Payments == nil {
		o.Payments = []order.Payment{}
	}
	return o, nil
}

// ListOrders implements store.Orders.
func (s *Store) ListOrders(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	a := ListArgs{Status: p.Status, First: true, Limit: p.Limit}
	if a.Limit <= 0 {
		a.Limit = 50
	}
	if p.Cursor != "" {
		c, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			return store.ListOrdersResult{}, err
		}
		a.First, a.AfterCreated, a.AfterID = false, c, id
	}
	limit := a.Limit
	a.Limit++ // one more tells whether another page follows
	os, err := s.d.ListOrders(ctx, a)
	if err != nil {
		return store.ListOrdersResult{}, fmt.Errorf("list orders: %w", err)
	}
	return store.Page(os, limit), nil
}

// StartPayment implements store.Orders.
func (s *Store) StartPayment(ctx context.Context, p store.StartPaymentParams) (order.Order, error) {
	var o order.Order
	err := s.payTx(ctx, func(ctx context.Context, tx *Tx) (err error) {
		o, err = s.startPaymentIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return o, fmt.Errorf("start payment %s: %w", p.OrderID, err)
	}
	return o, nil
}

// startPaymentIn is StartPayment in tx.
func (s *Store) startPaymentIn(ctx context.Context, tx *Tx, p store.StartPaymentParams) (o order.Order, err error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return o, err
	}
	for range 2 {
		var ok bool
		if o, ok, err = tx.StartPayment(ctx, p.OrderID, p.PaymentID, now); err != nil {
			return o, err
		}
		if ok {
			return o, tx.InsertPayment(ctx, o.ID, order.Payment{PaymentID: o.PaymentID, Status: order.PaymentPending, CreatedAt: now, UpdatedAt: now})
		}
		// The update matched nothing: say why, from the row as it is
		// now, held so that a second UPDATE cannot lose again.
		if o, err = tx.LockOrder(ctx, p.OrderID); err != nil {
			return o, err
		}
		switch err := explainStartMiss(o, now); {
		case errors.Is(err, errTryAgain):
			continue
		case err != nil:
			return o, err
		}
		// PAYING already.
		if p.PaymentID == "" || p.PaymentID == o.PaymentID {
			return o, nil // the same attempt asked again
		}
		o, err = s.supersede(ctx, tx, o, p.PaymentID, now)
		return o, err
	}
	return o, fmt.Errorf("order changed while locked")
}

// supersede makes paymentID the current attempt of the PAYING order o
// (locked): the attempt it replaces is SUPERSEDED — still open at the
// gateway until closed there, so its success would still be money.
func (s *Store) supersede(ctx context.Context, tx *Tx, o order.Order, paymentID string, now time.Time) (order.Order, error) {
	if !o.ExpiresAt.After(now) {
		return o, store.ErrOrderExpired // a new attempt needs the buyer's window open
	}
	next, ok, err := tx.SupersedePayment(ctx, o.ID, o.PaymentID, paymentID, now)
	if err != nil {
		return o, err
	}
	if !ok {
		return o, fmt.Errorf("order changed while locked")
	}
	if o.PaymentID != "" {
		if _, err := tx.EndPayment(ctx, o.ID, o.PaymentID, order.PaymentSuperseded, now); err != nil {
			return o, fmt.Errorf("supersede payment %s: %w", o.PaymentID, err)
		}
	}
	return next, tx.InsertPayment(ctx, o.ID, order.Payment{PaymentID: paymentID, Status: order.PaymentPending, CreatedAt: now, UpdatedAt: now})
}

// replay records a callback id and, when it was applied before (a replay:
// the transaction then changes nothing), answers with the order as it is. A
// report without a callback id (learnt by a gateway query) is never a replay.
func (s *Store) replay(ctx context.Context, tx *Tx, p store.PaymentParams) (store.PaymentResult, bool, error) {
	if p.CallbackID == "" {
		return store.PaymentResult{}, false, nil
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return store.PaymentResult{}, false, err
	}
	first, err := tx.SeeCallback(ctx, p.CallbackID, p.OrderID, now, now.Add(-store.CallbackMemory))
	if err != nil || first {
		if err != nil {
			err = fmt.Errorf("record callback id: %w", err)
		}
		return store.PaymentResult{}, false, err
	}
	o, err := getOrder(ctx, tx, p.OrderID)
	return store.PaymentResult{Order: o, Outcome: store.OutcomeReplayed}, true, err
}

// CompletePayment implements store.Orders. Concurrent payment starts and
// reports are committed together in groups (paygroup.go) unless
// Config.PaymentGroup is 1.
func (s *Store) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	var res store.PaymentResult
	err := s.payTx(ctx, func(ctx context.Context, tx *Tx) (err error) {
		res, err = s.completePaymentIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("complete payment of %s: %w", p.OrderID, err)
	}
	return res, nil
}

// completePaymentIn is CompletePayment in tx.
func (s *Store) completePaymentIn(ctx context.Context, tx *Tx, p store.PaymentParams) (res store.PaymentResult, err error) {
	r, replayed, err := s.replay(ctx, tx, p)
	if res = r; err != nil || replayed {
		return res, err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return res, err
	}
	done := order.Payment{PaymentID: p.PaymentID, Status: order.PaymentSucceeded, AmountCents: p.AmountCents,
		Currency: p.Currency, CreatedAt: now, UpdatedAt: now}
	if o, ok, err := tx.MarkPaid(ctx, p, now); err != nil || ok {
		if err == nil {
			res, err = s.paid(ctx, tx, now, o, done)
		}
		return res, err
	}
	// It did not pay the order. Decide from the order as it is, held.
	o, err := tx.LockOrder(ctx, p.OrderID)
	if err != nil {
		return res, err
	}
	ps, err := tx.Payments(ctx, o.ID)
	if err != nil {
		return res, err
	}
	done.Currency = cmp.Or(p.Currency, o.Currency)
	res = store.PaymentResult{Order: o, Outcome: store.OutcomeNoChange}
	switch decideSuccess(o, ps, p) {
	case successAgain:
		return res, nil
	case successConflict:
		res.Outcome = store.OutcomeConflict
		return res, tx.NoteConflict(ctx, o.ID, p.PaymentID)
	case successPays:
		// Money for an attempt other than the open one: it pays, and
		// the open attempt is superseded (closed at the gateway next).
		superseded := false
		for _, q := range ps {
			if q.Status == order.PaymentPending && q.PaymentID != p.PaymentID {
				if _, err := tx.EndPayment(ctx, o.ID, q.PaymentID, order.PaymentSuperseded, now); err != nil {
					return res, fmt.Errorf("supersede payment %s: %w", q.PaymentID, err)
				}
				superseded = true
			}
		}
		o, ok, err := tx.MarkPaid(ctx, p, now)
		if err == nil && !ok {
			err = fmt.Errorf("order changed while locked")
		}
		if err == nil {
			res, err = s.paid(ctx, tx, now, o, done)
			res.Superseded = superseded
		}
		return res, err
	}
	// Money to give back: the attempt ends REFUND_REQUIRED (and, the
	// current attempt of a PAYING order, the order is PENDING again).
	done.Status = order.PaymentRefundRequired
	if err := tx.SavePayment(ctx, o.ID, done); err != nil {
		return res, err
	}
	o, ok, err := tx.FlagRefund(ctx, o.ID, p.PaymentID, now)
	if err == nil && !ok {
		err = fmt.Errorf("order changed while locked")
	}
	if err != nil {
		return res, err
	}
	res = store.PaymentResult{Order: o, Outcome: store.OutcomeRefundRequired}
	if err := s.refundEvent(ctx, tx, now, o, p); err != nil {
		return res, err
	}
	if p.AutoRefund {
		if err := autoRefund(ctx, tx, now, o, p); err != nil {
			return res, err
		}
	}
	return res, s.hook(ctx, tx, store.HookRefundRequired, false, o)
}

// paid records the attempt that paid o (just marked PAID) and the stock
// and event that follow.
func (s *Store) paid(ctx context.Context, tx *Tx, now time.Time, o order.Order, done order.Payment) (store.PaymentResult, error) {
	done.Currency = cmp.Or(done.Currency, o.Currency)
	if err := tx.SavePayment(ctx, o.ID, done); err != nil {
		return store.PaymentResult{}, err
	}
	if err := s.effects(ctx, tx, now, MoveCommit, order.EventPaid, o); err != nil {
		return store.PaymentResult{}, err
	}
	if err := s.hook(ctx, tx, store.HookPaid, false, o); err != nil {
		return store.PaymentResult{}, err
	}
	return store.PaymentResult{Order: o, Outcome: store.OutcomePaid}, nil
}

// FailPayment implements store.Orders. Without a callback id it reads no clock.
func (s *Store) FailPayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	var res store.PaymentResult
	err := s.payTx(ctx, func(ctx context.Context, tx *Tx) (err error) {
		res, err = s.failPaymentIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("fail payment of %s: %w", p.OrderID, err)
	}
	return res, nil
}

// failPaymentIn is FailPayment in tx.
func (s *Store) failPaymentIn(ctx context.Context, tx *Tx, p store.PaymentParams) (res store.PaymentResult, err error) {
	r, replayed, err := s.replay(ctx, tx, p)
	if res = r; err != nil || replayed {
		return res, err
	}
	o, ok, err := tx.FailPayment(ctx, p.OrderID, p.PaymentID)
	if err != nil {
		return res, err
	}
	res = store.PaymentResult{Order: o, Outcome: store.OutcomeFailed}
	if !ok {
		// Not the current attempt: recorded on the attempt, if open,
		// and nothing else moves.
		if o, err = getOrder(ctx, tx, p.OrderID); err != nil {
			return res, err
		}
		res = store.PaymentResult{Order: o, Outcome: store.OutcomeNoChange}
	}
	if p.PaymentID == "" {
		return res, nil
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return res, err
	}
	if ended, err := tx.EndPayment(ctx, p.OrderID, p.PaymentID, order.PaymentFailed, now); err != nil || ended || ok {
		return res, err
	}
	// Nothing open by that id: a FAILED of an attempt that has ended
	// (paid, or money to give back) is a conflict.
	ps, err := tx.Payments(ctx, p.OrderID)
	if err != nil {
		return res, err
	}
	if i := slices.IndexFunc(ps, func(x order.Payment) bool { return x.PaymentID == p.PaymentID }); i >= 0 && ps[i].Status.Ended() {
		res.Outcome = store.OutcomeConflict
		return res, tx.NoteConflict(ctx, p.OrderID, p.PaymentID)
	}
	return res, nil
}

// CancelOrder implements store.Orders.
func (s *Store) CancelOrder(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) (err error) {
		o, err = s.cancelOrderIn(ctx, tx, id)
		return err
	})
	if err != nil {
		return o, fmt.Errorf("cancel order %s: %w", id, err)
	}
	return o, nil
}

// cancelOrderIn is CancelOrder in tx.
func (s *Store) cancelOrderIn(ctx context.Context, tx *Tx, id string) (o order.Order, err error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return o, err
	}
	for range 2 {
		var ok bool
		if o, ok, err = tx.BuyerCancel(ctx, id, now); err != nil {
			return o, err
		}
		if ok {
			if err := s.effects(ctx, tx, now, MoveRelease, order.EventCancelled, o); err != nil {
				return o, err
			}
			return o, s.hook(ctx, tx, store.HookCancelled, false, o)
		}
		if o, err = tx.LockOrder(ctx, id); err != nil {
			return o, err
		}
		if o.Status != order.Pending {
			return o, store.ErrNotPending
		}
		// PENDING again (a failed payment put it back after the UPDATE
		// looked): locked now, so the next UPDATE decides.
	}
	return o, fmt.Errorf("order changed while locked")
}

// CancelDue implements store.Orders: one transaction per batch, one UPDATE
// deciding which orders it cancels, then the ledger, counters and events of
// exactly those orders, set-based. The skipped orders are read before the
// effects are written, so that the effects are the transaction's last write
// and a driver can send them with the COMMIT (effectsAtCommit).
//
// An OnCancelled hook (hooks.go) that fails for one order rolls the batch
// back; the batch then runs again without that order — the orders a claim
// took, named — and the order is reported in HookFailed, still due.
func (s *Store) CancelDue(ctx context.Context, p store.CancelDueParams) (store.CancelDueResult, error) {
	var failed []*store.HookError
	oneByOne := false
	for {
		res, took, err := s.cancelDueOnce(ctx, p, oneByOne)
		if errors.As(err, new(errBatchHook)) && !oneByOne {
			// The batch hook failed for some order: find which, one by one.
			oneByOne = true
			if len(p.IDs) == 0 {
				p.IDs, p.Claim = took, 0
			}
			continue
		}
		he, ok := hookFailed(err)
		if !ok {
			res.HookFailed = failed
			return res, err
		}
		oneByOne = false
		failed = append(failed, he)
		if len(p.IDs) == 0 {
			p.IDs, p.Claim = took, 0 // the claim's orders, now named
		}
		if p.IDs = without(p.IDs, he.OrderID); len(p.IDs) == 0 {
			return store.CancelDueResult{HookFailed: failed}, nil
		}
	}
}

// cancelDueOnce is one transaction of CancelDue; took is the orders it
// cancelled before a hook failed (those of a claim, to run again by name).
func (s *Store) cancelDueOnce(ctx context.Context, p store.CancelDueParams, oneByOne bool) (res store.CancelDueResult, took []string, err error) {
	if len(p.IDs) == 0 && p.Claim <= 0 {
		return store.CancelDueResult{}, nil, nil
	}
	if err := checkReason(p); err != nil {
		return store.CancelDueResult{}, nil, err
	}
	ids := unique(p.IDs)
	sorted := slices.Sorted(slices.Values(ids)) // the lock order of the batch
	err = s.withTx(ctx, TxOptions{Urgent: true}, func(tx *Tx) error {
		if p.Command {
			return s.commandDueIn(ctx, tx, ids, sorted, p, &res)
		}
		done, now, err := s.cancelDue(ctx, tx, sorted, p)
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		if err := s.hook(ctx, tx, store.HookCancelled, oneByOne, done...); err != nil {
			took = orderIDs(done) // only a failed hook's rerun needs them
			return err
		}
		res = store.CancelDueResult{Now: now, Cancelled: cancelledRows(done)} // fresh on every retry
		if rest := notIn(ids, done); len(rest) > 0 {
			others, err := tx.Orders(ctx, rest)
			if err != nil {
				return fmt.Errorf("read skipped: %w", err)
			}
			res.Skipped = skippedRows(rest, others)
		}
		if p.Confirmed {
			if err := endOpenAttempts(ctx, tx, done, now); err != nil {
				return err
			}
		}
		held := s.hooks != nil && s.hooks.Has(store.HookCancelled)
		return s.effectsAtCommit(ctx, tx, now, MoveRelease, order.EventCancelled, p.Why, held, done...)
	})
	if err != nil {
		if len(p.IDs) == 0 {
			return store.CancelDueResult{}, took, fmt.Errorf("cancel due claim of %d: %w", p.Claim, err)
		}
		return store.CancelDueResult{}, took, fmt.Errorf("cancel due batch of %d: %w", len(p.IDs), err)
	}
	return res, took, nil
}

// checkReason refuses a reason CancelDue does not write, or an operator's
// cancel asked of anything but named orders whose trades are closed
// (store.CancelDueParams.Reason).
func checkReason(p store.CancelDueParams) error {
	switch p.Reason {
	case "", order.ReasonTimeout:
		return nil
	case order.ReasonOperator:
		if len(p.IDs) == 0 || !p.Confirmed || p.Command {
			return fmt.Errorf("an operator's cancel takes named orders, confirmed, never commanded: %w", store.ErrInvalid)
		}
		return nil
	}
	return fmt.Errorf("cancel reason %q: %w", p.Reason, store.ErrInvalid)
}

// cancelArgs is the executor's CancelArgs of a batch (ids in byte order).
func cancelArgs(sorted []string, now time.Time, p store.CancelDueParams) CancelArgs {
	reason := p.Reason
	if reason == "" {
		reason = order.ReasonTimeout
	}
	return CancelArgs{IDs: sorted, Now: now, SkipAttempted: p.SkipAttempted, Confirmed: p.Confirmed,
		Reason: reason, Anytime: reason == order.ReasonOperator}
}

// commandDueIn is one transaction of CancelDue in order-service mode: the
// due orders move to CANCELLING with their commands written (Cancelled
// lists them); no stock moves and no event is written — the answer's
// transition writes them. No hook runs: the order service is not embedded.
func (s *Store) commandDueIn(ctx context.Context, tx *Tx, ids, sorted []string, p store.CancelDueParams, res *store.CancelDueResult) error {
	done, claimed, now, err := s.commandDue(ctx, tx, sorted, p)
	if err != nil {
		return fmt.Errorf("command: %w", err)
	}
	*res = store.CancelDueResult{Now: now, Cancelled: cancelledRows(done), Commands: claimed}
	if rest := notIn(ids, done); len(rest) > 0 {
		others, err := tx.Orders(ctx, rest)
		if err != nil {
			return fmt.Errorf("read skipped: %w", err)
		}
		res.Skipped = skippedRows(rest, others)
	}
	if p.Confirmed {
		return endOpenAttempts(ctx, tx, done, now)
	}
	return nil
}

// endOpenAttempts records the open attempts of orders a confirmed cancel
// took as FAILED: the gateway answered each of them not paid and closed it
// (or closed already), so none is left PENDING on a CANCELLED order. Only the
// gateway check confirms, one order at a time: a read per order is cheap.
func endOpenAttempts(ctx context.Context, tx *Tx, done []order.Order, now time.Time) error {
	for _, o := range done {
		ps, err := tx.Payments(ctx, o.ID)
		if err != nil {
			return fmt.Errorf("read attempts of %s: %w", o.ID, err)
		}
		for _, p := range ps {
			if p.Status != order.PaymentPending && p.Status != order.PaymentSuperseded {
				continue
			}
			if _, err := tx.EndPayment(ctx, o.ID, p.PaymentID, order.PaymentFailed, now); err != nil {
				return fmt.Errorf("end attempt %s of %s: %w", p.PaymentID, o.ID, err)
			}
		}
	}
	return nil
}

// cancelDue runs the UPDATE that decides which orders of the batch (ids in
// byte order; none: a claim of p.Claim) are cancelled, and returns them with
// the transaction's now. With the database's clock and a driver whose
// statement can read it (DueClockExecutor), the clock is read by that
// statement: the same guard against the same clock, one round trip fewer.
func (s *Store) cancelDue(ctx context.Context, tx *Tx, sorted []string, p store.CancelDueParams) ([]order.Order, time.Time, error) {
	if dc, ok := tx.ExecutorTx.(DueClockExecutor); ok && s.clock == nil && tx.now.IsZero() {
		var done []order.Order
		var now time.Time
		var err error
		if len(sorted) > 0 {
			done, now, err = dc.CancelDueClocked(ctx, cancelArgs(sorted, time.Time{}, p))
		} else {
			done, now, err = dc.ClaimDueClocked(ctx, ClaimArgs{Lag: max(p.Lag, 0), Limit: p.Claim, SkipAttempted: p.SkipAttempted})
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		tx.now = now
		return done, now, nil
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	var done []order.Order
	if len(sorted) > 0 {
		done, err = tx.CancelDue(ctx, cancelArgs(sorted, now, p))
	} else {
		done, err = tx.ClaimDue(ctx, ClaimArgs{Now: now, DueBy: dueBy(now, p.Lag), Limit: p.Claim, SkipAttempted: p.SkipAttempted})
	}
	return done, now, err
}

// dueBy is the latest cancel_after a claim with lag takes: now - lag, and
// never later than now, whatever lag says — a timer may fire early, an
// order is never cancelled before its cancel_after.
func dueBy(now time.Time, lag time.Duration) time.Time {
	return now.Add(-max(lag, 0))
}

// PaymentChecks implements store.Orders.
func (s *Store) PaymentChecks(ctx context.Context, lag time.Duration, limit int) ([]store.Deadline, error) {
	now, err := s.nowOn(ctx, s.d)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	out, err := s.d.PaymentChecks(ctx, dueBy(now, lag), limit)
	if err != nil {
		return nil, fmt.Errorf("payment checks: %w", err)
	}
	return out, nil
}

// NextDeadline implements store.Orders.
func (s *Store) NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error) {
	t, ok, err := s.d.NextDeadline(ctx, skipAttempted)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next deadline: %w", err)
	}
	return t, ok, nil
}

// PendingDeadlines implements store.Orders.
func (s *Store) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	out, err := s.d.PendingDeadlines(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("pending deadlines: %w", err)
	}
	return out, nil
}

// CountStuck implements store.Orders.
func (s *Store) CountStuck(ctx context.Context) (int64, error) {
	now, err := s.nowOn(ctx, s.d)
	if err == nil {
		var n int64
		if n, err = s.d.CountStuck(ctx, now); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("count stuck payments: %w", err)
}

// OrderOfPayment implements store.Orders.
func (s *Store) OrderOfPayment(ctx context.Context, paymentID string) (string, error) {
	ids, err := s.d.OrdersOfPayment(ctx, paymentID)
	switch {
	case err != nil:
		return "", fmt.Errorf("order of payment %s: %w", paymentID, err)
	case len(ids) == 0:
		return "", fmt.Errorf("order of payment %s: %w", paymentID, store.ErrNotFound)
	case len(ids) > 1:
		return "", fmt.Errorf("order of payment %s: orders %s and %s both have it: %w", paymentID, ids[0], ids[1], store.ErrInvalid)
	}
	return ids[0], nil
}

// Extend implements store.Orders: extendIn in a transaction of its own.
func (s *Store) Extend(ctx context.Context, p store.ExtendParams) (order.Order, error) {
	var o order.Order
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		var err error
		o, err = s.extendIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return o, fmt.Errorf("extend order %s: %w", p.OrderID, err)
	}
	return o, nil
}

// extendIn moves the deadline of a PENDING order whose expires_at is still
// ahead, in tx, with its order.extended event: one guarded UPDATE decides,
// so a timeout cancel at the deadline and an extend never both win (the
// cancel needs cancel_after <= now, the extend expires_at > now, and
// cancel_after >= expires_at). A window that has closed stays closed: in
// its grace the order's timer may be cancelling it at this moment. An
// error leaves tx to be rolled back.
func (s *Store) extendIn(ctx context.Context, tx *Tx, p store.ExtendParams) (order.Order, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return order.Order{}, err
	}
	at := p.ExpiresAt.UTC().Truncate(time.Millisecond)
	if !at.After(now) {
		return order.Order{}, fmt.Errorf("%w: expires_at %s is not after now (%s)", store.ErrInvalid,
			at.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	for range 2 {
		o, ok, err := tx.ExtendOrder(ctx, p.OrderID, at, now)
		if err != nil {
			return order.Order{}, err
		}
		if ok {
			return o, s.effects(ctx, tx, now, MoveNone, order.EventExtended, o)
		}
		// It matched nothing: say why, from the row as it is, held.
		if o, err = tx.LockOrder(ctx, p.OrderID); err != nil {
			return order.Order{}, err
		}
		switch {
		case o.Status != order.Pending:
			return order.Order{}, store.ErrNotPending
		case !o.ExpiresAt.After(now):
			return order.Order{}, store.ErrOrderExpired
		}
		// PENDING again with its window open (a failed payment put it back
		// after the UPDATE looked): locked now, so the next UPDATE decides.
	}
	return order.Order{}, fmt.Errorf("order changed while locked")
}
