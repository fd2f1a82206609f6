// Package store defines what lapse asks of the database that owns orders and
// stock, and the errors every driver maps its own failures to.
//
// A driver implements Store with one local transaction per method and one
// conditional UPDATE per state transition, whose affected-row count decides
// who won a race (docs/architecture.md §2). Nothing is read and then written back: where a
// driver reads after a write, it is only to explain a write that matched no row.
//
// Every driver passes the conformance suite in store/storetest against a real
// server; adding a driver means writing it and one test line that runs the suite.
package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Sentinel errors. Drivers wrap them with context; callers test with errors.Is.
var (
	ErrNotFound            = errors.New("store: not found")
	ErrInsufficientStock   = errors.New("store: insufficient stock")
	ErrOrderExists         = errors.New("store: order id already exists")
	ErrIdempotencyMismatch = errors.New("store: idempotency key reused with a different request")
	ErrOrderExpired        = errors.New("store: order expired")
	ErrNotPending          = errors.New("store: order not pending")
	// ErrAmountMismatch is no longer returned: a payment of another amount is
	// money to give back (OutcomeRefundRequired). Kept for callers that test it.
	ErrAmountMismatch = errors.New("store: amount does not match the order")
	ErrInvalidCursor  = errors.New("store: invalid cursor")
	// ErrPaymentIDUsed: an earlier attempt of the order, or an attempt of
	// another order, has this payment id. A payment id belongs to one order.
	ErrPaymentIDUsed = errors.New("store: payment id already used by another attempt or another order")
	// ErrReservationUsed: another order holds this reservation of the
	// remote inventory; a reservation backs one order.
	ErrReservationUsed = errors.New("store: another order holds this reservation")
	// ErrReservationReleased: the stock lapse reserved for an order id was
	// given back before the order was created; create it under a new id.
	ErrReservationReleased = errors.New("store: the reservation of this order id was released before the order was created")
	// ErrInvalid: the parameters of a call are out of range (a programming error).
	ErrInvalid = errors.New("store: invalid parameters")
	// ErrRetryable marks an error that ended a caller's transaction lapse
	// joined (Tx): a deadlock, a serialization failure or a lock-wait
	// timeout. The caller rolls back and runs its transaction again; lapse
	// never retries a transaction it does not own.
	ErrRetryable = errors.New("store: transaction failed on a conflict; roll back and run it again")
)

// Store is the whole driver contract. It is split into the parts that later
// components use on their own (the relay only needs Outbox, audit only Auditor).
type Store interface {
	Orders
	TxOrders
	Stock
	Outbox
	Tasks
	Commands
	Refunds
	Auditor
	Dashboard
	HookFailures
	Retention
	// Migrate brings the schema to the newest version; a failed migration
	// leaves the schema as it was.
	Migrate(ctx context.Context) error
	// Ping checks that the database answers (readiness).
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close() error
}

// Orders holds the order lifecycle. Times ("now") come from the store's clock,
// so the guards `expires_at > now` and `cancel_after <= now` run against one clock.
type Orders interface {
	// CreateOrder reserves every item and inserts the order, its items, its
	// reserve ledger rows, its idempotency key and its order.created event in
	// one transaction; any shortfall rolls everything back with
	// ErrInsufficientStock. With an IdempotencyKey already used for the same
	// request it returns the existing order and Replayed=true; for a different
	// request, ErrIdempotencyMismatch. An order with a ReservationID (stock
	// held by a remote inventory) reserves nothing here.
	CreateOrder(ctx context.Context, p CreateOrderParams) (CreateOrderResult, error)
	// GetOrder returns one order, its payment attempts (and, for remote
	// stock, its stock tasks) loaded, or ErrNotFound.
	GetOrder(ctx context.Context, id string) (order.Order, error)
	// ListOrders returns a page of orders, newest first.
	ListOrders(ctx context.Context, p ListOrdersParams) (ListOrdersResult, error)
	// StartPayment starts a payment attempt: a PENDING order whose
	// expires_at is ahead moves to PAYING with the attempt's payment id (the
	// one given, or "<order id>-<attempt number>"), and the attempt is
	// recorded. A PAYING order asked again without a payment id, or with its
	// current one, is returned unchanged; with another, while expires_at is
	// ahead, that id becomes the current attempt and the previous one is
	// SUPERSEDED. Errors: ErrNotFound, ErrOrderExpired, ErrNotPending (PAID
	// or CANCELLED), ErrPaymentIDUsed (an earlier attempt of the order has it).
	StartPayment(ctx context.Context, p StartPaymentParams) (order.Order, error)
	// CompletePayment applies a successful payment of any attempt: PENDING
	// or PAYING with the order's amount → PAID with that payment id, stock
	// committed, order.paid. A success that cannot pay the order — already
	// PAID by another attempt, CANCELLED, or another amount — is money to
	// give back: the attempt is recorded REFUND_REQUIRED, the order flagged
	// refund_required and order.refund_required written (naming the payment
	// and amount). The same success again changes nothing.
	CompletePayment(ctx context.Context, p PaymentParams) (PaymentResult, error)
	// FailPayment applies a failed payment: the current attempt of a PAYING
	// order fails, and the order goes back to PENDING with payment_attempts
	// incremented. A failure of any other attempt is recorded on it and
	// changes nothing else (OutcomeNoChange).
	FailPayment(ctx context.Context, p PaymentParams) (PaymentResult, error)
	// CancelOrder is the buyer's cancel of a PENDING order: stock released,
	// order.cancelled written. ErrNotPending otherwise.
	CancelOrder(ctx context.Context, id string) (order.Order, error)
	// Extend moves the deadline of a PENDING order whose payment window is
	// still open: expires_at becomes p.ExpiresAt (to the millisecond, later
	// or earlier) and cancel_after moves with it, keeping the order's grace,
	// with order.extended written. Errors: ErrNotFound; ErrOrderExpired when
	// expires_at has passed (the order's timer may be cancelling it in its
	// grace: the deadline no longer moves); ErrNotPending (PAYING, PAID,
	// CANCELLED); ErrInvalid when p.ExpiresAt is not after now.
	Extend(ctx context.Context, p ExtendParams) (order.Order, error)
	// CancelDue is the timeout cancel of a batch, in one transaction: every
	// listed order that is PENDING with cancel_after <= now (and, with
	// SkipAttempted, no failed payment attempt) is cancelled with its stock
	// released and its event written. The others are reported as Skipped.
	//
	// With Claim > 0 instead of IDs, the store finds the batch itself: up to
	// Claim such orders with cancel_after <= now - Lag, earliest first, claimed
	// with FOR UPDATE SKIP LOCKED (where the database has it) inside the same
	// transaction, so any number of instances can run it at once without
	// taking the same rows. This is the sql timer backend and the fallback sweep.
	CancelDue(ctx context.Context, p CancelDueParams) (CancelDueResult, error)
	// PaymentChecks returns up to limit orders that need a gateway check
	// before they can be cancelled — PAYING, or PENDING with a failed payment
	// attempt — whose cancel_after <= now - lag, earliest first.
	PaymentChecks(ctx context.Context, lag time.Duration, limit int) ([]Deadline, error)
	// NextDeadline returns the earliest cancel_after of a PENDING order, and
	// false when there is none (the sql timer backend sleeps until then).
	// With skipAttempted, orders with a failed payment attempt are left out,
	// as CancelDue's claim leaves them with SkipAttempted: the two must agree,
	// or a poller wakes at once for an order its claim will not take.
	NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error)
	// PendingDeadlines pages through PENDING orders in (cancel_after, id)
	// order, starting after the given deadline (zero for the first page), for
	// seeding a scheduler that keeps its timers in memory.
	PendingDeadlines(ctx context.Context, after Deadline, limit int) ([]Deadline, error)
	// OrderOfPayment returns the order with a payment attempt named
	// paymentID (a gateway's notification may name only the payment);
	// ErrNotFound when none has, ErrInvalid when several have.
	OrderOfPayment(ctx context.Context, paymentID string) (string, error)
	// CountStuck counts PAYING orders past their cancel_after: payments whose
	// outcome lapse is waiting for (a metric and an audit warning).
	CountStuck(ctx context.Context) (int64, error)
}

// Tx is a caller's open transaction that lapse joins (embedded mode): a
// driver's InTx binds its native transaction (pgx.Tx, *sql.Tx) to the
// store. lapse's rows then commit with the caller's own, or not at all.
// lapse never commits, rolls back or retries it; an error it returns leaves
// the transaction to the caller, who rolls back (ErrRetryable: and runs it
// again). Only store drivers make one: the marker method is unexported.
type Tx interface {
	lapseTx()
}

// TxMarker makes a driver's bound transaction a Tx: embed it.
type TxMarker struct{}

func (TxMarker) lapseTx() {}

// TxOrders is Orders inside a caller's transaction (Tx): the same
// transitions, with the same arguments and results, as one step of the
// caller's own work.
type TxOrders interface {
	CreateOrderTx(ctx context.Context, tx Tx, p CreateOrderParams) (CreateOrderResult, error)
	StartPaymentTx(ctx context.Context, tx Tx, p StartPaymentParams) (order.Order, error)
	CompletePaymentTx(ctx context.Context, tx Tx, p PaymentParams) (PaymentResult, error)
	FailPaymentTx(ctx context.Context, tx Tx, p PaymentParams) (PaymentResult, error)
	CancelOrderTx(ctx context.Context, tx Tx, id string) (order.Order, error)
	ExtendTx(ctx context.Context, tx Tx, p ExtendParams) (order.Order, error)
}

// DueListener is an optional capability of a Store, found by type
// assertion: it hears the deadlines that transactions on its database set —
// an order created, or its deadline moved, by any lapse instance or in a
// caller's own transaction (CreateOrderTx, ExtendTx) — as they commit, and
// never those of a transaction that rolls back. An instance whose timers
// live in its own memory (or whose poller plans from the store) so learns
// of orders another process created. store/postgres has it (LISTEN/NOTIFY);
// on MySQL and SQLite the poller's plan, the sweep and lapse.Service.Wake
// stand in for it.
type DueListener interface {
	// ListenDue listens until ctx ends (then nil) or its connection fails
	// (the error: call it again after a pause). ready runs each time the
	// listen holds: every deadline committed from then on reaches due, in
	// commit order, at least once; one committed before it may not, so a
	// caller plans again from the store after a failure. due may name an
	// order that no longer needs a timer (paid or cancelled since): a timer
	// is harmless.
	ListenDue(ctx context.Context, ready func(), due func(key string, at time.Time)) error
}

// Hook events: the transitions an embedding service's hooks run in
// (postgres.Hooks, mysql.Hooks), inside the transaction that makes them.
const (
	HookCancelled      = "cancelled"
	HookPaid           = "paid"
	HookRefundRequired = "refund_required"
)

// HookError is a hook of an embedding service that failed for one order:
// that order's transition was rolled back with it (a batch commits without
// it, and the order is tried again later). It unwraps to the hook's error.
type HookError struct {
	OrderID string
	Event   string // HookCancelled, HookPaid, HookRefundRequired
	Err     error
}

func (e *HookError) Error() string {
	return "hook on " + e.Event + " of order " + e.OrderID + ": " + e.Err.Error()
}

func (e *HookError) Unwrap() error { return e.Err }

// HookFailures is the record of the hooks of an embedding service that
// failed for an order lapse tries again by itself — the OnCancelled of a
// timeout cancel (HookCancelled) — so that every instance, the audit and
// the dashboard see them, and the retries back off.
type HookFailures interface {
	// RecordHookFailure notes, in a transaction of its own, that the hook
	// of f.Event failed for f.OrderID once more: attempts grows by one, the
	// error (its first MaxHookError bytes) and the time are kept, and
	// next_at becomes now + backoff(attempts), by the store's clock. Until
	// then a claim of due orders (CancelDue with Claim) leaves the order
	// alone. It returns the record as written. The record goes in the
	// transaction that cancels the order.
	RecordHookFailure(ctx context.Context, f *HookError, backoff func(attempts int) time.Duration) (HookFailure, error)
	// ListHookFailures returns up to limit records of orders still PENDING,
	// the oldest first failure first.
	ListHookFailures(ctx context.Context, limit int) ([]HookFailure, error)
}

// MaxHookError is how much of a hook's error a HookFailure keeps, in bytes.
const MaxHookError = 1000

// HookFailure is one order whose hook keeps failing.
type HookFailure struct {
	OrderID       string    `json:"order_id"`
	Event         string    `json:"event"` // HookCancelled
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	// NextAt is when lapse tries the order again.
	NextAt time.Time `json:"next_at"`
}

// Stock holds the per-SKU counters.
type Stock interface {
	// SetStock sets a SKU's available quantity (creating it), an explicit
	// adjustment: total becomes available+locked+sold.
	SetStock(ctx context.Context, sku string, available int64) (SKU, error)
	// GetSKU returns one SKU or ErrNotFound.
	GetSKU(ctx context.Context, sku string) (SKU, error)
}

// Auditor checks the invariants of docs/architecture.md §9 over the whole database.
type Auditor interface {
	Audit(ctx context.Context, p AuditParams) (AuditReport, error)
}

// CreateOrderParams is a validated order to insert.
type CreateOrderParams struct {
	ID             string
	Items          []order.Item // SKUs unique, Qty > 0
	AmountCents    int64
	Currency       string
	Timeout        time.Duration // expires_at = now + Timeout
	Grace          time.Duration // cancel_after = expires_at + Grace
	IdempotencyKey string        // optional
	// RequestHash identifies the request body for the idempotency key, so a
	// key reused for a different order is refused rather than silently replayed.
	RequestHash string
	// ReservationID, when set, names the stock a remote inventory already
	// holds for the order: lapse moves no counters of its own, and the
	// order's cancel or payment writes a stock task (store.Tasks) instead.
	ReservationID string
	// ReplayOnly, when set, lets the create do nothing but replay the order
	// an earlier request with its IdempotencyKey made: anything else fails
	// with ReplayOnly and writes nothing. lapse refuses a caller's
	// reservation this way (the inventory reports it released, or holding
	// other items), so that the retry of a create that succeeded — its
	// reservation confirmed or released since — still gets its order.
	ReplayOnly error
}

// NewOrder is the order a create of p writes at now: PENDING at version 1,
// expires_at = now + Timeout and cancel_after = expires_at + Grace, each to
// the millisecond. Every driver builds it here, so the deadlines mean the
// same on every store.
func (p CreateOrderParams) NewOrder(now time.Time) order.Order {
	o := order.Order{
		ID: p.ID, Status: order.Pending, Items: p.Items, AmountCents: p.AmountCents, Currency: p.Currency,
		CreatedAt: now, Version: 1, ReservationID: p.ReservationID,
	}
	o.ExpiresAt = now.Add(p.Timeout).Truncate(time.Millisecond)
	o.CancelAfter = o.ExpiresAt.Add(p.Grace).Truncate(time.Millisecond)
	return o
}

// ItemsBySKU returns a copy of items in SKU order. Drivers reserve an order's
// SKUs in this order, so two orders sharing SKUs never hold one row each while
// waiting for the other's.
func ItemsBySKU(items []order.Item) []order.Item {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b order.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return items
}

// CreateOrderResult is the order created, or the one an idempotency key already made.
type CreateOrderResult struct {
	Order    order.Order
	Replayed bool
}

// ListOrdersParams selects a page of orders.
type ListOrdersParams struct {
	Status order.Status // optional
	Limit  int
	Cursor string // opaque, from a previous page; empty for the first
}

// ListOrdersResult is a page of orders and the cursor of the next ("" at the end).
type ListOrdersResult struct {
	Orders     []order.Order
	NextCursor string
}

// StartPaymentParams starts a payment attempt.
type StartPaymentParams struct {
	OrderID string
	// PaymentID is the id the client uses at the gateway for this attempt;
	// empty: the store assigns "<order id>-<attempt number>".
	PaymentID string
}

// ExtendParams moves an order's deadline.
type ExtendParams struct {
	OrderID string
	// ExpiresAt is the new end of the payment window; cancel_after follows
	// it, the order's grace (cancel_after - expires_at) kept.
	ExpiresAt time.Time
}

// PaymentParams is a payment outcome reported by the gateway.
type PaymentParams struct {
	OrderID     string
	PaymentID   string
	AmountCents int64
	// Currency is the ISO 4217 code the gateway reported the amount in;
	// "" when it did not say, read as the order's. A payment in another
	// currency cannot pay the order: it is money to give back, as a
	// payment of another amount is.
	Currency string
	// CallbackID identifies the signed callback message that reported it
	// (a digest of its signed timestamp and body, whatever the spelling of
	// its signature header), empty when the outcome was learnt by a query. A
	// second report with the same CallbackID is a replay: it changes nothing
	// and returns OutcomeReplayed. Stores remember ids for an hour, longer
	// than the signature's replay window.
	CallbackID string
	// AutoRefund (--auto-refund): a success that ends REFUND_REQUIRED gets
	// its refund task (Refunds) in the same transaction, PENDING and due
	// now; a task the attempt has already is left as it is.
	AutoRefund bool
}

// CallbackMemory is how long stores remember callback ids.
const CallbackMemory = time.Hour

// PaymentOutcome says what a payment report did.
type PaymentOutcome int

// Payment outcomes.
const (
	OutcomeNoChange       PaymentOutcome = iota // a duplicate or a report with nothing to do
	OutcomePaid                                 // PENDING/PAYING → PAID
	OutcomeRefundRequired                       // a success that cannot pay the order: flagged for refund
	OutcomeFailed                               // PAYING → PENDING
	OutcomeReplayed                             // the same callback again: nothing done
	// OutcomeConflict: a report of an attempt that has ended (SUCCEEDED,
	// REFUND_REQUIRED) that disagrees with how it ended — another amount,
	// or a FAILED after a success. Nothing changes; the attempt counts the
	// conflict (order.Payment.Conflicts) for a person to look at.
	OutcomeConflict
)

// PaymentResult is the order after a payment report and what the report did.
type PaymentResult struct {
	Order   order.Order
	Outcome PaymentOutcome
	// Superseded: the payment paid the order while another attempt was
	// open, and that attempt is now SUPERSEDED — still open at a gateway
	// that keeps a trade per attempt, to be closed there.
	Superseded bool
}

// CancelDueParams is a batch of due timers, or a claim of due orders.
type CancelDueParams struct {
	IDs []string
	// Claim, when IDs is empty, makes the store pick up to Claim due orders.
	Claim int
	// Lag, with Claim, only takes orders overdue by more than Lag (the
	// fallback sweep leaves the primary timers their chance first).
	Lag time.Duration
	// SkipAttempted leaves PENDING orders with a failed payment attempt alone,
	// for the gateway check (a gateway is configured).
	SkipAttempted bool
	// Confirmed says the gateway confirmed these orders' trades are closed
	// and unpaid: PAYING orders (and attempted PENDING ones) past cancel_after
	// are cancelled too. Only with IDs.
	Confirmed bool
	// Command: the order service owns these orders (order-service mode,
	// docs/order-service.md). Due orders are not cancelled: they move to
	// CANCELLING and their cancel commands are written (store.Commands),
	// in the same transaction; Cancelled lists them.
	Command bool
	// CommandLease, with Command, claims the commands the batch writes for
	// the caller, as ClaimCommands would for CommandLease, in the same
	// transaction: CancelDueResult.Commands lists them, bodies included, for
	// the caller to send at once (ordersvc.Dispatcher.Hold) — no claim
	// transaction after the commit, no wait for a dispatcher's turn. If the
	// caller dies before settling them the lease runs out and any
	// dispatcher claims them, as after a claim. A store whose driver cannot
	// tell which commands it wrote (MySQL: no RETURNING) claims none: they
	// are due at once, for the dispatchers.
	CommandLease time.Duration
	// Reason is the cancel_reason the batch writes: order.ReasonTimeout
	// when empty. order.ReasonOperator is an operator's cancel: only with
	// IDs and Confirmed, never with Command, and the deadline does not bind
	// (PENDING and PAYING orders are cancelled whatever their cancel_after:
	// an operator decides). Any other reason is ErrInvalid.
	Reason order.CancelReason
	// Why, when set, says why the orders were cancelled beyond their
	// cancel_reason (payment_unknown: the gateway never knew the attempt);
	// their order.cancelled events carry it as cancel_detail.
	Why string
}

// Cancelled is one order a batch cancelled.
type Cancelled struct {
	ID              string
	CancelAfter     time.Time
	CancelledAt     time.Time
	PaymentAttempts int
}

// Skipped is one order of a batch left as it was, with why.
type Skipped struct {
	ID              string
	Status          order.Status
	CancelAfter     time.Time
	PaymentAttempts int
	Missing         bool // no such order
}

// CancelDueResult splits a batch into what was cancelled and what was not.
type CancelDueResult struct {
	Cancelled []Cancelled
	Skipped   []Skipped
	Now       time.Time // the store's clock at the cancel
	// HookFailed are the orders of the batch whose OnCancelled hook failed:
	// the batch committed without them, they are still due.
	HookFailed []*HookError
	// Commands are the commands the batch wrote claimed for the caller
	// (CancelDueParams.CommandLease).
	Commands []ClaimedCommand
}

// Deadline is when a pending order's timer must fire.
type Deadline struct {
	OrderID     string
	CancelAfter time.Time
}

// SKU is one stock-keeping unit's counters.
type SKU struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Locked    int64  `json:"locked"`
	Sold      int64  `json:"sold"`
}

// AuditParams tunes the audit.
type AuditParams struct {
	// AllowedLag is how long a PENDING order may stay past cancel_after
	// before it counts as a violation (a timer lost or a worker behind).
	AllowedLag time.Duration
	// MaxExamples bounds the examples listed per check.
	MaxExamples int
}

// AuditReport is the outcome of every check.
type AuditReport struct {
	At     time.Time
	Checks []AuditCheck
}

// AuditCheck is one invariant and what was found.
type AuditCheck struct {
	Name string
	// Warning marks a check whose findings are worth a look but break no
	// invariant (PAYING orders past their deadline, waiting for a callback).
	Warning  bool
	Count    int64    // rows violating it
	Examples []string // a few of them, readable
}

// OK reports whether no invariant is violated (warnings do not count).
func (r AuditReport) OK() bool {
	for _, c := range r.Checks {
		if !c.Warning && c.Count > 0 {
			return false
		}
	}
	return true
}
