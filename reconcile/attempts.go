package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// attempt is one payment attempt of an order, as lapse records it and as
// the gateway answered about it.
type attempt struct {
	p order.Payment
	g payment.Status
}

// askAttempts asks ag about every payment attempt of o (its attempts
// loaded), in order, and returns the answers; the first attempt the gateway
// cannot answer about ends it with an error, as the order cannot be
// compared without it.
//
// It is not the service's check (checker.query in the repository root),
// and shares no loop with it on purpose: the check asks only the attempts
// still open, stops at the first PAID (one is enough to mark the order
// paid), folds the answers into one status and keeps what to close;
// reconcile asks every attempt — settled ones too, since a SUCCEEDED or
// REFUND_REQUIRED attempt is exactly what it must find paid — keeps every
// answer, and reads an unknown state as an error where the check asks
// again later. A helper serving both would be a loop with a callback.
func askAttempts(ctx context.Context, ag payment.AttemptGateway, o order.Order) ([]attempt, error) {
	as := make([]attempt, 0, len(o.Payments))
	for _, p := range o.Payments {
		st, err := ag.QueryAttempt(ctx, o.ID, p.PaymentID)
		if err != nil {
			return nil, fmt.Errorf("ask about payment %s: %w", showID(p.PaymentID), err)
		}
		switch st.State {
		case payment.StatePaid:
			if st.PaymentID == "" {
				st.PaymentID = p.PaymentID // the attempt is the trade
			}
		case payment.StateNotPaid, payment.StatePending, payment.StateClosed:
		default:
			return nil, fmt.Errorf("ask about payment %s: the gateway answered an unknown state %s", showID(p.PaymentID), showID(string(st.State)))
		}
		as = append(as, attempt{p: p, g: st})
	}
	return as, nil
}

// compareAttempts returns the mismatches between an order and the gateway's
// answers about each of its payment attempts, and the known refunds among
// them:
//
//   - an attempt lapse flagged REFUND_REQUIRED must be PAID (a known
//     refund, of the amount lapse recorded);
//   - an attempt lapse recorded REFUNDED must have been paid: its trade
//     PAID (refunded, or at a gateway whose trade does not show refunds)
//     or CLOSED (by a whole refund), never NOT_PAID or PENDING;
//   - a PAID order must have exactly its paying attempt (its payment_id)
//     PAID, of its amount and currency;
//   - any other attempt PAID is money lapse does not account for: charged
//     twice (the order PAID by another), paid by another attempt than
//     lapse's, paid for a cancelled order, or a lost callback (the order
//     still open);
//   - a cancelled order's attempt still PENDING may yet charge the buyer.
//
// An order without attempts has no trade to ask about: it must not be PAID.
func compareAttempts(o order.Order, as []attempt) (ms, refunds []Mismatch) {
	row := func(k Kind, a *attempt, format string, args ...any) Mismatch {
		m := Mismatch{Kind: k, OrderID: o.ID, LapseStatus: o.Status, LapseAmount: o.AmountCents,
			PaymentID: o.PaymentID, Detail: fmt.Sprintf(format, args...)}
		if a != nil {
			m.GatewayStatus, m.GatewayAmount = a.g.State, a.g.AmountCents
			m.PaymentID = cmp.Or(a.g.PaymentID, a.p.PaymentID)
		}
		return m
	}
	paying := -1 // lapse's paying attempt of a PAID order
	if o.Status == order.Paid {
		paying = slices.IndexFunc(as, func(a attempt) bool { return a.p.PaymentID == o.PaymentID })
	}
	var unaccounted []*attempt // PAID at the gateway, and not a payment lapse holds
	for i := range as {
		a := &as[i]
		paid := a.g.State == payment.StatePaid
		switch {
		case i == paying:
			if !paid {
				continue // decided below, with the other attempts seen
			}
			if a.g.AmountCents != o.AmountCents {
				ms = append(ms, row(KindAmountMismatch, a, "lapse has %d cents, the gateway %d for payment %s",
					o.AmountCents, a.g.AmountCents, a.p.PaymentID))
			}
			if otherCurrency(o, a.g) {
				ms = append(ms, row(KindCurrencyMismatch, a, "lapse has the order in %s, the gateway payment %s in %s",
					o.Currency, a.p.PaymentID, a.g.Currency))
			}
			if a.g.PaymentID != o.PaymentID {
				ms = append(ms, row(KindPaymentIDMismatch, a, "lapse has payment %q, the gateway answers about it as %q",
					o.PaymentID, a.g.PaymentID))
			}
		case a.p.Status == order.PaymentRefundRequired:
			if !paid {
				ms = append(ms, row(KindPaidButNotAtGateway, a, "lapse flagged payment %s for refund; the gateway says %s",
					a.p.PaymentID, a.g.State))
				continue
			}
			if a.g.Refunded {
				refunds = append(refunds, row(KindKnownRefund, a, "payment %s did not pay the order; lapse flagged it refund_required, and the gateway shows it refunded: record the refund (POST /v1/payments/{payment_id}/refund with manual)",
					a.p.PaymentID))
			} else {
				refunds = append(refunds, row(KindKnownRefund, a, "payment %s did not pay the order; lapse flagged it refund_required",
					a.p.PaymentID))
			}
			if a.p.AmountCents != a.g.AmountCents {
				ms = append(ms, row(KindAmountMismatch, a, "lapse recorded %d cents to refund for payment %s, the gateway %d",
					a.p.AmountCents, a.p.PaymentID, a.g.AmountCents))
			}
		case a.p.Status == order.PaymentRefunded:
			// Given back: the trade shows it refunded, or closed by the
			// refund, or (a gateway whose trade does not show refunds)
			// paid. Never paid is money lapse recorded that never came.
			if a.g.State == payment.StateNotPaid || a.g.State == payment.StatePending {
				ms = append(ms, row(KindPaidButNotAtGateway, a, "lapse recorded payment %s received and refunded; the gateway says %s",
					a.p.PaymentID, a.g.State))
			}
		case paid:
			unaccounted = append(unaccounted, a)
		case o.Status == order.Cancelled && a.g.State == payment.StatePending:
			ms = append(ms, row(KindCancelledButPending, a, "lapse cancelled the order (%s); payment %s is still in progress at the gateway: close the trade",
				o.CancelReason, a.p.PaymentID))
		}
	}
	payingPaid := paying >= 0 && as[paying].g.State == payment.StatePaid
	if o.Status == order.Paid && !payingPaid && len(unaccounted) == 0 {
		switch {
		case len(as) == 0:
			ms = append(ms, row(KindPaidButNotAtGateway, nil, "lapse has the order paid by payment %s but recorded no payment attempt of it: nothing to ask the gateway about",
				o.PaymentID))
		case paying < 0:
			ms = append(ms, row(KindPaidButNotAtGateway, nil, "lapse has the order paid by payment %s, not among its attempts; the gateway has none of them paid",
				o.PaymentID))
		default:
			ms = append(ms, row(KindPaidButNotAtGateway, &as[paying], "lapse has the order paid by payment %s; the gateway says %s",
				o.PaymentID, as[paying].g.State))
		}
	}
	for _, a := range unaccounted {
		switch o.Status {
		case order.Paid:
			if payingPaid {
				ms = append(ms, row(KindDuplicatePayment, a, "a second payment %s of %d besides %s, which paid the order",
					a.p.PaymentID, a.g.AmountCents, o.PaymentID))
			} else {
				ms = append(ms, row(KindPaymentIDMismatch, a, "lapse has the order paid by payment %s, the gateway by %s",
					o.PaymentID, a.p.PaymentID))
			}
		case order.Cancelled:
			ms = append(ms, row(KindCancelledButPaid, a, "lapse cancelled the order (%s) and released its stock; the gateway has payment %s: refund it",
				o.CancelReason, a.p.PaymentID))
		default:
			ms = append(ms, row(KindPaidButOpen, a, "the gateway has payment %s; lapse still has the order %s (callback lost?)",
				a.p.PaymentID, o.Status))
		}
	}
	return ms, refunds
}
