package core

// The decisions of the core that need no database: table-tested in
// decide_test.go.

import (
	"errors"
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
// ps are in SKU order). Each sees the stock the ones before it took, exactly
// as one-by-one transactions committed in that order would. take is what the
// accepted orders take per SKU.
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

// successSeen reports whether a success that could not pay the order o
// (locked) was applied before: it is the payment that paid o (one payment,
// reported again), or an attempt already recorded as money to give back.
// Anything else is new money.
func successSeen(o order.Order, prior order.Payment, known bool, p store.PaymentParams) bool {
	if o.Status == order.Paid && o.PaymentID == p.PaymentID {
		return true
	}
	return known && prior.Status == order.PaymentRefundRequired
}
