package lapse

// Embedded mode: the Service's transitions inside the caller's own
// transaction (docs/embedding.md). Each …Tx method runs the same steps as
// its twin (create, payAttempt, notify, cancel); an ops value says where the
// store's part runs — lapse's own transaction, or the caller's — and what
// may follow it. In the caller's transaction lapse does only what is
// harmless whether the caller commits or rolls back: it sets timers (a timer
// for an order that never committed finds nothing to cancel), and never
// removes one, calls a gateway or counts a transition that may not happen.

import (
	"context"
	"errors"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// ops is where a Service's transitions run.
type ops struct {
	create   func(context.Context, store.CreateOrderParams) (store.CreateOrderResult, error)
	start    func(context.Context, store.StartPaymentParams) (order.Order, error)
	complete func(context.Context, store.PaymentParams) (store.PaymentResult, error)
	fail     func(context.Context, store.PaymentParams) (store.PaymentResult, error)
	cancel   func(context.Context, string) (order.Order, error)
	extend   func(context.Context, store.ExtendParams) (order.Order, error)
	// joined: the caller's transaction, which may still roll back.
	joined bool
}

// own is lapse's own transactions.
func (s *Service) own() ops {
	return ops{create: s.store.CreateOrder, start: s.store.StartPayment, complete: s.store.CompletePayment,
		fail: s.store.FailPayment, cancel: s.store.CancelOrder, extend: s.store.Extend}
}

// in is the caller's transaction tx.
func (s *Service) in(tx store.Tx) ops {
	return ops{
		create: func(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
			return s.store.CreateOrderTx(ctx, tx, p)
		},
		start: func(ctx context.Context, p store.StartPaymentParams) (order.Order, error) {
			return s.store.StartPaymentTx(ctx, tx, p)
		},
		complete: func(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
			return s.store.CompletePaymentTx(ctx, tx, p)
		},
		fail: func(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
			return s.store.FailPaymentTx(ctx, tx, p)
		},
		cancel: func(ctx context.Context, id string) (order.Order, error) { return s.store.CancelOrderTx(ctx, tx, id) },
		extend: func(ctx context.Context, p store.ExtendParams) (order.Order, error) {
			return s.store.ExtendTx(ctx, tx, p)
		},
		joined: true,
	}
}

// IsRetryable reports whether err ended the caller's transaction on a
// conflict it can win next time (a deadlock, a serialization failure, a
// lock-wait timeout): roll back and run the whole transaction again. lapse
// never retries a transaction it does not own.
func IsRetryable(err error) bool { return errors.Is(err, store.ErrRetryable) }

// ErrReserveInTx: with Config.InventoryReserve, lapse reserves at the
// inventory over the network, which never runs inside a database
// transaction; CreateOrderTx takes orders whose stock lapse holds, or a
// reservation the caller made (CreateOrderRequest.ReservationID).
var ErrReserveInTx = errors.New("lapse: CreateOrderTx cannot reserve at the inventory (Config.InventoryReserve): reserve first and pass the reservation_id")

// CreateOrderTx is CreateOrder inside the caller's transaction tx (a
// driver's InTx): the order, its stock and its event commit with the
// caller's own rows, or not at all. The cancel timer is set at once; if the
// caller rolls back, it finds no order and does nothing.
func (s *Service) CreateOrderTx(ctx context.Context, tx store.Tx, r CreateOrderRequest) (CreateOrderResult, error) {
	return s.create(ctx, s.in(tx), r)
}

// PayAttemptTx is PayAttempt inside the caller's transaction tx. A
// superseded attempt is closed at the gateway by the deadline's check, not
// at once (no network call while the transaction is open).
func (s *Service) PayAttemptTx(ctx context.Context, tx store.Tx, id, paymentID string) (order.Order, error) {
	return s.payAttempt(ctx, s.in(tx), id, paymentID)
}

// NotifyTx is Notify inside the caller's transaction tx: the payment's
// transition commits with the caller's own (its order row marked paid, say).
func (s *Service) NotifyTx(ctx context.Context, tx store.Tx, n Notification) (store.PaymentResult, error) {
	return s.notify(ctx, s.in(tx), n)
}

// ExtendTx is Extend inside the caller's transaction tx. The timer is set
// for the new deadline at once; if the caller rolls back, the old timer may
// have been replaced by one that fires later, and the fallback sweep (or
// the old timer, where a backend cannot replace one) cancels the order —
// late, never early.
func (s *Service) ExtendTx(ctx context.Context, tx store.Tx, id string, expiresAt time.Time) (order.Order, error) {
	return s.extend(ctx, s.in(tx), id, expiresAt)
}

// CancelTx is Cancel (the buyer's) inside the caller's transaction tx.
func (s *Service) CancelTx(ctx context.Context, tx store.Tx, id string) (order.Order, error) {
	return s.cancelOrder(ctx, s.in(tx), id)
}
