// Package core holds the logic of every store transaction once: which
// statements run in which order, what is decided in Go, the order SKU rows are
// locked in, how a write that matched nothing is explained, replays and
// idempotency keys, and the ledger and outbox rows each transition leaves.
//
// A driver (store/sqlite, store/postgres, store/mysql) supplies an Executor:
// one method per statement, or per small group of statements that always run
// together, plus the dialect facts the core cannot know — its placeholders and
// list encoding, RETURNING or a read back, its lock clause, its clock and how
// its errors classify. Nothing in a driver decides a transition; nothing in
// the core names a table. docs/architecture.md walks through the layers.
package core

import (
	"context"
	"errors"
	"time"

	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Executor runs single statements on a connection pool or inside a
// transaction. Methods that change rows are only called inside one (on an
// ExecutorTx); reads are called on either.
//
// Conventions every driver keeps:
//   - Orders come back with their items, in SKU byte order.
//   - Lists of SKUs are passed in byte order (strings.Compare) and rows are
//     locked in exactly that order, whatever the database's collation, so two
//     transactions sharing SKUs queue instead of deadlocking.
//   - A guarded UPDATE that matched no row answers ok=false, not an error.
//   - Errors leave the driver mapped: no row → store.ErrNotFound, a duplicate
//     order id → store.ErrOrderExists, a second ledger row → ErrMovedTwice.
type Executor interface {
	// DBNow reads the database's clock, truncated to milliseconds, in UTC.
	DBNow(ctx context.Context) (time.Time, error)

	// Orders reads the orders of ids; missing ones are left out, the rest
	// come in any order.
	Orders(ctx context.Context, ids []string) ([]order.Order, error)
	// ListOrders reads up to Limit orders newest first, after the cursor.
	ListOrders(ctx context.Context, a ListArgs) ([]order.Order, error)
	// GetSKU reads one SKU's counters, or store.ErrNotFound.
	GetSKU(ctx context.Context, sku string) (store.SKU, error)
	// UnpublishedEvents reads up to limit unpublished events, oldest first.
	UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error)
	// PaymentChecks reads PAYING orders and PENDING ones with a failed
	// attempt whose cancel_after <= dueBy, earliest first.
	PaymentChecks(ctx context.Context, dueBy time.Time, limit int) ([]store.Deadline, error)
	// NextDeadline reads the earliest cancel_after of a PENDING order (with
	// skipAttempted, of one with no failed payment attempt).
	NextDeadline(ctx context.Context, skipAttempted bool) (time.Time, bool, error)
	// PendingDeadlines pages PENDING orders in (cancel_after, id) order.
	PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error)
	// CountStuck counts PAYING orders with cancel_after <= now.
	CountStuck(ctx context.Context, now time.Time) (int64, error)
	// AuditRows runs one check of the driver's audit file and calls row for
	// every violation it finds.
	AuditRows(ctx context.Context, check sqlfile.Query, now time.Time, lag time.Duration, row func(detail string)) error

	// LockOrder reads one order and holds its row until the transaction
	// ends (FOR UPDATE where rows lock; a plain read under a single writer).
	LockOrder(ctx context.Context, id string) (order.Order, error)
	// ClaimKey takes an idempotency key for orderID. claimed=false: another
	// request holds it (a concurrent holder is waited for first).
	ClaimKey(ctx context.Context, k Key, now time.Time) (claimed bool, err error)
	// KeyOwner reads the request hash and order id a key was taken for;
	// store.ErrNotFound when no order took it.
	KeyOwner(ctx context.Context, key string) (hash, orderID string, err error)
	// InsertOrder writes a new PENDING order and its items;
	// store.ErrOrderExists if the id is taken.
	InsertOrder(ctx context.Context, o order.Order) error
	// ReserveSKU moves qty units of sku from available to locked if there
	// are that many; ok=false otherwise (or no such SKU).
	ReserveSKU(ctx context.Context, sku string, qty int64, now time.Time) (ok bool, err error)
	// StartPayment: PENDING with expires_at > now → PAYING, payment_id set to
	// paymentID, or when empty to "<id>-<n>", n = the order's payment rows + 1.
	StartPayment(ctx context.Context, id, paymentID string, now time.Time) (order.Order, bool, error)
	// SupersedePayment: PAYING with payment_id = oldID and expires_at > now
	// → payment_id = newID (still PAYING).
	SupersedePayment(ctx context.Context, id, oldID, newID string, now time.Time) (order.Order, bool, error)
	// MarkPaid: PENDING or PAYING with the amount and currency (p.Currency
	// "" for the order's) → PAID with p.PaymentID, unless the attempt
	// p.PaymentID has ended (SUCCEEDED, REFUND_REQUIRED) or another attempt
	// is open (PENDING).
	MarkPaid(ctx context.Context, p store.PaymentParams, now time.Time) (order.Order, bool, error)
	// FlagRefund sets refund_required on an order (the caller holds its
	// row); when paymentID is the current attempt of a PAYING order, the
	// order goes back to PENDING with one more failed attempt.
	FlagRefund(ctx context.Context, id, paymentID string, now time.Time) (order.Order, bool, error)
	// FailPayment: PAYING whose payment_id is paymentID (or none, an attempt
	// started before attempts had ids) → PENDING, one more failed attempt.
	// It reads no clock: a failure learnt by a gateway query needs none.
	FailPayment(ctx context.Context, id, paymentID string) (order.Order, bool, error)

	// OrdersOfPayment reads the ids of up to two orders with an attempt
	// named paymentID.
	OrdersOfPayment(ctx context.Context, paymentID string) ([]string, error)
	// Payments reads the payment attempts of an order, oldest first.
	Payments(ctx context.Context, orderID string) ([]order.Payment, error)
	// InsertPayment records a new attempt; store.ErrPaymentIDUsed when the
	// order has one by that id.
	InsertPayment(ctx context.Context, orderID string, p order.Payment) error
	// SavePayment records an attempt's outcome (Status, AmountCents,
	// Currency, UpdatedAt), inserting it when the order has none by that id
	// (a payment the gateway reports that lapse never started). An attempt
	// that has ended is left as it is; store.ErrPaymentIDUsed when another
	// order has an attempt by that id.
	SavePayment(ctx context.Context, orderID string, p order.Payment) error
	// NoteConflict counts one report that disagreed with how an attempt ended.
	NoteConflict(ctx context.Context, orderID, paymentID string) error
	// EndPayment moves an open attempt (PENDING or SUPERSEDED) to status;
	// ok=false when the order has no open attempt by that id.
	EndPayment(ctx context.Context, orderID, paymentID string, status order.PaymentStatus, now time.Time) (bool, error)
	// ExtendOrder: PENDING with expires_at > now → expires_at = expiresAt
	// and cancel_after = expiresAt + (cancel_after - expires_at), the grace
	// kept, version + 1.
	ExtendOrder(ctx context.Context, id string, expiresAt, now time.Time) (order.Order, bool, error)
	// BuyerCancel: PENDING → CANCELLED (reason buyer).
	BuyerCancel(ctx context.Context, id string, now time.Time) (order.Order, bool, error)
	// CancelDue cancels (reason timeout) those of a batch that are due and
	// returns them. The ids are unique and sorted.
	CancelDue(ctx context.Context, a CancelArgs) ([]order.Order, error)
	// ClaimDue finds up to a.Limit due orders, skipping rows other
	// transactions hold, and cancels them like CancelDue.
	ClaimDue(ctx context.Context, a ClaimArgs) ([]order.Order, error)
	// SeeCallback forgets callback ids seen before forgetBefore and records
	// this one; first=false means it was recorded before (a replay).
	SeeCallback(ctx context.Context, callbackID, orderID string, now, forgetBefore time.Time) (first bool, err error)
	// WriteEffects writes what a transition leaves besides the order rows
	// (see Effects), in as few round trips as the driver can.
	WriteEffects(ctx context.Context, e Effects) error
	// SetStock sets a SKU's available units (creating it) and returns its counters.
	SetStock(ctx context.Context, sku string, available int64, now time.Time) (store.SKU, error)
	// MarkPublished marks the events of seqs that have no delivery row left
	// published at now.
	MarkPublished(ctx context.Context, seqs []int64, now time.Time) error
	// NoteHookFailure records one more failure of the hook of event for
	// orderID at now (a new record: attempts 1, first failed now), the
	// error as given, and returns its attempts and first failure.
	NoteHookFailure(ctx context.Context, orderID, event, lastError string, now time.Time) (attempts int, first time.Time, err error)
	// SetHookRetry sets when the record of (orderID, event) is tried again.
	SetHookRetry(ctx context.Context, orderID, event string, nextAt time.Time) error
	// HookFailures reads up to limit records whose order is PENDING, the
	// oldest first_failed_at first.
	HookFailures(ctx context.Context, limit int) ([]store.HookFailure, error)
	OutboxExecutor
	TaskExecutor
	DashboardExecutor
}

// DashboardExecutor runs the reads of store.Dashboard. None locks anything;
// each is bounded by an index range (see each driver's queries.sql).
type DashboardExecutor interface {
	// CountStatus counts the orders of one status, stopping at limit.
	CountStatus(ctx context.Context, status order.Status, limit int64) (int64, error)
	// CountRefundRequired counts orders flagged refund_required, stopping at limit.
	CountRefundRequired(ctx context.Context, limit int64) (int64, error)
	// CountHookFailing counts hook failure records whose order is PENDING,
	// stopping at limit.
	CountHookFailing(ctx context.Context, limit int64) (int64, error)
	// DuePerMinute counts PENDING orders by the minute of their
	// cancel_after, for from <= cancel_after < to, minutes in order.
	DuePerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error)
	// CancelledPerMinute counts orders by the minute of cancelled_at, for
	// from <= cancelled_at < to.
	CancelledPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error)
	// PaidPerMinute counts orders by the minute of paid_at, for from <=
	// paid_at < to.
	PaidPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error)
	// RefundsPerMinute counts REFUND_REQUIRED payment attempts by the
	// minute of their updated_at (when they were flagged), and REFUNDED
	// ones by the minute of their refund, within [from, to).
	RefundsPerMinute(ctx context.Context, from, to time.Time) ([]store.MinuteCount, error)
	// FindOrders reads up to a.Limit orders with created_at >= a.From and
	// (created_at, id) < (a.BeforeCreated, a.BeforeID), of a.Status if set,
	// newest first.
	FindOrders(ctx context.Context, a FindArgs) ([]order.Order, error)
	// FindOrdersByPrefix reads up to a.Limit orders with a.Prefix <= id <
	// a.PrefixEnd, id > a.AfterID, starting with a.Prefix, of a.Status if
	// set and created in [a.From, a.BeforeCreated), in id order.
	FindOrdersByPrefix(ctx context.Context, a FindArgs) ([]order.Order, error)
	// RefundOrders reads up to limit orders flagged refund_required with
	// id > afterID, in id order.
	RefundOrders(ctx context.Context, afterID string, limit int) ([]order.Order, error)
	// FindPastDeadline reads up to a.Limit orders of a.Status with
	// cancel_after < a.Now and (cancel_after, id) > (a.AfterCancel,
	// a.AfterID), in (cancel_after, id) order, ids in byte order.
	FindPastDeadline(ctx context.Context, a PastDeadlineArgs) ([]order.Order, error)
	// OrderEvents reads the outbox events of one order, in seq order.
	OrderEvents(ctx context.Context, orderID string) ([]order.Event, error)
	// ListSKUs reads up to limit SKUs with sku > after, in byte order.
	ListSKUs(ctx context.Context, after string, limit int) ([]store.SKU, error)
}

// FindArgs selects orders for DashboardExecutor.FindOrders and FindOrdersByPrefix.
type FindArgs struct {
	Status order.Status // "" for any
	From   time.Time    // created_at >= From
	// BeforeCreated bounds created_at (and, with BeforeID, is the cursor of
	// FindOrders: the page starts after (BeforeCreated, BeforeID)).
	BeforeCreated time.Time
	BeforeID      string
	// Prefix, PrefixEnd and AfterID are FindOrdersByPrefix's.
	Prefix, PrefixEnd, AfterID string
	Limit                      int
}

// PastDeadlineArgs selects orders for DashboardExecutor.FindPastDeadline.
type PastDeadlineArgs struct {
	Status order.Status
	Now    time.Time
	// AfterCancel and AfterID are the cursor: the page starts after them.
	AfterCancel time.Time
	AfterID     string
	Limit       int
}

// TaskExecutor runs the statements of the stock tasks (store.Tasks). Tasks
// are written by WriteEffects (Effects.Tasks), beside the transition.
type TaskExecutor interface {
	// ClaimTasks leases up to limit PENDING tasks with next_at <= now,
	// earliest first, skipping rows other claims hold: next_at becomes
	// leaseUntil and attempts grows by one.
	ClaimTasks(ctx context.Context, limit int, now, leaseUntil time.Time) ([]store.ClaimedTask, error)
	// SettleTask records o on its row if the row is PENDING and its
	// attempts still match: DONE (done_at = now), or one more failure with
	// next_at, the error and, when dead, DEAD (dead_at = now).
	SettleTask(ctx context.Context, o store.TaskOutcome, now, nextAt time.Time) error
	// ListTasks pages tasks in id order (see store.ListTasksParams).
	ListTasks(ctx context.Context, p store.ListTasksParams) ([]order.StockTask, error)
	// TaskRefs pages every task in id order after the cursor (see
	// store.Tasks.TaskRefs).
	TaskRefs(ctx context.Context, after string, limit int) ([]store.TaskRef, error)
	// RetryTasks makes the DEAD tasks p selects PENDING, due at now, with no
	// failures since now, and returns how many.
	RetryTasks(ctx context.Context, p store.RetryTasksParams, now time.Time) (int64, error)
	// TaskStats counts PENDING and DEAD tasks (Now is the caller's).
	TaskStats(ctx context.Context) (store.TaskStats, error)
	// LockTask reads the task (reservation, action) and holds its row until
	// the transaction ends; store.ErrNotFound when there is none.
	LockTask(ctx context.Context, reservation string, action order.TaskAction) (store.ClaimedTask, error)
	// LeaseTask leases task id whatever its status: PENDING, next_at =
	// leaseUntil, attempts + 1; the task as it is then.
	LeaseTask(ctx context.Context, id string, leaseUntil time.Time) (store.ClaimedTask, error)
}

// OutboxExecutor runs the statements of the outbox (store.Outbox): sinks,
// the fan-out of events to one delivery row per sink, claims and settles.
type OutboxExecutor interface {
	// RegisterSinks inserts the sink names that are not registered yet.
	RegisterSinks(ctx context.Context, names []string, now time.Time) error
	// LockFanOut takes the fan-out turn for the transaction, skipping
	// (false) if another transaction holds it: fan-outs run one at a time,
	// so a fan-out never sees an order's later event without its earlier one.
	LockFanOut(ctx context.Context) (bool, error)
	// FanOut gives up to limit events that are not fanned out yet, lowest
	// seq first, one delivery row per registered sink, due at now; marks
	// them fanned out and returns how many events it took.
	FanOut(ctx context.Context, limit int, now time.Time) (int64, error)
	// ClaimDeliveries leases up to limit of sink's deliveries that are not
	// dead, due (next_at <= now) and the lowest pending seq of their order
	// for the sink, lowest seq first, skipping rows other claims hold:
	// next_at becomes leaseUntil and attempts grows by one. It returns them
	// with their events (Sink, Attempts, Refusals, FirstRefused, Event).
	ClaimDeliveries(ctx context.Context, sink string, limit int, now, leaseUntil time.Time) ([]store.Delivery, error)
	// DeleteDeliveries deletes sink's delivery rows (seqs[i], attempts[i]):
	// those delivered by the claim that holds them.
	DeleteDeliveries(ctx context.Context, sink string, seqs []int64, attempts []int) error
	// FailDelivery records a failed attempt of o on sink's row (if its
	// attempts still match): next_at, the error, one more refusal and
	// first_refused_at (if unset) when refused, dead and dead_at when dead.
	FailDelivery(ctx context.Context, sink string, o store.Outcome, now, nextAt time.Time) error
	// ListDeliveries pages delivery rows with their events, in seq order.
	ListDeliveries(ctx context.Context, p store.ListEventsParams) ([]store.EventDelivery, error)
	// RetryDeliveries makes the dead rows p selects due at now, clears their
	// refusals, and returns how many.
	RetryDeliveries(ctx context.Context, p store.RetryEventsParams, now time.Time) (int64, error)
	// PurgeDeliveries deletes the dead rows p selects and returns their seqs.
	PurgeDeliveries(ctx context.Context, p store.PurgeEventsParams) ([]int64, error)
	// MarkDrained marks up to limit fanned-out events with no delivery row
	// left published at now (a settle racing another sink's may leave one
	// unmarked) and returns how many.
	MarkDrained(ctx context.Context, limit int, now time.Time) (int64, error)
	// DeleteOutbox deletes up to limit events published before before.
	DeleteOutbox(ctx context.Context, before time.Time, limit int) (int64, error)
	// ForgetSink deletes the sink's registration and its delivery rows and
	// returns how many delivery rows went.
	ForgetSink(ctx context.Context, name string) (int64, error)
	// OutboxStats counts the backlog (Now is the caller's).
	OutboxStats(ctx context.Context) (store.OutboxStats, error)
}

// ExecutorTx is an Executor inside a transaction.
type ExecutorTx interface {
	Executor
	Commit(ctx context.Context) error
	// Rollback ends the transaction; it must work on a context already
	// cancelled (drivers use context.WithoutCancel).
	Rollback(ctx context.Context) error
	// Savepoint, RollbackToSavepoint and ReleaseSavepoint bracket one
	// create of a group committed together (see group.go).
	Savepoint(ctx context.Context) error
	RollbackToSavepoint(ctx context.Context) error
	ReleaseSavepoint(ctx context.Context) error
}

// Driver is what a store package hands the core.
type Driver interface {
	// Executor runs reads on the pool, outside any transaction.
	Executor
	// Begin starts a transaction.
	Begin(ctx context.Context, o TxOptions) (ExecutorTx, error)
	// Class says what an error that ended a transaction means.
	Class(err error) ErrorClass
	// AuditChecks lists the driver's audit queries, in report order.
	AuditChecks() []sqlfile.Query
}

// GroupExecutor is an optional capability of an ExecutorTx: it creates a
// group of orders in two round trips (PostgreSQL's pipelined group commit)
// instead of one savepoint per order. The core decides which orders of the
// group are created, with the same function that orders a lone create's
// checks (Admit), so a group answers as lone transactions would.
type GroupExecutor interface {
	// LockGroup takes the group's idempotency keys (in key byte order),
	// finds which of its order ids already exist, and locks and reads its
	// SKU rows (in byte order).
	LockGroup(ctx context.Context, a LockGroupArgs) (GroupState, error)
	// WriteGroup writes the accepted orders, their items, their summed
	// reservations and their effects, and gives back the keys of refused
	// orders. A reservation that changes fewer rows than a.SKUs is
	// ErrGroupMismatch.
	WriteGroup(ctx context.Context, a WriteGroupArgs) error
}

// CreateExecutor is an optional capability of an ExecutorTx: a lone create
// in one round trip (PostgreSQL: one statement, led by a savepoint when
// guarded) instead of one per step. The driver decides nothing: it writes the
// create as if every check passed and reports what it found on the way
// (CreateState); the core then applies createIn's checks, in createIn's
// order, with Admit, and has the create undone when it refuses it
// (onetrip.go). Every time the statement writes is its now plus an offset
// the core computed, so the database's clock can be read by the statement
// itself (the rule of DueClockExecutor).
type CreateExecutor interface {
	// SendCreate writes a's order in one round trip, in this order (the
	// lock order of a create): the idempotency key (when another request
	// holds it, waiting for that request first, nothing else is written);
	// the order and its items, unless the order id is taken (then nothing
	// more is written, and no error); with a.Reserve, the lock of the SKU
	// rows in byte order, then the reservation of each SKU that has the
	// units (the others are left as they are) and the reserve ledger rows;
	// and the event. With a.Guard a savepoint leads the round trip, for
	// UndoCreate.
	SendCreate(ctx context.Context, a CreateArgs) (CreateState, error)
	// UndoCreate rolls the transaction back to the savepoint of the last
	// SendCreate with Guard, and releases it: what the create wrote and
	// locked is gone, and the transaction goes on.
	UndoCreate(ctx context.Context) error
}

// CreateArgs is one create for CreateExecutor.SendCreate.
type CreateArgs struct {
	// Tell: the store tells other instances the deadline at commit
	// (Config.TellDeadlines), in the create's own round trip.
	Tell bool
	// Now is the transaction's now; zero: the statement reads the
	// database's clock (truncated to milliseconds), once, for every time it
	// writes.
	Now time.Time
	// Guard: a savepoint first, for UndoCreate (a caller's transaction).
	Guard bool
	// Group: the create is a group of one, whose transaction holds up the
	// groups queued behind it: its lock waits are bounded as a group's are
	// (GroupExecutor.LockGroup), and a wait past the bound fails it.
	Group bool
	Key   Key // Key.Key "": none
	// Order is the order to write: ID, Items (in SKU order), AmountCents,
	// Currency, ReservationID. Its times are the statement's: created_at
	// now, expires_at now + ExpiresIn, cancel_after now + CancelIn.
	Order               order.Order
	ExpiresIn, CancelIn time.Duration
	// Reserve: lapse holds the order's stock (no ReservationID); its items'
	// units are reserved and recorded in the ledger (MoveReserve).
	Reserve bool
	// Event is the order.created event, written at now; its Payload is
	// left empty: PayloadParts holds it cut around the values of the
	// order's created_at, expires_at and cancel_after, which the statement
	// writes in order.TimeFormat:
	// parts[0] created parts[1] expires parts[2] cancel_after parts[3].
	Event        NewEvent
	EventType    string
	PayloadParts [4]string
}

// CreateState is what SendCreate found, for Admit: whether it took the key
// (Claimed), whether the order id was taken (Existing: the order was not
// written), and each locked SKU's available units before the reservation
// (Available). Reserved is how many SKU rows the reservation changed.
type CreateState struct {
	Now time.Time // the statement's now
	GroupState
	Reserved int
}

// DueClockExecutor is an optional capability of an ExecutorTx: a timeout
// cancel whose statement reads the database's clock itself and returns it
// with the orders it cancelled — the clock folded into the UPDATE, one round
// trip fewer than DBNow then CancelDue. The guard is the same
// (cancel_after <= now, against the database's one clock); only where now is
// read moves. The core uses it only when the store has no Config.Clock and
// the transaction has read no clock yet; a.Now is then zero and, for a
// claim, a.DueBy too: the statement takes cancel_after <= its now - a.Lag.
type DueClockExecutor interface {
	// CancelDueClocked is CancelDue reading now itself.
	CancelDueClocked(ctx context.Context, a CancelArgs) ([]order.Order, time.Time, error)
	// ClaimDueClocked is ClaimDue reading now itself.
	ClaimDueClocked(ctx context.Context, a ClaimArgs) ([]order.Order, time.Time, error)
}

// EffectsCommitter is an optional capability of an ExecutorTx: it writes a
// transaction's last effects and commits in one round trip (PostgreSQL's
// pipeline). The core decides which effects go last (Tx.effectsAtCommit);
// a driver without it has them written by WriteEffects, then Commit. An
// error leaves the transaction to be rolled back, as any statement's does.
type EffectsCommitter interface {
	CommitEffects(ctx context.Context, e Effects) error
}

// TxOptions says what kind of transaction to begin.
type TxOptions struct {
	// Urgent marks a timeout cancel: a store with one writer hands it the
	// connection before the other waiters.
	Urgent bool
	// ReadOnly asks for a read-only snapshot (the audit).
	ReadOnly bool
}

// ErrorClass says what an error that ended a transaction means.
type ErrorClass int

// Error classes.
const (
	// ClassUnknown: the connection or the context failed, and whether a
	// COMMIT happened is not known.
	ClassUnknown ErrorClass = iota
	// ClassRetry: a deadlock, a serialization failure or a lock-wait
	// timeout rolled the transaction back; it can run again.
	ClassRetry
	// ClassRefused: the server refused a statement (a constraint, a bad
	// value) and the transaction wrote nothing.
	ClassRefused
)

// ErrMovedTwice is a stock movement the ledger already holds: a guard let a
// second release or commit through, and the ledger's key refused it.
var ErrMovedTwice = errors.New("store: stock ledger already holds this movement")

// ErrGroupMismatch is a group reservation that changed fewer SKU rows than
// it locked and checked: it should not happen, and the orders are then
// created one by one.
var ErrGroupMismatch = errors.New("store: group reservation changed fewer SKU rows than checked")

// ListArgs selects a page of orders for Executor.ListOrders.
type ListArgs struct {
	Status order.Status // "" for any
	// First is true for the first page; otherwise the page starts after
	// (AfterCreated, AfterID).
	First        bool
	AfterCreated time.Time
	AfterID      string
	Limit        int
}

// Key is an idempotency key taken for an order.
type Key struct {
	Key, RequestHash, OrderID string
}

// CancelArgs is a batch of timers for Executor.CancelDue.
type CancelArgs struct {
	IDs []string // unique, in byte order
	Now time.Time
	// SkipAttempted leaves PENDING orders with a failed payment attempt alone.
	SkipAttempted bool
	// Confirmed also takes PAYING (and attempted) orders: the gateway
	// confirmed their trades closed.
	Confirmed bool
	// Reason is the cancel_reason written (never empty: the core fills
	// order.ReasonTimeout in).
	Reason order.CancelReason
	// Anytime: the deadline does not bind (an operator's cancel,
	// store.CancelDueParams.Reason).
	Anytime bool
}

// ClaimArgs is a claim of due orders for Executor.ClaimDue.
type ClaimArgs struct {
	Now   time.Time
	DueBy time.Time // cancel_after <= DueBy; never after Now
	// Lag, for ClaimDueClocked (Now and DueBy zero): DueBy is the
	// statement's now - Lag. Never negative.
	Lag           time.Duration
	Limit         int
	SkipAttempted bool
}

// Move is a stock movement recorded in the ledger.
type Move string

// Stock movements.
const (
	MoveNone    Move = ""
	MoveReserve Move = "reserve" // ledger rows only: the counters moved item by item
	MoveRelease Move = "release" // locked → available
	MoveCommit  Move = "commit"  // locked → sold
)

// Effects is what a transition of some orders leaves besides the order rows.
// The ledger goes first: its key refuses a second release or commit, and the
// error rolls the transaction back before any counter moves twice.
type Effects struct {
	Now time.Time
	// Move, when not MoveNone, writes one ledger row per item of the orders IDs.
	Move Move
	IDs  []string
	// SKUs and Qtys, for MoveRelease and MoveCommit, are the units the orders
	// hold per SKU, SKUs in byte order: the driver locks the SKU rows in that
	// order, then moves the counters.
	SKUs []string
	Qtys []int64
	// Events are outbox rows of type Type, in order.
	Type   string
	Events []NewEvent
	// Tasks are stock tasks of orders whose stock a remote inventory holds
	// (those orders are not in IDs). Their key (order, action) refuses a
	// second one as the ledger's does: ErrMovedTwice.
	Tasks []NewTask
	// TasksDue is when the Tasks are first due; zero: Now.
	TasksDue time.Time
	// Due are the deadlines the transition sets (a create, an extend): a
	// driver that tells other instances of a deadline at commit
	// (store.DueListener) sends them with these statements, in no round trip
	// of its own; any other ignores them.
	Due []store.Deadline
	// HooksHeld are orders whose hook ran in this transaction and held:
	// their hook failure records (store.HookFailure) go.
	HooksHeld []string
}

// NewTask is one stock task to write, PENDING and due at once.
type NewTask struct {
	ID            string // UUIDv7
	OrderID       string
	Action        order.TaskAction
	ReservationID string
	Items         []byte // JSON [{"sku","qty"}]
}

// NewEvent is one outbox row to write.
type NewEvent struct {
	ID      string // UUIDv7
	OrderID string
	Payload []byte // the order as the API shows it
}

// LockGroupArgs is what GroupExecutor.LockGroup takes and locks.
type LockGroupArgs struct {
	Now  time.Time
	Keys []Key    // unique, in key byte order
	IDs  []string // the group's order ids
	SKUs []string // unique, in byte order
}

// GroupState is what a group found once it held its keys and SKU rows.
type GroupState struct {
	Claimed   map[string]bool  // keys this transaction took
	Existing  map[string]bool  // order ids already taken
	Available map[string]int64 // SKU → available units (missing: no such SKU)
}

// WriteGroupArgs is what GroupExecutor.WriteGroup writes.
type WriteGroupArgs struct {
	Now    time.Time
	Orders []order.Order // accepted, items in SKU order
	// SKUs (byte order) and Qtys are the units the accepted orders take.
	SKUs     []string
	Qtys     []int64
	Effects  Effects  // reserve ledger rows and order.created events
	GiveBack []string // keys of refused orders, freed as a rollback would
}
