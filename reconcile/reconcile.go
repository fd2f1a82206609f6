// Package reconcile compares lapse's orders with the payment gateway's
// records and reports every disagreement (docs/architecture.md §1: the last line of
// defence behind the grace window, the gateway check and the confirmation
// query).
//
// lapse's side is the orders created in [From, To). The gateway's side comes
// from one of two sources:
//
//   - the query API (Params.Gateway): one Query per lapse order in the range,
//     Concurrency orders at a time. It cannot see payments of orders lapse
//     does not have, so it never reports KindUnknownToLapse. A gateway that
//     keeps a trade per payment attempt (payment.AttemptGateway: Stripe,
//     Alipay, WeChat Pay) knows payments, not orders: it is asked instead
//     about each payment attempt lapse recorded of the order (QueryAttempt
//     by payment_id; settled attempts too, not only the open ones the
//     service's check asks about), and the order is compared attempt by
//     attempt (compareAttempts): a PAID order must have exactly its paying
//     attempt PAID, of its amount; any other attempt PAID is money lapse
//     does not account for (cancelled_but_paid, duplicate_payment,
//     payment_id_mismatch, paid_but_open) unless lapse flagged it
//     refund_required (a known refund). An order without attempts is not
//     asked about — lapse opened no trade for it — and must not be PAID. An
//     attempt the gateway cannot answer about (an error, a payment it does
//     not know, a state lapse does not know) makes the order an OrderError,
//     never NOT_PAID: at such a gateway "no such payment" may be a wrong key
//     or account as well as a trade never opened;
//   - a statement (Params.Statement): CSV lines order_id,payment_id,status,
//     amount_cents, as a gateway's daily settlement file gives them (see
//     ParseStatement for the format). An order of the range with no line is
//     taken as NOT_PAID, so the statement should cover every payment of the
//     range's orders: concatenate consecutive days' files if payments may
//     land after midnight. Lines of orders lapse has outside the range are
//     ignored (that range's run reports them).
//
// Nothing is changed: the report is for a person (or a refund job) to act on.
//
// ReconcileStock does the same for stock a remote inventory holds: lapse's
// orders with a reservation and their stock tasks against the inventory's
// ledger (stock.go; docs/inventory.md).
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Kind names a mismatch. The strings are stable: scripts may match on them.
type Kind string

// The kinds of mismatch.
const (
	// KindCancelledButPaid: lapse cancelled the order (stock released) and
	// has not flagged a refund, but the gateway has it PAID. Money was taken
	// for an order that no longer exists: refund it (or restore the order).
	KindCancelledButPaid Kind = "cancelled_but_paid"
	// KindAmountMismatch: lapse and the gateway both hold a payment for the
	// order, of different amounts.
	KindAmountMismatch Kind = "amount_mismatch"
	// KindCurrencyMismatch: the payment that paid a PAID order is, at the
	// gateway, in another currency than the order's (a gateway that names
	// none is taken to agree): the buyer paid something else than the
	// order's price. Payments flagged for refund are not compared.
	KindCurrencyMismatch Kind = "currency_mismatch"
	// KindPaymentIDMismatch: lapse and the gateway both hold a payment for
	// the order, with different payment ids (asked per attempt: lapse's
	// paying attempt is not paid at the gateway, another attempt is; the
	// row names the gateway's).
	KindPaymentIDMismatch Kind = "payment_id_mismatch"
	// KindUnknownToLapse: the statement has a PAID line for an order lapse
	// does not have at all (statement source only).
	KindUnknownToLapse Kind = "unknown_to_lapse"
	// KindPaidButNotAtGateway: lapse recorded a successful payment (the order
	// is PAID, or CANCELLED with refund_required) that the gateway does not
	// have: it answers NOT_PAID, CLOSED or PENDING, or the statement has no
	// line for the order, or (a gateway asked per attempt) lapse recorded no
	// attempt of a PAID order to ask about. Goods may ship unpaid.
	KindPaidButNotAtGateway Kind = "paid_but_not_at_gateway"
	// KindPaidButOpen: the gateway has the order PAID while lapse still has
	// it PENDING or PAYING: the callback was lost and no gateway check has
	// caught it yet.
	KindPaidButOpen Kind = "paid_but_open"
	// KindCancelledButPending: lapse cancelled the order but the gateway has
	// a payment of it in progress: the trade was not closed, and the buyer
	// may still be charged.
	KindCancelledButPending Kind = "cancelled_but_pending"
	// KindDuplicatePayment: the statement has two PAID lines of one order
	// with different payment ids, or a gateway asked per attempt has another
	// attempt of a PAID order paid besides the one that paid it: the buyer
	// was charged twice. The query API by order cannot see it.
	KindDuplicatePayment Kind = "duplicate_payment"
	// KindSharedPayment: one payment id is recorded as having paid (the
	// paying payment of a PAID order, or an attempt SUCCEEDED) more than one
	// order of the range: one buyer's money counted for several orders, each
	// of which the gateway's record alone agrees with. One row per order.
	KindSharedPayment Kind = "shared_payment"
	// KindKnownRefund is not a mismatch: lapse already flagged the order
	// refund_required (a payment arrived after the cancel; asked per
	// attempt, also one that came besides the payment of a PAID order) and
	// the gateway agrees it was paid. Such rows go to Report.KnownRefunds,
	// the refunds still owed (lapse cannot tell whether one was made since).
	KindKnownRefund Kind = "known_refund"
)

// Params selects what to reconcile.
type Params struct {
	// Orders is lapse's side. Required.
	Orders store.Orders
	// Gateway is queried for every lapse order in the range — about each
	// of its payment attempts when it is a payment.AttemptGateway. Exactly
	// one of Gateway and Statement is required.
	Gateway payment.Gateway
	// Statement is the gateway's records as CSV (see ParseStatement).
	Statement io.Reader
	// From and To bound the orders' created_at: From <= created_at < To. A
	// zero From is the beginning of time; a zero To is no upper bound.
	From, To time.Time
	// Concurrency bounds the gateway queries in flight (per attempt: the
	// orders being asked about, one attempt at a time each). Defaults to 8.
	Concurrency int
	// PageSize is how many orders are read from the store at a time.
	// Defaults to 500.
	PageSize int
}

// Report is the outcome of a reconciliation. It is clean (OK) when it has no
// mismatch and no error; known refunds are listed but do not count.
type Report struct {
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	Source string    `json:"source"` // "gateway" or "statement"
	// Orders is how many lapse orders of the range were compared.
	Orders int `json:"orders"`
	// GatewayRecords is how many orders the gateway told about: queries
	// answered (per attempt: orders with attempts, every one answered), or
	// distinct orders in the statement.
	GatewayRecords int `json:"gateway_records"`
	// Ignored counts the statement's orders not compared: those lapse has
	// outside the range, and unpaid ones of orders not in the range.
	Ignored      int          `json:"ignored"`
	Mismatches   []Mismatch   `json:"mismatches"`
	KnownRefunds []Mismatch   `json:"known_refunds"`
	Errors       []OrderError `json:"errors"` // orders whose gateway state is unknown: run again
}

// OK reports whether lapse and the gateway agree on every order compared.
func (r Report) OK() bool { return len(r.Mismatches) == 0 && len(r.Errors) == 0 }

// Mismatch is one disagreement between lapse and the gateway about one order.
type Mismatch struct {
	Kind    Kind   `json:"kind"`
	OrderID string `json:"order_id"`
	// LapseStatus is empty for an order unknown to lapse.
	LapseStatus   order.Status  `json:"lapse_status"`
	LapseAmount   int64         `json:"lapse_amount_cents"`
	GatewayStatus payment.State `json:"gateway_status"`
	GatewayAmount int64         `json:"gateway_amount_cents"`
	// PaymentID is the gateway's payment id when it has one, else lapse's.
	PaymentID string `json:"payment_id"`
	Detail    string `json:"detail"`
}

// OrderError is an order whose gateway state could not be learnt.
type OrderError struct {
	OrderID string `json:"order_id"`
	Error   string `json:"error"`
}

// Run reconciles. It returns an error only when the reconciliation itself
// could not be done (the store failed, the statement is malformed, ctx
// ended); a gateway that fails for some orders puts them in Report.Errors.
func Run(ctx context.Context, p Params) (Report, error) {
	if p.Orders == nil {
		return Report{}, errors.New("reconcile: Params.Orders is required")
	}
	if (p.Gateway == nil) == (p.Statement == nil) {
		return Report{}, errors.New("reconcile: exactly one of Params.Gateway and Params.Statement is required")
	}
	if !p.From.IsZero() && !p.To.IsZero() && !p.From.Before(p.To) {
		return Report{}, fmt.Errorf("reconcile: empty range: From %s is not before To %s", p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
	}
	if p.Concurrency <= 0 {
		p.Concurrency = 8
	}
	if p.PageSize <= 0 {
		p.PageSize = 500
	}
	r := &run{p: p, rep: Report{From: p.From, To: p.To}}
	var err error
	if p.Statement != nil {
		err = r.fromStatement(ctx)
	} else {
		err = r.fromGateway(ctx)
	}
	if err != nil {
		return Report{}, err
	}
	r.sharedPayments()
	rep := r.rep
	sortMismatches(rep.Mismatches)
	sortMismatches(rep.KnownRefunds)
	slices.SortFunc(rep.Errors, func(a, b OrderError) int { return cmp.Compare(a.OrderID, b.OrderID) })
	if rep.Mismatches == nil {
		rep.Mismatches = []Mismatch{}
	}
	if rep.KnownRefunds == nil {
		rep.KnownRefunds = []Mismatch{}
	}
	if rep.Errors == nil {
		rep.Errors = []OrderError{}
	}
	return rep, nil
}

func sortMismatches(ms []Mismatch) {
	slices.SortFunc(ms, func(a, b Mismatch) int {
		return cmp.Or(cmp.Compare(a.OrderID, b.OrderID), cmp.Compare(a.Kind, b.Kind))
	})
}

type run struct {
	p Params
	// attempts is Params.Gateway when it keeps a trade per payment attempt:
	// orders are then read with their attempts, and each attempt asked about.
	attempts payment.AttemptGateway
	mu       sync.Mutex // guards rep while queries run
	rep      Report
	// paidBy lists, by payment id, the orders of the range lapse has paid
	// by it (sharedPayments); written by eachOrder only.
	paidBy map[string][]order.Order
}

// notePaid records the payments that paid o: its paying payment when it is
// PAID, and any attempt SUCCEEDED (its attempts loaded).
func (r *run) notePaid(o order.Order) {
	var ids []string
	if o.Status == order.Paid && o.PaymentID != "" {
		ids = append(ids, o.PaymentID)
	}
	for _, p := range o.Payments {
		if p.Status == order.PaymentSucceeded && !slices.Contains(ids, p.PaymentID) {
			ids = append(ids, p.PaymentID)
		}
	}
	if len(ids) == 0 {
		return
	}
	if r.paidBy == nil {
		r.paidBy = map[string][]order.Order{}
	}
	for _, id := range ids {
		r.paidBy[id] = append(r.paidBy[id], o)
	}
}

// sharedPayments reports each payment id that paid more than one order of
// the range (KindSharedPayment), one row per order. Orders outside the
// range are not seen: run over a range wide enough to hold both.
func (r *run) sharedPayments() {
	for pid, os := range r.paidBy {
		if len(os) < 2 {
			continue
		}
		ids := make([]string, len(os))
		for i, o := range os {
			ids[i] = showID(o.ID)
		}
		slices.Sort(ids)
		for _, o := range os {
			r.rep.Mismatches = append(r.rep.Mismatches, Mismatch{
				Kind: KindSharedPayment, OrderID: o.ID, LapseStatus: o.Status, LapseAmount: o.AmountCents, PaymentID: pid,
				Detail: fmt.Sprintf("payment %s is recorded as paying %d orders (%s): one payment counted for each; refund or restore all but one",
					showID(pid), len(os), strings.Join(ids, ", ")),
			})
		}
	}
}

func (r *run) add(o order.Order, g payment.Status, absent bool) {
	ms, refund := compare(o, g, absent)
	var refunds []Mismatch
	if refund != nil {
		refunds = []Mismatch{*refund}
	}
	r.record(ms, refunds)
}

// record counts one order compared, with what the comparison found.
func (r *run) record(ms, refunds []Mismatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Orders++
	r.rep.Mismatches = append(r.rep.Mismatches, ms...)
	r.rep.KnownRefunds = append(r.rep.KnownRefunds, refunds...)
}

// fail reports an order whose gateway state could not be learnt.
func (r *run) fail(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Errors = append(r.rep.Errors, OrderError{OrderID: id, Error: err.Error()})
}

// answered counts an order the gateway told about.
func (r *run) answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.GatewayRecords++
}

// eachOrder calls f for every order created in the range, newest first,
// paging through ListOrders and stopping at the first order older than From.
func (r *run) eachOrder(ctx context.Context, f func(order.Order) error) error {
	cursor := ""
	for {
		page, err := r.p.Orders.ListOrders(ctx, store.ListOrdersParams{Limit: r.p.PageSize, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("reconcile: list orders: %w", err)
		}
		for _, o := range page.Orders {
			if !r.p.To.IsZero() && !o.CreatedAt.Before(r.p.To) {
				continue
			}
			if !r.p.From.IsZero() && o.CreatedAt.Before(r.p.From) {
				return nil
			}
			if o.RefundRequired || r.attempts != nil {
				// Its attempts say which payments are to give back, or
				// which trades to ask about (pages of orders do not carry
				// them; flagged orders are few, and a gateway asked per
				// attempt costs more than the read).
				full, err := r.p.Orders.GetOrder(ctx, o.ID)
				if err != nil {
					return fmt.Errorf("reconcile: read the payments of %s: %w", o.ID, err)
				}
				o = full
			}
			r.notePaid(o)
			if err := f(o); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

func (r *run) fromGateway(ctx context.Context) error {
	r.rep.Source = "gateway"
	r.attempts, _ = r.p.Gateway.(payment.AttemptGateway)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan order.Order)
	var wg sync.WaitGroup
	for range r.p.Concurrency {
		wg.Go(func() {
			for o := range jobs {
				if r.attempts != nil {
					r.byAttempt(ctx, o)
					continue
				}
				st, err := r.p.Gateway.Query(ctx, o.ID)
				if err == nil {
					o, err = r.withRefunds(ctx, o, st)
				}
				if err != nil {
					r.fail(o.ID, err)
					continue
				}
				r.answered()
				r.add(o, st, false)
			}
		})
	}
	err := r.eachOrder(ctx, func(o order.Order) error {
		select {
		case jobs <- o:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(jobs)
	wg.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// byAttempt compares o (its attempts loaded) with what the gateway says
// of each of its payment attempts. An order without attempts is not asked
// about: lapse opened no trade for it.
func (r *run) byAttempt(ctx context.Context, o order.Order) {
	as, err := askAttempts(ctx, r.attempts, o)
	if err != nil {
		r.fail(o.ID, err)
		return
	}
	if len(as) > 0 {
		r.answered()
	}
	r.record(compareAttempts(o, as))
}

func (r *run) fromStatement(ctx context.Context) error {
	r.rep.Source = "statement"
	recs, err := ParseStatement(r.p.Statement)
	if err != nil {
		return err
	}
	r.rep.GatewayRecords = len(recs)
	seen := map[string]bool{}
	err = r.eachOrder(ctx, func(o order.Order) error {
		seen[o.ID] = true
		rec, ok := recs[o.ID]
		if !ok {
			r.add(o, payment.Status{State: payment.StateNotPaid}, true)
			return nil
		}
		o, err := r.withRefunds(ctx, o, rec.Status)
		if err != nil {
			return err
		}
		r.add(o, rec.Status, false)
		r.duplicates(o.ID, o.Status, o.AmountCents, rec)
		return nil
	})
	if err != nil {
		return err
	}
	// PAID lines of orders not in the range: unknown to lapse, or outside it.
	ids := make([]string, 0)
	for id, rec := range recs {
		if !seen[id] {
			if rec.Status.State == payment.StatePaid {
				ids = append(ids, id)
			} else {
				r.rep.Ignored++ // outside the range or unknown, and not paid: nothing to settle
			}
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		_, err := r.p.Orders.GetOrder(ctx, id)
		switch {
		case err == nil:
			r.rep.Ignored++
		case errors.Is(err, store.ErrNotFound):
			rec := recs[id]
			r.rep.Mismatches = append(r.rep.Mismatches, Mismatch{
				Kind: KindUnknownToLapse, OrderID: id, GatewayStatus: payment.StatePaid,
				GatewayAmount: rec.Status.AmountCents, PaymentID: rec.Status.PaymentID,
				Detail: "the gateway took a payment for an order lapse does not have",
			})
			r.duplicates(id, "", 0, rec)
		default:
			return fmt.Errorf("reconcile: look up order %s: %w", showID(id), err)
		}
	}
	return nil
}

// duplicates reports the extra PAID lines of an order.
func (r *run) duplicates(id string, lapseStatus order.Status, lapseAmount int64, rec Record) {
	for _, extra := range rec.ExtraPayments {
		r.mu.Lock()
		r.rep.Mismatches = append(r.rep.Mismatches, Mismatch{
			Kind: KindDuplicatePayment, OrderID: id, LapseStatus: lapseStatus, LapseAmount: lapseAmount,
			GatewayStatus: payment.StatePaid, GatewayAmount: extra.AmountCents, PaymentID: extra.PaymentID,
			Detail: fmt.Sprintf("a second payment %s of %d besides %s of %d", extra.PaymentID, extra.AmountCents,
				rec.Status.PaymentID, rec.Status.AmountCents),
		})
		r.mu.Unlock()
	}
}

// withRefunds returns o with its attempts when the gateway's record of it
// may be a payment lapse gave back: a cancelled order not flagged (a
// flagged one is read with them already) that the gateway has paid. Pages
// of orders do not carry attempts, and such orders are few.
func (r *run) withRefunds(ctx context.Context, o order.Order, g payment.Status) (order.Order, error) {
	if g.State != payment.StatePaid || o.Status != order.Cancelled || o.RefundRequired || o.Payments != nil {
		return o, nil
	}
	full, err := r.p.Orders.GetOrder(ctx, o.ID)
	if err != nil {
		return o, fmt.Errorf("reconcile: read the payments of %s: %w", o.ID, err)
	}
	return full, nil
}

// compare returns the mismatches between an order and the gateway's record
// of it, and the known refund it is, if any. absent marks a record inferred
// from the statement's silence.
func compare(o order.Order, g payment.Status, absent bool) ([]Mismatch, *Mismatch) {
	lapseID := o.PaymentID // the payment lapse holds: the paying one…
	if o.Status == order.Cancelled && o.RefundRequired {
		lapseID = refundPaymentID(o, g.PaymentID) // …or, cancelled, the one to give back
	}
	base := Mismatch{
		OrderID: o.ID, LapseStatus: o.Status, LapseAmount: o.AmountCents,
		GatewayStatus: g.State, GatewayAmount: g.AmountCents, PaymentID: cmp.Or(g.PaymentID, lapseID),
	}
	with := func(k Kind, format string, args ...any) Mismatch {
		m := base
		m.Kind, m.Detail = k, fmt.Sprintf(format, args...)
		return m
	}
	// lapse holds a successful payment: PAID, or a late one flagged for refund.
	lapsePaid := o.Status == order.Paid || (o.Status == order.Cancelled && o.RefundRequired)
	gatewaySays := "says " + string(g.State)
	if absent {
		gatewaySays = "has no line for the order"
	}
	var ms []Mismatch
	var refund *Mismatch
	if g.State != payment.StatePaid {
		switch {
		case lapsePaid:
			what := "paid"
			if o.Status == order.Cancelled {
				what = "flagged for refund"
			}
			ms = append(ms, with(KindPaidButNotAtGateway, "lapse has the order %s by payment %s; the gateway %s", what, lapseID, gatewaySays))
		case o.Status == order.Cancelled && g.State == payment.StatePending:
			ms = append(ms, with(KindCancelledButPending, "lapse cancelled the order (%s); a payment is still in progress at the gateway: close the trade", o.CancelReason))
		}
		return ms, nil
	}
	switch o.Status {
	case order.Pending, order.Paying:
		ms = append(ms, with(KindPaidButOpen, "the gateway has payment %s; lapse still has the order %s (callback lost?)", g.PaymentID, o.Status))
		return ms, nil
	case order.Cancelled:
		if !o.RefundRequired && refunded(o, g.PaymentID) {
			return nil, nil // the money went back
		}
		if !o.RefundRequired {
			ms = append(ms, with(KindCancelledButPaid, "lapse cancelled the order (%s) and released its stock; the gateway has payment %s: refund it", o.CancelReason, g.PaymentID))
			return ms, nil
		}
		r := with(KindKnownRefund, "payment %s arrived after the cancel; lapse flagged it refund_required", g.PaymentID)
		refund = &r
	}
	if o.AmountCents != g.AmountCents {
		ms = append(ms, with(KindAmountMismatch, "lapse has %d cents, the gateway %d", o.AmountCents, g.AmountCents))
	}
	if o.Status == order.Paid && otherCurrency(o, g) {
		ms = append(ms, with(KindCurrencyMismatch, "lapse has the order in %s, the gateway the payment in %s", o.Currency, g.Currency))
	}
	if lapseID != g.PaymentID {
		ms = append(ms, with(KindPaymentIDMismatch, "lapse has payment %q, the gateway %q", lapseID, g.PaymentID))
	}
	return ms, refund
}

// otherCurrency reports whether the gateway names a currency for g that is
// not the order's ("" is read as the order's: the gateway does not say).
// It is asked of the payment that paid an order only: a payment flagged
// for refund is money to give back in whatever currency it came in (lapse
// may have flagged it for that very reason).
func otherCurrency(o order.Order, g payment.Status) bool {
	return g.Currency != "" && !strings.EqualFold(g.Currency, o.Currency)
}

// refunded reports whether o (attempts loaded) recorded the payment
// paymentID given back (REFUNDED).
func refunded(o order.Order, paymentID string) bool {
	return slices.ContainsFunc(o.Payments, func(p order.Payment) bool {
		return p.PaymentID == paymentID && p.Status == order.PaymentRefunded
	})
}

// refundPaymentID is the payment of o (attempts loaded) recorded as money to
// give back: the one the gateway names if o has it, else the first; without
// attempts (flagged before attempts were recorded), o's payment id.
func refundPaymentID(o order.Order, gatewayID string) string {
	first := ""
	for _, p := range o.Payments {
		if p.Status != order.PaymentRefundRequired {
			continue
		}
		if p.PaymentID == gatewayID {
			return p.PaymentID
		}
		if first == "" {
			first = p.PaymentID
		}
	}
	return cmp.Or(first, o.PaymentID)
}
