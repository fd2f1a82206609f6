package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
)

// Order-service reconciliation: lapse's orders against the order service
// that owns them (order-service mode, docs/order-service.md), asked one by
// one with the signed status request. In that mode a PENDING or PAYING
// order at lapse may be anything at the shop (payments need not be
// reported to lapse, a buyer may cancel at the shop): lapse asks at the
// deadline and the answer settles it. Once lapse has settled an order, the
// two sides must agree; the kinds below name what is found otherwise.
const (
	// KindCancelledButShopOpen: lapse has the order CANCELLED (and sent
	// order.cancelled); the order service has it pending or paying. The
	// order service never applied the cancel lapse recorded.
	KindCancelledButShopOpen Kind = "cancelled_but_shop_open"
	// KindCancelledButShopPaid: lapse has the order CANCELLED; the order
	// service has it paid. Goods may ship for an order lapse told the
	// world was cancelled.
	KindCancelledButShopPaid Kind = "cancelled_but_shop_paid"
	// KindPaidButShopCancelled: lapse has the order PAID; the order
	// service has it cancelled. Money taken for an order the shop dropped:
	// refund it, or restore the order.
	KindPaidButShopCancelled Kind = "paid_but_shop_cancelled"
	// KindPaidButShopOpen: lapse has the order PAID (a payment reported to
	// lapse); the order service still has it pending or paying.
	KindPaidButShopOpen Kind = "paid_but_shop_open"
	// KindCancellingButShopFinal: lapse has the order CANCELLING and its
	// cancel command is no longer being sent (DEAD, or purged); the order
	// service has the order cancelled or paid. `lapse commands retry`
	// sends the command again, and the answer settles lapse's side.
	KindCancellingButShopFinal Kind = "cancelling_but_shop_final"
	// KindNotFoundAtShop: the order service has no such order, while lapse
	// holds its deadline (its command would be answered not_found, and go
	// DEAD).
	KindNotFoundAtShop Kind = "not_found_at_shop"
)

// StatusReader tells where an order stands at the order service;
// *ordersvc.HTTP is one. An error is for this order only, unless it is
// fatal (see OrderServiceParams.Fatal).
type StatusReader interface {
	Status(ctx context.Context, orderID string) (ordersvc.OrderStatus, error)
}

// OrderServiceParams selects what ReconcileOrderService compares.
type OrderServiceParams struct {
	// Orders is lapse's side. Required.
	Orders store.Orders
	// OrderService is the shop's side. Required.
	OrderService StatusReader
	// From and To bound the orders' created_at: From <= created_at < To; a
	// zero bound is none.
	From, To time.Time
	// PageSize is how many orders are read from the store at a time
	// (default 500).
	PageSize int
	// MaxExamples is how many mismatches of each kind the report lists
	// (default 10); Counts has them all.
	MaxExamples int
	// Concurrency bounds the status requests in flight (default 8).
	Concurrency int
	// Progress, when set, is called after each order is compared with how
	// many were and how many there are (from any goroutine).
	Progress func(done, total int)
}

// OrderServiceReport is the outcome of ReconcileOrderService. It is clean
// (OK) when no mismatch was found and every order was compared.
type OrderServiceReport struct {
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// OrderService is who was asked (the caller sets it, without query or
	// user info).
	OrderService string `json:"order_service,omitempty"`
	// Orders counts lapse's orders of the range; Asked those the order
	// service answered about.
	Orders int `json:"orders"`
	Asked  int `json:"asked"`
	// InFlight counts CANCELLING orders that the order service has
	// already settled while their command is still being sent (its answer
	// not recorded yet): not a mismatch, lapse settles them on its own.
	InFlight int `json:"in_flight"`
	// Counts are the mismatches found, by kind (one per order at most);
	// Mismatches lists up to MaxExamples of each, by kind then order id.
	Counts     map[Kind]int           `json:"counts"`
	Mismatches []OrderServiceMismatch `json:"mismatches"`
	// Errors are the orders the order service could not tell about (a
	// 503, a timeout): not compared, run again.
	Errors []OrderError `json:"errors"`
}

// OK reports whether lapse and the order service agree on every order
// compared, and every order was.
func (r OrderServiceReport) OK() bool { return len(r.Counts) == 0 && len(r.Errors) == 0 }

// OrderServiceMismatch is one disagreement about one order.
type OrderServiceMismatch struct {
	Kind        Kind                 `json:"kind"`
	OrderID     string               `json:"order_id"`
	LapseStatus order.Status         `json:"lapse_status"`
	ShopStatus  ordersvc.OrderStatus `json:"shop_status"`
	// Command is the order's latest cancel command in lapse, when it has
	// one, as GET /v1/commands shows it.
	Command *order.Command `json:"command,omitempty"`
	Detail  string         `json:"detail"`
}

// listed is what the first read keeps of an order.
type listed struct {
	id      string
	version int64
}

// ReconcileOrderService asks the order service about every lapse order
// created in the range and reports where the two disagree. It returns an
// error only when it could not compare at all (the store failed, ctx ended,
// or the order service refused the requests themselves: a signature it
// does not take, no status route); an order the order service could not
// tell about is in the report's Errors.
//
// Each order is read from lapse's list, asked about, then read again: when
// lapse moved it in between (a command answered meanwhile), it is read,
// asked and read again, up to three times, so a transition that lands
// during the run is not reported as a disagreement.
func ReconcileOrderService(ctx context.Context, p OrderServiceParams) (OrderServiceReport, error) {
	if p.Orders == nil || p.OrderService == nil {
		return OrderServiceReport{}, errors.New("reconcile: OrderServiceParams.Orders and OrderServiceParams.OrderService are required")
	}
	if !p.From.IsZero() && !p.To.IsZero() && !p.From.Before(p.To) {
		return OrderServiceReport{}, fmt.Errorf("reconcile: empty range: From %s is not before To %s", p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
	}
	if p.PageSize <= 0 {
		p.PageSize = 500
	}
	if p.MaxExamples <= 0 {
		p.MaxExamples = 10
	}
	if p.Concurrency <= 0 {
		p.Concurrency = 8
	}
	var all []listed
	err := eachOrderIn(ctx, p.Orders, p.From, p.To, p.PageSize, func(o order.Order) error {
		all = append(all, listed{id: o.ID, version: o.Version})
		return nil
	})
	if err != nil {
		return OrderServiceReport{}, err
	}
	r := &shopRun{p: p, rep: OrderServiceReport{From: p.From, To: p.To, Orders: len(all), Counts: map[Kind]int{}}}
	versions := make(map[string]int64, len(all))
	ids := make([]string, len(all))
	for i, l := range all {
		ids[i], versions[l.id] = l.id, l.version
	}
	all = nil
	slices.Sort(ids)
	err = parallel(ctx, p.Concurrency, ids, func(ctx context.Context, id string) error { return r.compare(ctx, id, versions[id]) })
	if err != nil {
		return OrderServiceReport{}, err
	}
	rep := r.rep
	slices.SortFunc(rep.Mismatches, func(a, b OrderServiceMismatch) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.OrderID, b.OrderID))
	})
	slices.SortFunc(rep.Errors, func(a, b OrderError) int { return cmp.Compare(a.OrderID, b.OrderID) })
	if rep.Mismatches == nil {
		rep.Mismatches = []OrderServiceMismatch{}
	}
	if rep.Errors == nil {
		rep.Errors = []OrderError{}
	}
	return rep, nil
}

type shopRun struct {
	p    OrderServiceParams
	mu   sync.Mutex // guards rep and done while requests run
	rep  OrderServiceReport
	done int
}

// compare asks about order id, listed at version, and records what it
// finds.
func (r *shopRun) compare(ctx context.Context, id string, version int64) error {
	const tries = 3
	var o order.Order
	var shop ordersvc.OrderStatus
	settled := false
	for try := range tries {
		if try > 0 {
			before, err := r.p.Orders.GetOrder(ctx, id)
			if err != nil {
				return fmt.Errorf("reconcile: read order %s: %w", showID(id), err)
			}
			version = before.Version
		}
		var err error
		if shop, err = r.p.OrderService.Status(ctx, id); err != nil {
			if fatal(err) {
				return fmt.Errorf("reconcile: %w", err)
			}
			r.record(func(rep *OrderServiceReport) {
				rep.Errors = append(rep.Errors, OrderError{OrderID: id, Error: err.Error()})
			})
			return nil
		}
		if o, err = r.p.Orders.GetOrder(ctx, id); err != nil {
			return fmt.Errorf("reconcile: read order %s: %w", showID(id), err)
		}
		if o.Version == version {
			settled = true
			break
		}
	}
	m, inFlight := judgeShop(o, shop)
	if m != nil && !settled {
		m.Detail += fmt.Sprintf(" (lapse changed the order while it was read, %d times: run again once it settles)", tries)
	}
	r.record(func(rep *OrderServiceReport) {
		rep.Asked++
		if inFlight {
			rep.InFlight++
		}
		if m == nil {
			return
		}
		rep.Counts[m.Kind]++
		if rep.Counts[m.Kind] <= r.p.MaxExamples {
			rep.Mismatches = append(rep.Mismatches, *m)
		}
	})
	return nil
}

// record changes the report under the lock and counts one order done.
func (r *shopRun) record(f func(*OrderServiceReport)) {
	r.mu.Lock()
	f(&r.rep)
	r.done++
	done, total := r.done, r.rep.Orders
	r.mu.Unlock()
	if r.p.Progress != nil {
		r.p.Progress(done, total)
	}
}

// fatal reports whether a status request's error is about every request,
// not one order: no status route, or the request refused (401, 403, or
// another 4xx: the secret, the URL). Going on would report every order.
func fatal(err error) bool {
	if errors.Is(err, ordersvc.ErrNoStatusRoute) {
		return true
	}
	var se *ordersvc.StatusError
	return errors.As(err, &se) && se.Code >= 400 && se.Code < 500 && se.Code != 408 && se.Code != 409 && se.Code != 429
}

// judgeShop returns the mismatch of lapse's order o with the order
// service's status shop, nil when they agree; inFlight says o is
// CANCELLING, settled at the shop, with its command still being sent.
func judgeShop(o order.Order, shop ordersvc.OrderStatus) (m *OrderServiceMismatch, inFlight bool) {
	var cmd *order.Command
	for i := range o.Commands {
		if cmd == nil || o.Commands[i].CancelAfter.After(cmd.CancelAfter) {
			cmd = &o.Commands[i]
		}
	}
	mismatch := func(k Kind, format string, args ...any) *OrderServiceMismatch {
		return &OrderServiceMismatch{Kind: k, OrderID: o.ID, LapseStatus: o.Status, ShopStatus: shop, Command: cmd, Detail: fmt.Sprintf(format, args...)}
	}
	open := shop == ordersvc.StatusPending || shop == ordersvc.StatusPaying
	switch {
	case shop == ordersvc.StatusNotFound:
		return mismatch(KindNotFoundAtShop, "the order service has no such order; lapse has it %s", o.Status), false
	case o.Status == order.Cancelled && open:
		return mismatch(KindCancelledButShopOpen, "lapse cancelled the order (%s) and sent order.cancelled; the order service has it %s", cmp.Or(string(o.CancelReason), "no reason"), shop), false
	case o.Status == order.Cancelled && shop == ordersvc.StatusPaid:
		return mismatch(KindCancelledButShopPaid, "lapse cancelled the order (%s) and sent order.cancelled; the order service has it paid", cmp.Or(string(o.CancelReason), "no reason")), false
	case o.Status == order.Paid && shop == ordersvc.StatusCancelled:
		return mismatch(KindPaidButShopCancelled, "lapse has the order paid; the order service has it cancelled: money taken for an order the shop dropped"), false
	case o.Status == order.Paid && open:
		return mismatch(KindPaidButShopOpen, "lapse has the order paid; the order service has it %s", shop), false
	case o.Status == order.Cancelling && !open:
		if cmd != nil && cmd.Status == order.TaskPending {
			return nil, true
		}
		return mismatch(KindCancellingButShopFinal, "the order service has the order %s; lapse is not asking it any more: %s", shop, commandState(cmd)), false
	}
	return nil, false
}

// commandState says why lapse no longer sends a CANCELLING order's command.
func commandState(c *order.Command) string {
	if c == nil {
		return "its cancel command was purged (lapse commands purge); the order stays CANCELLING at lapse"
	}
	s := fmt.Sprintf("its command %s is %s", showID(c.ID), c.Status)
	if c.Status == order.TaskDead {
		s += fmt.Sprintf(" since %s: lapse commands retry %s sends it again, and the answer settles lapse's side", order.FormatTime(c.DeadAt), showID(c.ID))
	}
	if c.LastError != "" {
		msg := c.LastError
		if r := []rune(msg); len(r) > 120 {
			msg = string(r[:119]) + "…"
		}
		s += "; last error: " + msg
	}
	return s
}
