// Package order holds lapse's domain vocabulary: the order, its items and
// statuses, the events a transition emits, and the transition table that every
// store must implement with conditional updates.
//
// The package is a leaf: stores, schedulers and the service all speak it, and it
// imports nothing of lapse.
package order

import "time"

// Status is where an order is in its lifecycle.
type Status string

// The four statuses of docs/architecture.md §2. PAID and CANCELLED are final.
const (
	Pending   Status = "PENDING"
	Paying    Status = "PAYING"
	Paid      Status = "PAID"
	Cancelled Status = "CANCELLED"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{Pending, Paying, Paid, Cancelled}

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case Pending, Paying, Paid, Cancelled:
		return true
	}
	return false
}

// HoldsStock reports whether an order in this status keeps its items locked.
func (s Status) HoldsStock() bool { return s == Pending || s == Paying }

// CancelReason says who cancelled an order.
type CancelReason string

// Cancel reasons.
const (
	ReasonTimeout CancelReason = "timeout"
	ReasonBuyer   CancelReason = "buyer"
)

// Item is one line of an order: a quantity of one SKU.
type Item struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// Order is the stored state of one order.
//
// Times are in UTC with millisecond precision; the stores keep nothing finer so
// that what the API reports is exactly what the guards compare.
type Order struct {
	ID              string
	Status          Status
	Items           []Item
	AmountCents     int64
	Currency        string
	CreatedAt       time.Time
	ExpiresAt       time.Time // what the buyer is told: CreatedAt + timeout
	CancelAfter     time.Time // when the timer fires: ExpiresAt + grace
	PaidAt          time.Time // zero unless PAID
	CancelledAt     time.Time // zero unless CANCELLED
	CancelReason    CancelReason
	PaymentID       string // the gateway's id of the payment that paid (or arrived too late for) the order
	RefundRequired  bool   // a payment succeeded for an order already CANCELLED
	PaymentAttempts int    // failed payment attempts
	Version         int64  // incremented by every transition
}

// Event types written to the outbox in the same transaction as the change.
const (
	EventCreated        = "order.created"
	EventPaid           = "order.paid"
	EventCancelled      = "order.cancelled"
	EventRefundRequired = "order.refund_required"
)

// Event is one outbox row.
type Event struct {
	Seq       int64  // store-assigned, increasing; the relay's cursor
	ID        string // globally unique, for consumers' dedupe
	Type      string
	OrderID   string
	Payload   []byte // JSON
	CreatedAt time.Time
}
