package store

import (
	"context"
	"errors"
	"time"

	"github.com/lapsehq/lapse/order"
)

// ErrNotRefundable: the payment attempt owes no money back — it is not
// REFUND_REQUIRED (it paid the order, failed, is still open, or a refund
// was recorded in another way than the one asked).
var ErrNotRefundable = errors.New("store: the payment attempt is not REFUND_REQUIRED")

// Refunds holds the refund tasks of --auto-refund (docs/architecture.md
// §8): a payment attempt that ends REFUND_REQUIRED with
// PaymentParams.AutoRefund gets one, keyed by its payment id, in the
// transaction that records it. Any number of dispatchers share them: a
// dispatcher claims a batch with a lease, asks the gateway to refund each,
// and settles what it answered; a refund done moves its attempt to
// REFUNDED with order.refunded in the settle's transaction.
type Refunds interface {
	// ClaimRefunds leases up to Limit PENDING refunds that are due
	// (next_at <= now), earliest first, skipping rows other claims hold:
	// next_at moves to now + Lease and attempts grows by one.
	ClaimRefunds(ctx context.Context, p ClaimTasksParams) ([]ClaimedRefund, error)
	// SettleRefunds records what became of claimed refunds, in one
	// transaction. An outcome whose Attempts no longer match the row (its
	// lease ran out and another dispatcher claimed it, or an operator
	// marked it refunded) is ignored and listed in Stale. A Done refund
	// moves its attempt REFUND_REQUIRED → REFUNDED, writes order.refunded,
	// and clears the order's refund_required once no attempt of it is
	// still REFUND_REQUIRED.
	SettleRefunds(ctx context.Context, outcomes []RefundOutcome) (SettleRefundsResult, error)
	// ListRefunds pages refunds in payment id order: those not DONE, or
	// with Dead only DEAD ones, or with OrderID every refund of that order
	// (After is a payment id).
	ListRefunds(ctx context.Context, p ListTasksParams) ([]order.Refund, error)
	// RetryRefunds makes DEAD refunds (those of IDs — payment ids — or
	// with AllDead every one) PENDING and due now, their failures and age
	// counted afresh, and returns how many.
	RetryRefunds(ctx context.Context, p RetryTasksParams) (int64, error)
	// RefundStats counts the refunds not DONE (metrics, the dashboard).
	RefundStats(ctx context.Context) (TaskStats, error)
	// EnqueueRefund writes the refund task of a REFUND_REQUIRED attempt on
	// demand (an operator's "refund now", or an attempt that became
	// REFUND_REQUIRED before --auto-refund), PENDING and due now. A task
	// that exists is left as it is, but a DEAD one is made PENDING and due
	// now. It returns the task as it is then. Errors: ErrNotFound (no
	// attempt has the id), ErrNotRefundable (the attempt is not
	// REFUND_REQUIRED; REFUNDED included).
	EnqueueRefund(ctx context.Context, paymentID string) (order.Refund, error)
	// MarkRefunded records an operator's refund of a REFUND_REQUIRED
	// attempt: the attempt becomes REFUNDED, order.refunded is written
	// (naming Manual, Note and Actor), the attempt's refund task is DONE
	// (written DONE if it had none), and refund_required is cleared once no
	// attempt still owes money. An attempt REFUNDED already is answered
	// with its order and nothing written. Errors: ErrNotFound,
	// ErrNotRefundable. It returns the order with its attempts.
	MarkRefunded(ctx context.Context, p MarkRefundedParams) (order.Order, error)
}

// ClaimedRefund is one refund a claim leased, with what a refund request
// needs (order id, payment id, amount and currency, in Refund).
type ClaimedRefund struct {
	order.Refund
	// Failures counts failed sends since the refund was written or last
	// retried by an operator; Since is when that was; ClaimedAt is the
	// store's time of the claim. With them the dispatcher decides when a
	// refund is DEAD.
	Failures  int
	Since     time.Time
	ClaimedAt time.Time
}

// RefundOutcome is what became of one claimed refund.
type RefundOutcome struct {
	PaymentID string
	OrderID   string
	Attempts  int // the claim's, as ClaimedRefund.Attempts
	// Done: the gateway refunded the payment (now or before); RefundID is
	// its id of the refund. Otherwise the send failed: Error says why, Dead
	// parks the refund for an operator, and RetryIn is when it is due again.
	Done     bool
	RefundID string
	Error    string
	Dead     bool
	RetryIn  time.Duration
}

// SettleRefundsResult is what a settle changed.
type SettleRefundsResult struct {
	Now time.Time
	// Refunded are the orders whose attempt a Done outcome moved to
	// REFUNDED, as they are after it (refund_required cleared when it was
	// their last attempt owing money).
	Refunded []order.Order
	// Stale are the payment ids of outcomes ignored: the claim no longer
	// held the row.
	Stale []string
	// Conflicts are the payment ids of Done outcomes whose attempt was not
	// REFUND_REQUIRED (only a refund row written by hand can be): the row
	// is DONE, nothing else is written, and the audit reports it
	// (refunds_match_attempts) unless the attempt is REFUNDED.
	Conflicts []string
}

// MarkRefundedParams is an operator's refund of one attempt.
type MarkRefundedParams struct {
	PaymentID string
	// RefundID is the gateway's id of the refund, when known.
	RefundID string
	// Manual: the money went back outside lapse (the gateway's console).
	Manual bool
	// Note and Actor say why and who, for the event and the audit trail.
	Note  string
	Actor string
}
