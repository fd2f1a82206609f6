package store

import (
	"context"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Commands holds the cancel commands of order-service mode
// (docs/order-service.md): when an order's cancel_after passes, the timeout
// cancel moves it to CANCELLING and writes one command for it (CancelDue with
// Command), in one transaction. Any number of dispatchers share the commands:
// a dispatcher claims a batch with a lease, sends each to the order service,
// and settles what it answered — the answer makes the order's transition, in
// the transaction that records it.
type Commands interface {
	// ClaimCommands leases up to Limit PENDING commands that are due
	// (next_at <= now), earliest first, skipping rows other claims hold:
	// next_at moves to now + Lease and attempts grows by one. Each comes
	// with its order and the order's payment attempts (the command's body).
	ClaimCommands(ctx context.Context, p ClaimTasksParams) ([]ClaimedCommand, error)
	// SettleCommands records what became of claimed commands, and makes the
	// transitions their answers decide, in one transaction. An outcome whose
	// Attempts no longer match the row (its lease ran out and another
	// dispatcher claimed it) is ignored: that dispatcher settles it.
	SettleCommands(ctx context.Context, outcomes []CommandOutcome) (SettleCommandsResult, error)
	// ListCommands pages commands in id order: those not DONE, or with Dead
	// only DEAD ones, or with OrderID every command of that order.
	ListCommands(ctx context.Context, p ListTasksParams) ([]order.Command, error)
	// RetryCommands makes DEAD commands (those of IDs, or with AllDead every
	// one) PENDING and due now, their failures and age counted afresh.
	RetryCommands(ctx context.Context, p RetryTasksParams) (int64, error)
	// PurgeCommands deletes DEAD commands (those of IDs, or with AllDead
	// every one): their orders stay CANCELLING, which the audit reports.
	PurgeCommands(ctx context.Context, p RetryTasksParams) (int64, error)
	// CommandStats counts the commands not DONE (metrics, the dashboard).
	CommandStats(ctx context.Context) (TaskStats, error)
}

// ClaimedCommand is one command a claim leased, with what its body needs.
type ClaimedCommand struct {
	order.Command
	// Order is the command's order as it is now, with its payment attempts.
	Order order.Order
	// Failures counts failed sends since the command was written or last
	// retried by an operator; Since is when that was; ClaimedAt is the
	// store's time of the claim. With them the dispatcher decides when a
	// command is DEAD.
	Failures  int
	Since     time.Time
	ClaimedAt time.Time
}

// CommandOutcome is what became of one claimed command.
type CommandOutcome struct {
	ID       string
	OrderID  string
	Attempts int // the claim's, as ClaimedCommand.Attempts
	// Result is the order service's answer (ordersvc.Result), "" when none
	// came. A final answer ends the command (DONE; not_found: DEAD) and
	// makes its order's transition; paying leaves it PENDING, due again
	// after RetryIn, with its order PAYING.
	Result string
	// Error says why a send failed (no answer, or an answer refused for
	// good); Dead parks the command for an operator; RetryIn is when it is
	// due again.
	Error   string
	Dead    bool
	RetryIn time.Duration
	// AutoRefund (--auto-refund): a cancelled answer for an order lapse saw
	// paid writes the refund of the attempt that paid it.
	AutoRefund bool
}

// SettleCommandsResult is what a settle changed.
type SettleCommandsResult struct {
	Now time.Time
	// Cancelled, Paid and Paying are the orders the answers moved.
	Cancelled []order.Order
	Paid      []order.Order
	Paying    []string
	// Conflicts are answers that disagree with lapse's own record of the
	// order (a payment lapse saw for an order the order service cancelled):
	// the command is DONE, the order is left as lapse has it, and the
	// service counts and logs them.
	Conflicts []CommandConflict
}

// CommandConflict is an answer the order's status in lapse contradicts.
type CommandConflict struct {
	CommandID, OrderID string
	Result             string
	Status             order.Status
	// RefundRequired: the answer cancelled an order lapse saw paid, and the
	// attempt that paid it now owes the money back (REFUND_REQUIRED).
	RefundRequired bool
}
