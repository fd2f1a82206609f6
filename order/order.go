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

// The statuses of docs/architecture.md §2. PAID and CANCELLED are final.
// CANCELLING exists only in order-service mode (docs/order-service.md): the
// deadline passed and lapse commanded the order service to cancel; its
// answer decides what the order becomes (CANCELLED, PAID, or PAYING to be
// asked again).
const (
	Pending    Status = "PENDING"
	Paying     Status = "PAYING"
	Paid       Status = "PAID"
	Cancelled  Status = "CANCELLED"
	Cancelling Status = "CANCELLING"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{Pending, Paying, Cancelling, Paid, Cancelled}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	switch s {
	case Pending, Paying, Cancelling, Paid, Cancelled:
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
	// ReasonOperator: a person cancelled the order (POST
	// /v1/orders/{id}/cancel with "reason": "operator"), PENDING or PAYING,
	// past its deadline or not, after its trade was closed at the gateway
	// or with an acknowledgement that it was closed by hand.
	ReasonOperator CancelReason = "operator"
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
	PaymentID       string // the current payment attempt's id; the paying one once PAID
	RefundRequired  bool   // a payment succeeded that did not pay the order: it must be refunded
	PaymentAttempts int    // failed payment attempts
	Version         int64  // incremented by every transition
	// Payments are the order's payment attempts, oldest first; only reads
	// of one order load them (nil otherwise).
	Payments []Payment
	// ReservationID names the stock held for the order by a remote
	// inventory (docs/sagas.md); "" when lapse holds the stock itself.
	ReservationID string
	// Tasks are the stock tasks of an order with a ReservationID, oldest
	// first; only reads of one order load them.
	Tasks []StockTask
	// Commands are the cancel commands of order-service mode written for
	// the order (one per deadline it reached), in id order; only reads of
	// one order load them, and only an order that has any has them.
	Commands []Command
}

// RemoteStock reports whether another service holds the order's stock:
// its transitions write stock tasks instead of moving lapse's counters.
func (o Order) RemoteStock() bool { return o.ReservationID != "" }

// TaskAction is what a stock task asks of the remote inventory.
type TaskAction string

// Stock task actions (the inventory's commands).
const (
	TaskReserve TaskAction = "reserve"
	TaskRelease TaskAction = "release"
	TaskConfirm TaskAction = "confirm"
)

// TaskStatus is where a stock task stands.
type TaskStatus string

// Stock task statuses. A PENDING task is sent until the inventory answers;
// DONE is final; a DEAD task waits for an operator's retry (never dropped).
const (
	TaskPending TaskStatus = "PENDING"
	TaskDone    TaskStatus = "DONE"
	TaskDead    TaskStatus = "DEAD"
)

// StockTask is one command to a remote inventory that a transition of an
// order wrote in its own transaction: the local message table of the saga.
// It exists once per (order, action).
type StockTask struct {
	ID            string
	OrderID       string
	Action        TaskAction
	ReservationID string
	Items         []Item
	Status        TaskStatus
	// Attempts counts sends (claims), the current one included.
	Attempts int
	// Result is the inventory's last answer (REPLENISH_SUCCESS,
	// ALREADY_DONE, REJECTED), "" before one.
	Result    string
	LastError string
	CreatedAt time.Time
	NextAt    time.Time // when it is due again (while PENDING)
	DoneAt    time.Time // zero unless DONE
	DeadAt    time.Time // zero unless DEAD
}

// Command is one order.cancel_if_pending command of order-service mode
// (docs/order-service.md): written when the order's cancel_after passed and
// it moved to CANCELLING, sent until the order service answers for good.
// It exists once per order and deadline (its id is ordersvc.CommandID).
type Command struct {
	ID          string
	OrderID     string
	CancelAfter time.Time
	Status      TaskStatus
	// Attempts counts sends (claims), the current one included.
	Attempts int
	// Result is the order service's last answer (cancelled, paying, …),
	// "" before one.
	Result    string
	LastError string
	CreatedAt time.Time
	NextAt    time.Time // when it is due again (while PENDING)
	DoneAt    time.Time // zero unless DONE
	DeadAt    time.Time // zero unless DEAD
}

// Refund is the refund of one REFUND_REQUIRED payment attempt: the task
// that gives its money back through the gateway (at most one per attempt,
// keyed by its payment id), or the record of an operator's refund made
// outside lapse (Manual).
type Refund struct {
	PaymentID   string
	OrderID     string
	AmountCents int64
	Currency    string
	Status      TaskStatus
	// Attempts counts sends (claims), the current one included.
	Attempts int
	// RefundID is the gateway's id of the refund, "" until known.
	RefundID string
	// Manual: marked refunded by an operator (the money went back outside
	// lapse, or by a refund the API made); Note and Actor say why and who.
	Manual    bool
	Note      string
	Actor     string
	LastError string
	CreatedAt time.Time
	NextAt    time.Time // when it is due again (while PENDING)
	DoneAt    time.Time // zero unless DONE
	DeadAt    time.Time // zero unless DEAD
}

// PaymentStatus is where one payment attempt stands.
type PaymentStatus string

// Payment attempt statuses. An attempt is open while PENDING or SUPERSEDED:
// the gateway may still take the buyer's money for it.
const (
	PaymentPending    PaymentStatus = "PENDING"    // started, the current attempt of a PAYING order
	PaymentSuperseded PaymentStatus = "SUPERSEDED" // replaced by a newer attempt before an outcome
	PaymentFailed     PaymentStatus = "FAILED"     // the gateway reported it failed, or confirmed it closed unpaid
	PaymentSucceeded  PaymentStatus = "SUCCEEDED"  // it paid the order
	// PaymentRefundRequired: it succeeded but did not pay the order (the
	// order was paid by another attempt, cancelled, or the amount differed).
	PaymentRefundRequired PaymentStatus = "REFUND_REQUIRED"
	// PaymentRefunded: money that was REFUND_REQUIRED has been given back
	// (by lapse's refund task, or by an operator outside lapse).
	PaymentRefunded PaymentStatus = "REFUNDED"
)

// Ended reports whether an attempt in this status has ended for good: it
// paid the order (SUCCEEDED), is money to give back (REFUND_REQUIRED), or
// was money given back (REFUNDED). A
// later report of an ended attempt changes nothing: it is a conflict, or the
// same report again. A FAILED attempt has not ended: at a gateway that keeps
// a trade per attempt, a declined payment may still be paid.
func (s PaymentStatus) Ended() bool {
	return s == PaymentSucceeded || s == PaymentRefundRequired || s == PaymentRefunded
}

// Payment is one payment attempt of an order: the id the client uses at the
// gateway for it (out_trade_no, PaymentIntent id, …).
type Payment struct {
	PaymentID   string
	Status      PaymentStatus
	AmountCents int64 // what a success reported; 0 before
	// Currency is what a success reported AmountCents in (the order's when
	// the report named none); "" before.
	Currency string
	// Conflicts counts the reports that disagreed with how the attempt had
	// already ended (a success of another amount after it ended, a FAILED
	// after a success): each was refused and changed nothing else.
	Conflicts int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Event types written to the outbox in the same transaction as the change.
const (
	EventCreated        = "order.created"
	EventPaid           = "order.paid"
	EventCancelled      = "order.cancelled"
	EventRefundRequired = "order.refund_required"
	// EventRefunded: an attempt's money was given back (REFUND_REQUIRED →
	// REFUNDED); once per REFUNDED attempt.
	EventRefunded = "order.refunded"
	// EventExtended: a PENDING order's deadline moved (later or earlier).
	// An order may have any number of them.
	EventExtended = "order.extended"
)

// EventSchemaVersion is the schema_version of event payloads
// (docs/events): additive changes keep it, a breaking change raises it.
const EventSchemaVersion = 1

// Event is one outbox row.
type Event struct {
	Seq       int64  // store-assigned, increasing; the relay's cursor
	ID        string // globally unique, for consumers' dedupe
	Type      string
	OrderID   string
	Payload   []byte // JSON
	CreatedAt time.Time
}
