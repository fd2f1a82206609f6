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
	// Currency is the ISO 4217 code of AmountCents as the gateway reports
	// it (upper case); "" when the gateway does not say, read as the
	// order's currency. A payment in another currency cannot pay the order:
	// it is handled as a payment of another amount.
	Currency string
	// Refunded, with State PAID: the buyer paid, and money of the payment
	// was given back since, in part or whole (WeChat Pay's trade_state
	// REFUND). The payment happened, so it is PAID to every check — lapse
	// never cancels an order its buyer paid, and the refund is recorded by
	// its own notification or an operator; reconcile reads it as the trade
	// of a refunded attempt. A gateway whose trade does not show its
	// refunds (a Stripe PaymentIntent stays succeeded; a whole refund closes
	// an Alipay trade: CLOSED) never sets it.
	Refunded bool
}

// CurrencyGateway is a Gateway that takes only some currencies (Alipay and
// WeChat Pay domestic trades: CNY). lapse refuses at create an order whose
// currency the configured gateway cannot take (currency_unsupported),
// rather than discovering it at the deadline. A Gateway without it is taken
// to accept any currency.
type CurrencyGateway interface {
	// AcceptsCurrency reports whether a trade in currency (ISO 4217, upper
	// case) can be opened at the gateway.
	AcceptsCurrency(currency string) bool
}

// AttemptGateway is a Gateway that keeps one trade per payment attempt —
// Alipay's and WeChat Pay's out_trade_no, Stripe's PaymentIntent — so that
// lapse asks about, and closes, each attempt of an order by its payment_id:
// the current one and any superseded one not yet closed. A Gateway without
// it is asked about the order as a whole.
type AttemptGateway interface {
	Gateway
	// QueryAttempt returns the state of one payment attempt of an order.
	QueryAttempt(ctx context.Context, orderID, paymentID string) (Status, error)
	// CloseAttempt closes one attempt's trade: nil if it is closed (now or
	// already, or never opened), ErrAlreadyPaid if it was paid.
	CloseAttempt(ctx context.Context, orderID, paymentID string) error
}

// ErrAlreadyPaid is returned by Close when the trade was paid before it
// could be closed: the order must be marked paid, not cancelled.
var ErrAlreadyPaid = errors.New("payment: trade already paid")

// ErrUnknownPayment is returned, wrapped, by QueryAttempt (and Query) when
// the gateway does not know the payment attempt at all (Stripe: 404
// resource_missing for a PaymentIntent id the client made up or mistyped)
// or knows it as another order's (a PaymentIntent whose metadata.order_id
// names another order): either way it is not this order's money. Unlike
// other errors, which lapse retries for as long as they last, an attempt
// answered so is waited for at most Config.GatewayPendingMax (a key of the
// wrong mode, a replica behind) and then taken as not paid: the order is
// cancelled and its stock released — without closing that attempt at the
// gateway, which may be another order's to keep — so that a buyer cannot
// hold stock forever by naming a payment that will never pay it.
var ErrUnknownPayment = errors.New("payment: the gateway does not know this payment attempt as the order's")

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
