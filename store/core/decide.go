package core

// The decisions of the core that need no database: table-tested in
// decide_test.go.

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// errTryAgain: the row is held now and the guarded UPDATE may run again.
var errTryAgain = errors.New("core: try the update again")

// explainStartMiss says why StartPayment's UPDATE matched nothing, from the
// order o as it is now (locked) and the transaction's now: nil for a payment
// already started, ErrOrderExpired for a PENDING order whose expires_at
// passed, ErrNotPending for PAID or CANCELLED, and errTryAgain for a PENDING
// order still in its window (a failed payment put it back after the UPDATE
// looked).
func explainStartMiss(o order.Order, now time.Time) error {
	switch {
	case o.Status == order.Paying:
		return nil
	case o.Status == order.Pending && !o.ExpiresAt.After(now):
		return store.ErrOrderExpired
	case o.Status != order.Pending:
		return store.ErrNotPending
	}
	return errTryAgain
}

// Verdict is what Admit decided for one create of a group.
type Verdict struct {
	// Alone: another request holds its idempotency key; the lone path
	// replays that request's order or refuses the key.
	Alone bool
	// Err refuses the order; nothing of it is written and its key, if this
	// transaction took it, is given back.
	Err error
}

// Admit decides, in arrival order, which creates of a group are created,
// applying the checks of a lone create in the same order: the idempotency
// key, then the order id, then the stock of each SKU in byte order (items of
// ps are in SKU order; an order whose stock a remote inventory holds —
// ReservationID set — takes none of lapse's). Each sees the stock the ones
// before it took, exactly as one-by-one transactions committed in that order
// would. take is what the accepted orders take per SKU.
func Admit(ps []store.CreateOrderParams, st GroupState) (vs []Verdict, take map[string]int64) {
	vs = make([]Verdict, len(ps))
	take = map[string]int64{}
	for i, p := range ps {
		if p.IdempotencyKey != "" && !st.Claimed[p.IdempotencyKey] {
			vs[i].Alone = true
			continue
		}
		if st.Existing[p.ID] {
			vs[i].Err = store.ErrOrderExists
			continue
		}
		if p.ReservationID != "" {
			continue
		}
		for _, it := range p.Items {
			if st.Available[it.SKU]-take[it.SKU] < it.Qty {
				vs[i].Err = shortOf(it.SKU)
				break
			}
		}
		if vs[i].Err != nil {
			continue
		}
		for _, it := range p.Items {
			take[it.SKU] += it.Qty
		}
	}
	return vs, take
}

// successVerdict is what a success that MarkPaid did not take is.
type successVerdict int

const (
	successRefund   successVerdict = iota // money to give back
	successAgain                          // the same success again: nothing to do
	successConflict                       // a report that disagrees with how its attempt ended
	successPays                           // it pays the order once the open attempt is superseded
)

// decideSuccess decides a success p that MarkPaid did not take, from the
// order o (locked) and its attempts ps. An attempt that has ended is
// terminal: the same report again changes nothing, and any other report of
// it is a conflict. Otherwise a success of the order's amount and currency
// for a PENDING or PAYING order pays it (MarkPaid only missed because
// another attempt was open); any other success is money to give back.
func decideSuccess(o order.Order, ps []order.Payment, p store.PaymentParams) successVerdict {
	currency := cmp.Or(p.Currency, o.Currency)
	if i := slices.IndexFunc(ps, func(x order.Payment) bool { return x.PaymentID == p.PaymentID }); i >= 0 && ps[i].Status.Ended() {
		prior := ps[i]
		if prior.AmountCents == p.AmountCents && cmp.Or(prior.Currency, o.Currency) == currency {
			return successAgain
		}
		return successConflict
	}
	if o.Status == order.Paid && o.PaymentID == p.PaymentID {
		return successAgain // paid before attempts were recorded
	}
	if o.Status.HoldsStock() && o.AmountCents == p.AmountCents && o.Currency == currency {
		return successPays
	}
	return successRefund
}
