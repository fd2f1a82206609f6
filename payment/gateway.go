package payment

import (
	"context"
	"errors"
)

// State is what the gateway knows of an order's payment.
type State string

// Gateway states.
const (
	StatePaid    State = "PAID"     // the buyer paid: PaymentID and AmountCents are set
	StateNotPaid State = "NOT_PAID" // no successful payment (none started, or it failed)
	StatePending State = "PENDING"  // a payment is in progress at the gateway
	StateClosed  State = "CLOSED"   // the trade is closed: the buyer can no longer pay
)

// Status is the gateway's answer to a query.
type Status struct {
	State       State
	PaymentID   string
	AmountCents int64
}

// ErrAlreadyPaid is returned by Close when the trade was paid before it
// could be closed: the order must be marked paid, not cancelled.
var ErrAlreadyPaid = errors.New("payment: trade already paid")

// Gateway is what lapse asks a payment gateway before it cancels an order
// that had a payment attempt (docs/architecture.md §2, §4). Any error means "unknown":
// lapse retries later and never cancels on an error.
//
// Users of a gateway other than lapse's generic JSON protocol write a small
// adapter behind this interface (Alipay's trade.query/trade.close, WeChat
// Pay's orderquery/closeorder, Stripe's PaymentIntent retrieve/cancel).
type Gateway interface {
	// Query returns the payment state of an order.
	Query(ctx context.Context, orderID string) (Status, error)
	// Close closes the order's trade so the buyer can no longer pay. It
	// returns nil if the trade is closed (now or already), ErrAlreadyPaid if
	// it was paid.
	Close(ctx context.Context, orderID string) error
}
