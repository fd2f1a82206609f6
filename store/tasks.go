package store

import (
	"context"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Tasks holds the stock tasks of orders whose stock another service keeps
// (docs/sagas.md): each transition that must move remote stock writes one,
// keyed (order, action), in the transition's own transaction. Any number of
// dispatchers share them: a dispatcher claims a batch with a lease, sends each
// task's command to the inventory, then settles it.
type Tasks interface {
	// ClaimTasks leases up to Limit PENDING tasks that are due (next_at <=
	// now), earliest first, skipping rows other claims hold: next_at moves
	// to now + Lease and attempts grows by one.
	ClaimTasks(ctx context.Context, p ClaimTasksParams) ([]ClaimedTask, error)
	// SettleTasks records what became of claimed tasks. An outcome whose
	// Attempts no longer match the row (its lease ran out and another
	// dispatcher claimed it) is ignored: that dispatcher settles it.
	SettleTasks(ctx context.Context, outcomes []TaskOutcome) error
	// ListTasks pages tasks in id order: those not DONE, or with Dead only
	// DEAD ones, or with OrderID every task of that order.
	ListTasks(ctx context.Context, p ListTasksParams) ([]order.StockTask, error)
	// TaskRefs pages every task, DONE ones too, in id order after the
	// cursor (an id; "" for the first page), with only what names it: for
	// `lapse reconcile --inventory`, which matches each row of the
	// inventory's ledger with the task that sent it.
	TaskRefs(ctx context.Context, after string, limit int) ([]TaskRef, error)
	// RetryTasks makes DEAD tasks (those of IDs, or with AllDead every one)
	// PENDING and due now, their failures and age counted afresh, and
	// returns how many.
	RetryTasks(ctx context.Context, p RetryTasksParams) (int64, error)
	// TaskStats counts the tasks not DONE (metrics, the dashboard).
	TaskStats(ctx context.Context) (TaskStats, error)

	// BeginReserve starts a create whose stock lapse reserves itself at the
	// remote inventory (--inventory-reserve): the order's reserve task — the
	// reserving step — is written (or, for a retry of the create, found)
	// and leased to the caller for lease, so that no dispatcher sends it
	// meanwhile. Exists says the order was created already: the caller
	// creates it as usual (a replay of its idempotency key, or
	// ErrOrderExists). A reserve the inventory refused before is
	// ErrInsufficientStock; one whose stock was given back since (the create
	// failed and was compensated) is ErrReservationReleased.
	BeginReserve(ctx context.Context, p CreateOrderParams, lease time.Duration) (ReserveStart, error)
	// CreateReserved creates the order once the inventory holds its stock,
	// and marks its reserve task DONE, in one transaction. A create that
	// fails (ErrOrderExists, ErrIdempotencyMismatch) gives the stock back:
	// the reserve task is DONE and a release task is written beside it. A
	// reservation a dispatcher released meanwhile is ErrReservationReleased.
	CreateReserved(ctx context.Context, p CreateOrderParams, t ClaimedTask, result string) (CreateOrderResult, error)
	// DropReserve ends a reserve the inventory refused: the reserve task is
	// DONE with result, and nothing else is written.
	DropReserve(ctx context.Context, t ClaimedTask, result string) error
}

// ReserveStart is where a create with --inventory-reserve stands.
type ReserveStart struct {
	// Task is the order's reserve task, leased to the caller.
	Task ClaimedTask
	// Exists: the order was created already; create it as usual.
	Exists bool
}

// ClaimTasksParams says what a dispatcher claims.
type ClaimTasksParams struct {
	Limit int
	// Lease is how long the claim holds the tasks: past it they are
	// claimable again (a dispatcher that died mid-send is covered).
	Lease time.Duration
}

// ClaimedTask is one task a claim leased.
type ClaimedTask struct {
	order.StockTask
	// Failures counts failed sends since the task was written or last
	// retried by an operator; Since is when that was. With them the
	// dispatcher decides when a task is DEAD (--task-max-attempts,
	// --task-max-age).
	Failures int
	Since    time.Time
	// ClaimedAt is the store's time of the claim.
	ClaimedAt time.Time
}

// TaskOutcome is what became of one claimed task.
type TaskOutcome struct {
	ID       string
	Attempts int // the claim's, as ClaimedTask.Attempts
	// Action and OrderID are the task's. A reserve that ends DONE for an
	// order that was never created (its create failed or was abandoned)
	// gives its stock back: the settle writes the order's release task.
	Action        order.TaskAction
	OrderID       string
	ReservationID string
	// Done: the inventory applied the command (now or before); the task is
	// DONE. Otherwise the send failed: Error says why, Dead parks the task
	// for an operator, and RetryIn is when it is due again.
	Done    bool
	Result  string // the inventory's answer, "" when none came
	Error   string
	Dead    bool
	RetryIn time.Duration
}

// TaskRef names one stock task: its id is the task id the inventory's
// ledger records for the command it sent.
type TaskRef struct {
	ID            string
	OrderID       string
	Action        order.TaskAction
	ReservationID string
}

// ListTasksParams filters ListTasks.
type ListTasksParams struct {
	Dead    bool
	OrderID string
	// After is the cursor: tasks with id > After.
	After string
	// Limit defaults to 100.
	Limit int
}

// RetryTasksParams selects DEAD tasks to send again.
type RetryTasksParams struct {
	IDs     []string
	AllDead bool
}

// TaskStats is the task backlog at Now (the store's clock).
type TaskStats struct {
	Now     time.Time
	Pending int64
	Dead    int64
	// OldestPending is the created_at of the oldest PENDING task (zero if none).
	OldestPending time.Time
}
