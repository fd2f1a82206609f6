// Package inventory is lapse's side of stock held by another service: the
// commands lapse sends an inventory (reserve, release, confirm), the answers it
// expects, and the transports that carry them (HTTP and RabbitMQ).
//
// The contract with an inventory is small and idempotent. Every command names a
// reservation and carries a task id; the inventory applies each (reservation,
// action) at most once, through a ledger of its own, and answers the same way
// however often a command arrives. lapse therefore retries a command whose
// answer it did not get — the network failed, the inventory was down, lapse
// was killed between sending and hearing back — and never needs to know
// whether the first try was applied. A release of a reservation the inventory
// never saw is recorded and answered ALREADY_DONE, so a reserve that arrives
// after its own release (a retry overtaken on the wire) is refused rather than
// holding stock that nobody will release.
//
// docs/sagas.md reads this as a saga: the order's transition is the local
// step, the stock task its remote step, release the compensation of reserve.
package inventory

import (
	"context"
	"errors"
	"fmt"
)

// Action is what a command asks of the inventory.
type Action string

// Actions. Reserve holds stock for an order; release gives it back (the order
// was cancelled, or its create did not commit); confirm deducts it for good
// (the order was paid).
const (
	Reserve Action = "reserve"
	Release Action = "release"
	Confirm Action = "confirm"
)

// Valid reports whether a is one of the three actions.
func (a Action) Valid() bool { return a == Reserve || a == Release || a == Confirm }

// RoutingKey is the AMQP routing key of a's commands: stock.reserve,
// stock.release or stock.confirm.
func (a Action) RoutingKey() string { return "stock." + string(a) }

// Item is a quantity of one SKU.
type Item struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// Command is one stock command, as JSON on both transports.
type Command struct {
	// TaskID identifies the stock task that sends the command: the AMQP
	// message_id and correlation_id, the HTTP Idempotency-Key.
	TaskID string `json:"task_id"`
	Action Action `json:"action"`
	// ReservationID names the stock held at the inventory. For a reserve
	// lapse makes itself it is the order id.
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
	// Items are the order's lines; a reserve needs them, release and
	// confirm carry them for the inventory's own checks.
	Items []Item `json:"items,omitempty"`
}

// Validate reports what is wrong with c, or nil.
func (c Command) Validate() error {
	switch {
	case c.TaskID == "":
		return errors.New("inventory: command without task_id")
	case !c.Action.Valid():
		return fmt.Errorf("inventory: unknown action %q", c.Action)
	case c.ReservationID == "":
		return errors.New("inventory: command without reservation_id")
	case c.Action == Reserve && len(c.Items) == 0:
		return errors.New("inventory: reserve without items")
	}
	for _, it := range c.Items {
		if it.SKU == "" || it.Qty <= 0 {
			return fmt.Errorf("inventory: item %q×%d: want a sku and qty > 0", it.SKU, it.Qty)
		}
	}
	return nil
}

// Result is the inventory's answer to a command.
type Result string

// Results. Success and AlreadyDone both end a task; Rejected parks it as
// DEAD for an operator (a reserve refused for short stock is Rejected with
// reason ReasonInsufficientStock).
const (
	Success     Result = "REPLENISH_SUCCESS"
	AlreadyDone Result = "ALREADY_DONE"
	Rejected    Result = "REJECTED"
)

// ReasonInsufficientStock is the reason of a reserve refused for short stock.
const ReasonInsufficientStock = "insufficient_stock"

// Answer is the inventory's answer, as JSON on both transports.
type Answer struct {
	TaskID string `json:"task_id"`
	Result Result `json:"result"`
	Reason string `json:"reason,omitempty"`
}

// Done reports whether the answer ends its task: the command was applied,
// now or before.
func (a Answer) Done() bool { return a.Result == Success || a.Result == AlreadyDone }

// Client sends commands to an inventory. Send returns the inventory's answer;
// an error means the outcome is not known (timeout, connection lost, the
// inventory down or answering 5xx) and the command must be sent again with
// the same TaskID. Send is safe for concurrent use.
type Client interface {
	Send(ctx context.Context, c Command) (Answer, error)
	Close() error
}

// Applier is the inventory's side: it applies a command once per
// (reservation, action) and answers it. Apply is safe for concurrent use,
// also for two deliveries of one command at once. A returned error (other
// than ErrWithhold) is a failure of
// the inventory itself (its database): the transport answers nothing (AMQP:
// the command is requeued) or 5xx (HTTP), and lapse sends again.
type Applier interface {
	Apply(ctx context.Context, c Command) (Answer, error)
}

// ErrWithhold, returned by an Applier with its answer, asks the transport to
// send no answer although the command was applied: the reference inventory's
// "drop answers" fault, which lapse must survive by sending again.
var ErrWithhold = errors.New("inventory: command applied, answer withheld")

// ApplierFunc adapts a function to Applier.
type ApplierFunc func(ctx context.Context, c Command) (Answer, error)

// Apply calls f.
func (f ApplierFunc) Apply(ctx context.Context, c Command) (Answer, error) { return f(ctx, c) }

// The AMQP names both sides agree on.
const (
	// Exchange is the topic exchange commands are published to, with the
	// routing key of their action.
	Exchange = "lapse.stock"
	// DeadExchange receives the commands an inventory rejects for good.
	DeadExchange = "lapse.stock.dead"
)
