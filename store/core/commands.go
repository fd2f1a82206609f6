package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
)

// Order-service mode (docs/order-service.md): the order service owns the
// orders, so a due order is not cancelled here. It moves to CANCELLING and
// its command is written, in the timeout cancel's transaction; the command's
// answer makes the transition, in the settle's. What is decided here is the
// order of those steps; each statement is the driver's (CommandExecutor).

// CommandExecutor is what a driver adds for order-service mode: one
// statement per method, on a transaction's executor (and, for the reads, the
// store's).
type CommandExecutor interface {
	// CommandDue moves those of a batch that are due (as CancelDue takes
	// them) from PENDING — or, Confirmed, PAYING — to CANCELLING, and
	// returns them (items loaded).
	CommandDue(ctx context.Context, a CancelArgs) ([]order.Order, error)
	// ClaimCommandDue is ClaimDue's twin: it claims due orders and moves
	// them to CANCELLING.
	ClaimCommandDue(ctx context.Context, a ClaimArgs) ([]order.Order, error)
	// InsertCommands writes commands, PENDING and due at now; a command
	// that exists already (the same order and deadline) is left as it is.
	InsertCommands(ctx context.Context, now time.Time, cs []order.Command) error
	// (CommandClaimer: a driver that can also write them claimed.)
	// ClaimCommands leases up to limit PENDING commands with next_at <=
	// now, earliest first, skipping rows other claims hold: next_at becomes
	// leaseUntil and attempts grows by one. Order is left for the core.
	ClaimCommands(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedCommand, error)
	// SettleCommand records o on its row, as status, if the row is PENDING
	// and its attempts still the claim's (ok=false otherwise: another claim
	// holds it). A failure (no answer lapse acts on) counts one more.
	SettleCommand(ctx context.Context, o store.CommandOutcome, status order.TaskStatus, now, nextAt time.Time) (ok bool, err error)
	// ResolveCommanded makes the transition an answer decides: order id,
	// CANCELLING (or PAYING, for CANCELLED and PAID) → to, with
	// cancelled_at (reason timeout) or paid_at set to now. ok=false when
	// the order was in neither status.
	ResolveCommanded(ctx context.Context, id string, to order.Status, now time.Time) (order.Order, bool, error)
	// OweBack ends the SUCCEEDED attempt paymentID of an order REFUND_REQUIRED
	// (ok=false when it is not SUCCEEDED): the order service cancelled the
	// order it paid (settleIn).
	OweBack(ctx context.Context, orderID, paymentID string, now time.Time) (bool, error)
	ListCommands(ctx context.Context, p store.ListTasksParams) ([]order.Command, error)
	RetryCommands(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error)
	PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error)
	CommandStats(ctx context.Context) (store.TaskStats, error)
}

// CommandClaimer is a CommandExecutor that writes commands already claimed
// — attempts 1, next_at leaseUntil, as ClaimCommands leaves a row — and
// returns the ids it wrote (a command that existed already is left as it
// is, and not among them): CancelDueParams.CommandLease. PostgreSQL and
// SQLite have it (INSERT … RETURNING); MySQL cannot say which rows an
// INSERT wrote, and its commands wait for a claim.
type CommandClaimer interface {
	InsertClaimedCommands(ctx context.Context, now, leaseUntil time.Time, cs []order.Command) (written []string, err error)
}

// ErrNoCommands: the store's driver does not implement order-service mode.
var ErrNoCommands = errors.New("store: this store does not support order-service mode")

func commandsOf(e any) (CommandExecutor, error) {
	ce, ok := e.(CommandExecutor)
	if !ok {
		return nil, ErrNoCommands
	}
	return ce, nil
}

// commandDue is cancelDue for order-service mode: the batch's due orders
// move to CANCELLING and their commands are written — claimed for the
// caller with p.CommandLease where the driver can (CommandClaimer), those
// returned with their bodies.
func (s *Store) commandDue(ctx context.Context, tx *Tx, sorted []string, p store.CancelDueParams) ([]order.Order, []store.ClaimedCommand, time.Time, error) {
	ce, err := commandsOf(tx.ExecutorTx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	var done []order.Order
	if len(sorted) > 0 {
		done, err = ce.CommandDue(ctx, CancelArgs{IDs: sorted, Now: now, SkipAttempted: p.SkipAttempted, Confirmed: p.Confirmed})
	} else {
		done, err = ce.ClaimCommandDue(ctx, ClaimArgs{Now: now, DueBy: dueBy(now, p.Lag), Limit: p.Claim, SkipAttempted: p.SkipAttempted})
	}
	if err != nil || len(done) == 0 {
		return done, nil, now, err
	}
	cs := make([]order.Command, len(done))
	for i, o := range done {
		cs[i] = order.Command{ID: ordersvc.CommandID(o.ID, o.CancelAfter), OrderID: o.ID, CancelAfter: o.CancelAfter}
	}
	cc, ok := ce.(CommandClaimer)
	if !ok || p.CommandLease <= 0 {
		if err := ce.InsertCommands(ctx, now, cs); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("write commands: %w", err)
		}
		return done, nil, now, nil
	}
	until := now.Add(p.CommandLease)
	written, err := cc.InsertClaimedCommands(ctx, now, until, cs)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("write commands claimed: %w", err)
	}
	byID := make(map[string]order.Order, len(done))
	for _, o := range done {
		byID[o.ID] = o
	}
	isWritten := make(map[string]bool, len(written))
	for _, id := range written {
		isWritten[id] = true
	}
	var claimed []store.ClaimedCommand
	for _, c := range cs {
		if !isWritten[c.ID] {
			continue // written before, by an earlier deadline's round: its own schedule stands
		}
		c.Status, c.Attempts, c.CreatedAt, c.NextAt = order.TaskPending, 1, now, until
		claimed = append(claimed, store.ClaimedCommand{Command: c, Since: now})
	}
	if err := s.attachBodies(ctx, tx, claimed, byID, now); err != nil {
		return nil, nil, time.Time{}, err
	}
	return done, claimed, now, nil
}

// ClaimCommands implements store.Commands.
func (s *Store) ClaimCommands(ctx context.Context, p store.ClaimTasksParams) ([]store.ClaimedCommand, error) {
	return claimOn(ctx, s, "commands", p, func(c *store.ClaimedCommand) *time.Time { return &c.ClaimedAt },
		func(tx *Tx, now, leaseUntil time.Time) ([]store.ClaimedCommand, error) {
			ce, err := commandsOf(tx.ExecutorTx)
			if err != nil {
				return nil, err
			}
			out, err := ce.ClaimCommands(ctx, p.Limit, now, leaseUntil)
			if err != nil || len(out) == 0 {
				return nil, err
			}
			if err := s.commandBodies(ctx, tx, out, now); err != nil {
				return nil, err
			}
			return settlePaid(ctx, ce, out, now)
		})
}

// notSentPaid is the note on a command that never went out again because
// lapse recorded its order PAID first.
const notSentPaid = "not sent: lapse recorded the order PAID (a payment reported to lapse, or the gateway's check) before the command went out again"

// settlePaid ends, DONE and not sent, the claimed commands whose order lapse
// has recorded PAID since the command was written (the order service
// answered paying, then the payment was reported to lapse or the gateway
// check found it paid), and returns the others. A shop not told of the
// payment itself would cancel a paid order on the command. A payment that
// lands after this read, while the command is out, is the answer's conflict
// (settleIn).
func settlePaid(ctx context.Context, ce CommandExecutor, cs []store.ClaimedCommand, now time.Time) ([]store.ClaimedCommand, error) {
	var steps []SettleStep
	keep := cs[:0]
	for _, c := range cs {
		if c.Order.Status != order.Paid {
			keep = append(keep, c)
			continue
		}
		steps = append(steps, SettleStep{
			Outcome: store.CommandOutcome{ID: c.ID, OrderID: c.OrderID, Attempts: c.Attempts, Error: notSentPaid},
			Status:  order.TaskDone, NextAt: now,
		})
	}
	if len(steps) == 0 {
		return keep, nil
	}
	if _, err := settleCommands(ctx, ce, steps, now); err != nil {
		return nil, fmt.Errorf("end the commands of paid orders: %w", err)
	}
	return keep, nil
}

// commandBodies loads each claimed command's order, and the payment attempts
// of those that had any.
func (s *Store) commandBodies(ctx context.Context, tx *Tx, cs []store.ClaimedCommand, now time.Time) error {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.OrderID
	}
	os, err := tx.Orders(ctx, unique(ids))
	if err != nil {
		return fmt.Errorf("read orders: %w", err)
	}
	byID := make(map[string]order.Order, len(os))
	for _, o := range os {
		byID[o.ID] = o
	}
	return s.attachBodies(ctx, tx, cs, byID, now)
}

// attachBodies gives each claimed command its order (from byID) with the
// order's payment attempts, read for those that had any, and the claim's
// time.
func (s *Store) attachBodies(ctx context.Context, tx *Tx, cs []store.ClaimedCommand, byID map[string]order.Order, now time.Time) error {
	for i := range cs {
		cs[i].ClaimedAt = now
		o, ok := byID[cs[i].OrderID]
		if !ok {
			o = order.Order{ID: cs[i].OrderID}
		}
		if o.PaymentID != "" || o.PaymentAttempts > 0 { // an attempt was started
			var err error
			if o.Payments, err = tx.Payments(ctx, o.ID); err != nil {
				return fmt.Errorf("read attempts of %s: %w", o.ID, err)
			}
		}
		if o.Payments == nil {
			o.Payments = []order.Payment{}
		}
		cs[i].Order = o
	}
	return nil
}

// SettleCommands implements store.Commands: one transaction for the batch,
// each answer's transition with its command's row.
func (s *Store) SettleCommands(ctx context.Context, outcomes []store.CommandOutcome) (store.SettleCommandsResult, error) {
	var res store.SettleCommandsResult
	if len(outcomes) == 0 {
		return res, nil
	}
	// Orders in byte order: the lock order of every batch.
	outcomes = inLockOrder(outcomes, func(a, b store.CommandOutcome) int { return cmp.Compare(a.OrderID, b.OrderID) })
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		res = store.SettleCommandsResult{Now: now} // fresh on every retry
		ce, err := commandsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		if err := s.settleIn(ctx, tx, ce, outcomes, now, &res); err != nil {
			return err
		}
		if err := s.effects(ctx, tx, now, MoveCommit, order.EventPaid, res.Paid...); err != nil {
			return err
		}
		return s.effects(ctx, tx, now, MoveRelease, order.EventCancelled, res.Cancelled...)
	})
	if err != nil {
		return store.SettleCommandsResult{}, fmt.Errorf("settle %d commands: %w", len(outcomes), err)
	}
	return res, nil
}

// CommandBatchExecutor is a CommandExecutor that takes a batch's steps at
// once: the settles of its commands, then the transitions their answers
// decide, each step in one round trip (PostgreSQL pipelines the statements)
// instead of one per command and step. The statements, their order (the
// batch's lock order) and their results are those of SettleCommand and
// ResolveCommanded; a driver without it gets the loop below.
type CommandBatchExecutor interface {
	SettleCommands(ctx context.Context, steps []SettleStep, now time.Time) (settled []bool, err error)
	ResolveCommandedMany(ctx context.Context, rs []Resolve, now time.Time) (moved []order.Order, ok []bool, err error)
}

// SettleStep is one command's settle: its outcome, the status it records
// and when it is due again.
type SettleStep struct {
	Outcome store.CommandOutcome
	Status  order.TaskStatus
	NextAt  time.Time
}

// Resolve is one transition an answer decides (ResolveCommanded).
type Resolve struct {
	ID string
	To order.Status
}

// settleIn records the outcomes (in the batch's lock order) and makes the
// transitions their answers decide, adding the moved orders and the
// conflicts to res.
func (s *Store) settleIn(ctx context.Context, tx *Tx, ce CommandExecutor, outcomes []store.CommandOutcome, now time.Time, res *store.SettleCommandsResult) error {
	steps := make([]SettleStep, len(outcomes))
	for i, o := range outcomes {
		steps[i] = SettleStep{Outcome: o, Status: commandStatus(o), NextAt: now.Add(max(o.RetryIn, 0))}
	}
	settled, err := settleCommands(ctx, ce, steps, now)
	if err != nil {
		return err
	}
	var rs []Resolve
	var of []store.CommandOutcome // the outcome of each of rs
	for i, o := range outcomes {
		// Not settled: a stale claim's outcome; the claim that holds the
		// command settles it. No answer, or not_found: the order stays.
		if to, ok := answerStatus(o); ok && settled[i] {
			rs = append(rs, Resolve{ID: o.OrderID, To: to})
			of = append(of, o)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	moved, ok, err := resolveCommanded(ctx, ce, rs, now)
	if err != nil {
		return err
	}
	var unmoved []string
	for i, r := range rs {
		if !ok[i] {
			unmoved = append(unmoved, r.ID)
			continue
		}
		switch r.To {
		case order.Cancelled:
			res.Cancelled = append(res.Cancelled, moved[i])
		case order.Paid:
			res.Paid = append(res.Paid, moved[i])
		case order.Paying:
			res.Paying = append(res.Paying, moved[i].ID)
		}
	}
	if len(unmoved) == 0 {
		return nil
	}
	// The order was in neither CANCELLING nor PAYING: a settle of the same
	// answer before (a lease that ran out), or lapse's own record moved on
	// (a payment reported to lapse). Only a disagreement is a conflict.
	cur, err := tx.Orders(ctx, unique(unmoved))
	if err != nil {
		return fmt.Errorf("read unmoved orders: %w", err)
	}
	status := make(map[string]order.Status, len(cur))
	for _, o := range cur {
		status[o.ID] = o.Status
	}
	for i, r := range rs {
		if ok[i] {
			continue
		}
		o := of[i]
		st, found := status[r.ID]
		if found && (st == r.To || (r.To == order.Paying && st == order.Paid)) {
			continue
		}
		cf := store.CommandConflict{CommandID: o.ID, OrderID: o.OrderID, Result: o.Result, Status: st}
		if st == order.Paid && r.To == order.Cancelled {
			// The owner cancelled an order lapse saw paid (the payment
			// reached lapse while the command was out, after the owner
			// last looked): lapse's record stays PAID — order.paid went
			// out, and a transition is never taken back — but the money
			// was taken for an order that is cancelled where it is
			// owned. It is owed back, as a success after a cancel is.
			if cf.RefundRequired, err = s.oweBack(ctx, tx, ce, o, now); err != nil {
				return err
			}
		}
		res.Conflicts = append(res.Conflicts, cf)
	}
	return nil
}

// oweBack makes the attempt that paid the order of o (an answer of
// cancelled) money to give back: the attempt REFUND_REQUIRED, the order
// flagged refund_required, order.refund_required, and with o.AutoRefund a
// refund. owed=false when the order was not paid by an attempt lapse
// recorded SUCCEEDED (nothing lapse can give back).
func (s *Store) oweBack(ctx context.Context, tx *Tx, ce CommandExecutor, o store.CommandOutcome, now time.Time) (owed bool, err error) {
	ord, err := tx.LockOrder(ctx, o.OrderID)
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", o.OrderID, err)
	}
	if ord.Status != order.Paid || ord.PaymentID == "" {
		return false, nil
	}
	ps, err := tx.Payments(ctx, ord.ID)
	if err != nil {
		return false, fmt.Errorf("read attempts of %s: %w", ord.ID, err)
	}
	i := slices.IndexFunc(ps, func(p order.Payment) bool { return p.PaymentID == ord.PaymentID })
	if i < 0 {
		return false, nil
	}
	if owed, err = ce.OweBack(ctx, ord.ID, ord.PaymentID, now); err != nil || !owed {
		return false, err
	}
	p := store.PaymentParams{OrderID: ord.ID, PaymentID: ps[i].PaymentID, AmountCents: ps[i].AmountCents,
		Currency: cmp.Or(ps[i].Currency, ord.Currency), AutoRefund: o.AutoRefund}
	flagged, ok, err := tx.FlagRefund(ctx, ord.ID, p.PaymentID, now)
	if err == nil && !ok {
		err = fmt.Errorf("order changed while locked")
	}
	if err != nil {
		return false, fmt.Errorf("flag %s: %w", ord.ID, err)
	}
	if err := s.refundEvent(ctx, tx, now, flagged, p); err != nil {
		return false, err
	}
	if p.AutoRefund {
		if err := autoRefund(ctx, tx, now, flagged, p); err != nil {
			return false, err
		}
	}
	return true, s.hook(ctx, tx, store.HookRefundRequired, false, flagged)
}

// commandStatus is the status an outcome leaves its command in: DEAD when
// given up or answered not_found, DONE on a final answer, else PENDING
// (asked again at NextAt).
func commandStatus(o store.CommandOutcome) order.TaskStatus {
	r := ordersvc.Result(o.Result)
	switch {
	case o.Dead || r == ordersvc.NotFound:
		return order.TaskDead
	case r.Final():
		return order.TaskDone
	}
	return order.TaskPending
}

// answerStatus is the order status an answer decides, ok=false for none.
func answerStatus(o store.CommandOutcome) (order.Status, bool) {
	switch ordersvc.Result(o.Result) {
	case ordersvc.Cancelled, ordersvc.AlreadyCancelled:
		return order.Cancelled, true
	case ordersvc.AlreadyPaid:
		return order.Paid, true
	case ordersvc.Paying:
		return order.Paying, true
	}
	return "", false
}

func settleCommands(ctx context.Context, ce CommandExecutor, steps []SettleStep, now time.Time) ([]bool, error) {
	if be, ok := ce.(CommandBatchExecutor); ok {
		return be.SettleCommands(ctx, steps, now)
	}
	settled := make([]bool, len(steps))
	for i, st := range steps {
		ok, err := ce.SettleCommand(ctx, st.Outcome, st.Status, now, st.NextAt)
		if err != nil {
			return nil, fmt.Errorf("settle command %s of %s: %w", st.Outcome.ID, st.Outcome.OrderID, err)
		}
		settled[i] = ok
	}
	return settled, nil
}

func resolveCommanded(ctx context.Context, ce CommandExecutor, rs []Resolve, now time.Time) ([]order.Order, []bool, error) {
	if be, ok := ce.(CommandBatchExecutor); ok {
		return be.ResolveCommandedMany(ctx, rs, now)
	}
	moved, ok := make([]order.Order, len(rs)), make([]bool, len(rs))
	for i, r := range rs {
		var err error
		if moved[i], ok[i], err = ce.ResolveCommanded(ctx, r.ID, r.To, now); err != nil {
			return nil, nil, fmt.Errorf("resolve %s to %s: %w", r.ID, r.To, err)
		}
	}
	return moved, ok, nil
}

// ListCommands implements store.Commands.
func (s *Store) ListCommands(ctx context.Context, p store.ListTasksParams) ([]order.Command, error) {
	ce, err := commandsOf(s.d)
	if err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	out, err := ce.ListCommands(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return out, nil
}

// orderCommands loads the commands of o, if it has any: one probe of the
// lapse_order_commands_order index. Whether an order was commanded is not
// recorded on it (it may be PAYING, PAID or CANCELLED since), so a read asks
// — except for the reads that matter most, a PENDING order's while it is
// being paid: a command is written only as an order becomes CANCELLING, and
// the one way back to PENDING from there (PAYING on a paying answer, then
// its attempt FAILED) counts a failed attempt, so a PENDING order without
// one was never commanded. A driver without order-service mode has none to
// load.
func (s *Store) orderCommands(ctx context.Context, o *order.Order) error {
	ce, ok := s.d.(CommandExecutor)
	if !ok || (o.Status == order.Pending && o.PaymentAttempts == 0) {
		return nil
	}
	cs, err := ce.ListCommands(ctx, store.ListTasksParams{OrderID: o.ID, Limit: maxOrderCommands})
	if err != nil {
		return fmt.Errorf("read commands: %w", err)
	}
	if len(cs) > 0 {
		o.Commands = cs
	}
	return nil
}

// maxOrderCommands bounds the commands a read of one order lists: one per
// deadline the order reached, and a deadline moves only while it is PENDING.
const maxOrderCommands = 20

// RetryCommands implements store.Commands.
func (s *Store) RetryCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return s.operateCommands(ctx, p, "retry", func(ce CommandExecutor, now time.Time) (int64, error) {
		return ce.RetryCommands(ctx, p, now)
	})
}

// PurgeCommands implements store.Commands.
func (s *Store) PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return s.operateCommands(ctx, p, "purge", func(ce CommandExecutor, _ time.Time) (int64, error) {
		return ce.PurgeCommands(ctx, p)
	})
}

// operateCommands runs an operator's action on DEAD commands in a
// transaction of its own.
func (s *Store) operateCommands(ctx context.Context, p store.RetryTasksParams, what string, fn func(CommandExecutor, time.Time) (int64, error)) (int64, error) {
	if len(p.IDs) == 0 && !p.AllDead {
		return 0, nil
	}
	var n int64
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		ce, err := commandsOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		n, err = fn(ce, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s commands: %w", what, err)
	}
	return n, nil
}

// CommandStats implements store.Commands.
func (s *Store) CommandStats(ctx context.Context) (store.TaskStats, error) {
	ce, err := commandsOf(s.d)
	if err != nil {
		return store.TaskStats{}, err
	}
	return s.stats(ctx, "command", ce.CommandStats)
}

// CommandFailed reports whether o counts as a failed send: no answer, or an
// answer refused (not a result lapse acts on).
func CommandFailed(o store.CommandOutcome) bool {
	return !ordersvc.Result(o.Result).Valid()
}
