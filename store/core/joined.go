package core

// Joined transactions: lapse's transitions inside a caller's own
// transaction (embedded mode, docs/embedding.md). Each …Tx method runs the
// very function its lone twin runs in a transaction of the store's own
// (createIn, startPaymentIn, …), on the caller's transaction instead — so
// the two can never drift. What differs is what lapse does not do there: it
// never begins, commits, rolls back or retries, and groups nothing; an error
// leaves the transaction to the caller (on PostgreSQL a failed statement has
// aborted it anyway), marked store.ErrRetryable when running it again can
// succeed.

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// callerTx is a caller's transaction bound to a Store.
type callerTx struct {
	store.TxMarker
	s   *Store
	etx ExecutorTx
}

// Bind makes a store.Tx of a caller's open transaction, wrapped by the
// driver as an ExecutorTx (its statements on the caller's transaction).
// The core never calls its Commit, Rollback or savepoint methods.
func (s *Store) Bind(etx ExecutorTx) store.Tx { return &callerTx{s: s, etx: etx} }

// joined is the core Tx of a caller's transaction: a fresh one per call, so
// each call reads the clock anew (a caller's transaction may be long).
func (s *Store) joined(tx store.Tx) (*Tx, error) {
	ct, ok := tx.(*callerTx)
	if !ok || ct == nil || ct.s != s {
		return nil, fmt.Errorf("%w: the transaction was not bound to this store (its InTx)", store.ErrInvalid)
	}
	return &Tx{ExecutorTx: ct.etx, s: s, guard: true}, nil
}

// inCaller runs fn on the caller's transaction and classifies its error.
func inCaller[T any](ctx context.Context, s *Store, tx store.Tx, what string, fn func(tx *Tx) (T, error)) (T, error) {
	t, err := s.joined(tx)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := fn(t)
	if err != nil {
		if s.d.Class(err) == ClassRetry {
			err = retryable{err}
		}
		return v, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// retryable marks a conflict the caller's transaction lost: it reads as
// store.ErrRetryable and as the driver's error.
type retryable struct{ cause error }

func (r retryable) Error() string   { return r.cause.Error() }
func (r retryable) Unwrap() []error { return []error{store.ErrRetryable, r.cause} }

// CreateOrderTx implements store.TxOrders: CreateOrder in the caller's
// transaction (never grouped).
func (s *Store) CreateOrderTx(ctx context.Context, tx store.Tx, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	p.Items = store.ItemsBySKU(p.Items)
	return inCaller(ctx, s, tx, "create order "+p.ID, func(tx *Tx) (store.CreateOrderResult, error) {
		return s.createIn(ctx, tx, p)
	})
}

// StartPaymentTx implements store.TxOrders.
func (s *Store) StartPaymentTx(ctx context.Context, tx store.Tx, p store.StartPaymentParams) (order.Order, error) {
	return inCaller(ctx, s, tx, "start payment "+p.OrderID, func(tx *Tx) (order.Order, error) {
		return s.startPaymentIn(ctx, tx, p)
	})
}

// CompletePaymentTx implements store.TxOrders.
func (s *Store) CompletePaymentTx(ctx context.Context, tx store.Tx, p store.PaymentParams) (store.PaymentResult, error) {
	return inCaller(ctx, s, tx, "complete payment of "+p.OrderID, func(tx *Tx) (store.PaymentResult, error) {
		return s.completePaymentIn(ctx, tx, p)
	})
}

// FailPaymentTx implements store.TxOrders.
func (s *Store) FailPaymentTx(ctx context.Context, tx store.Tx, p store.PaymentParams) (store.PaymentResult, error) {
	return inCaller(ctx, s, tx, "fail payment of "+p.OrderID, func(tx *Tx) (store.PaymentResult, error) {
		return s.failPaymentIn(ctx, tx, p)
	})
}

// CancelOrderTx implements store.TxOrders.
func (s *Store) CancelOrderTx(ctx context.Context, tx store.Tx, id string) (order.Order, error) {
	return inCaller(ctx, s, tx, "cancel order "+id, func(tx *Tx) (order.Order, error) {
		return s.cancelOrderIn(ctx, tx, id)
	})
}

// ExtendTx implements store.TxOrders.
func (s *Store) ExtendTx(ctx context.Context, tx store.Tx, p store.ExtendParams) (order.Order, error) {
	return inCaller(ctx, s, tx, "extend order "+p.OrderID, func(tx *Tx) (order.Order, error) {
		return s.extendIn(ctx, tx, p)
	})
}

var _ store.TxOrders = (*Store)(nil)
