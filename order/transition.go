package order

// Action is something that can happen to an order.
type Action string

// The actions of the state machine.
const (
	// ActStartPayment: the buyer starts paying (POST /pay). Needs expires_at ahead.
	ActStartPayment Action = "start_payment"
	// ActPaymentSucceeded: the gateway reports success (callback SUCCEEDED).
	ActPaymentSucceeded Action = "payment_succeeded"
	// ActPaymentFailed: the gateway reports failure (callback FAILED).
	ActPaymentFailed Action = "payment_failed"
	// ActBuyerCancel: the buyer cancels (POST /cancel).
	ActBuyerCancel Action = "buyer_cancel"
	// ActTimeout: the cancel timer fires after cancel_after.
	ActTimeout Action = "timeout"
)

// Actions lists every action.
var Actions = []Action{ActStartPayment, ActPaymentSucceeded, ActPaymentFailed, ActBuyerCancel, ActTimeout}

// Effect is what an action does to an order in a given status.
type Effect struct {
	To Status // the status afterwards (unchanged for a no-op or a refusal)
	// Changed is true when the action is a transition (version bumps, an event may be written).
	Changed bool
	// Refused is true when the action is illegal in this status (the API answers 409).
	Refused bool
	// RefundRequired is set when the action flags the order for a refund.
	RefundRequired bool
}

// Transition is the state machine of docs/architecture.md §2 as data, with no time
// conditions: StartPayment on an expired PENDING order is refused with
// order_expired, and Timeout before cancel_after changes nothing; both are
// decided by the stores' guards, not here.
//
// Stores do not consult this table: each arrow is a conditional UPDATE. The
// table exists so that tests can check every (status, action) pair of every
// store against one reference, and so that readers have the rules in one place.
func Transition(from Status, a Action) Effect {
	same := Effect{To: from}
	refused := Effect{To: from, Refused: true}
	switch a {
	case ActStartPayment:
		switch from {
		case Pending:
			return Effect{To: Paying, Changed: true}
		case Paying:
			return same // idempotent: a second click is answered 200
		}
		return refused
	case ActPaymentSucceeded:
		switch from {
		case Pending, Paying:
			return Effect{To: Paid, Changed: true}
		case Paid:
			return same // duplicate callback
		case Cancelled, Cancelling:
			// Money arrived for an order already cancelled, or whose cancel
			// was commanded of the order service: it stays as it is (the
			// order service's answer decides a CANCELLING one) and is flagged.
			return Effect{To: from, Changed: true, RefundRequired: true}
		}
	case ActPaymentFailed:
		switch from {
		case Paying:
			return Effect{To: Pending, Changed: true}
		}
		return same // acknowledged, nothing to do
	case ActBuyerCancel:
		if from == Pending {
			return Effect{To: Cancelled, Changed: true}
		}
		return refused
	case ActTimeout:
		if from == Pending {
			return Effect{To: Cancelled, Changed: true}
		}
		// PAYING is never cancelled blind; PAID and CANCELLED are final;
		// CANCELLING waits for the order service's answer.
		return same
	}
	return refused
}
