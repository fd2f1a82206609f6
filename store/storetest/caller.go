package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Begin opens a caller's transaction on the store's database, bound to the
// store (the driver's InTx), and the functions that end it.
type Begin func(ctx context.Context) (tx store.Tx, commit func(context.Context) error, rollback func(context.Context), err error)

// InCallerTx is s with its transitions run as a caller embedding lapse runs
// them: each in a transaction of the caller's own, through the store's …Tx
// methods, committed by the caller — and run again by the caller when lapse
// answers store.ErrRetryable, as the docs ask. Run the suite on it to prove
// the joined path answers as the store's own transactions do.
func InCallerTx(s store.Store, begin Begin) store.Store {
	return &callerStore{Store: s, begin: begin}
}

type callerStore struct {
	store.Store
	begin Begin
}

// inTx runs fn in a caller's transaction and commits it, again on
// ErrRetryable — as a caller would, with a randomised backoff (at REPEATABLE
// READ, transactions on hot SKU rows lose to each other often), for up to
// 30 seconds.
func inTx[T any](ctx context.Context, c *callerStore, fn func(tx store.Tx) (T, error)) (T, error) {
	var zero T
	giveUp := time.Now().Add(30 * time.Second)
	for attempt := 0; ; attempt++ {
		tx, commit, rollback, err := c.begin(ctx)
		if err != nil {
			return zero, fmt.Errorf("caller's begin: %w", err)
		}
		v, err := fn(tx)
		if err == nil {
			if err = commit(ctx); err == nil {
				return v, nil
			}
			err = fmt.Errorf("caller's commit: %w", err)
		} else {
			rollback(ctx)
		}
		if !errors.Is(err, store.ErrRetryable) || time.Now().After(giveUp) {
			return v, err
		}
		base := time.Millisecond << min(attempt, 6) // up to 64 ms
		time.Sleep(base + rand.N(base))
	}
}

func (c *callerStore) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	return inTx(ctx, c, func(tx store.Tx) (store.CreateOrderResult, error) { return c.Store.CreateOrderTx(ctx, tx, p) })
}

func (c *callerStore) StartPayment(ctx context.Context, p store.StartPaymentParams) (order.Order, error) {
	return inTx(ctx, c, func(tx store.Tx) (order.Order, error) { return c.Store.StartPaymentTx(ctx, tx, p) })
}

func (c *callerStore) CompletePayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	return inTx(ctx, c, func(tx store.Tx) (store.PaymentResult, error) { return c.Store.CompletePaymentTx(ctx, tx, p) })
}

func (c *callerStore) FailPayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	return inTx(ctx, c, func(tx store.Tx) (store.PaymentResult, error) { return c.Store.FailPaymentTx(ctx, tx, p) })
}

func (c *callerStore) CancelOrder(ctx context.Context, id string) (order.Order, error) {
	return inTx(ctx, c, func(tx store.Tx) (order.Order, error) { return c.Store.CancelOrderTx(ctx, tx, id) })
}

func (c *callerStore) Extend(ctx context.Context, p store.ExtendParams) (order.Order, error) {
	return inTx(ctx, c, func(tx store.Tx) (order.Order, error) { return c.Store.ExtendTx(ctx, tx, p) })
}

// Identity passes the store's store.Identified through (every driver of
// lapse's has it).
func (c *callerStore) Identity(ctx context.Context) (string, error) {
	id, ok := c.Store.(store.Identified)
	if !ok {
		return "", errors.New("storetest: the store does not name its data")
	}
	return id.Identity(ctx)
}
