package lapse_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// lostAnswer is a store whose first CreateOrder and first FailPayment of
// order id commit but answer with an error, as when the connection is cut
// between the COMMIT and its answer.
type lostAnswer struct {
	store.Store
	id                   string
	lostCreate, lostFail atomic.Bool
}

var errLostAnswer = errors.New("unexpected EOF")

func (s *lostAnswer) CreateOrder(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	res, err := s.Store.CreateOrder(ctx, p)
	if err == nil && p.ID == s.id && s.lostCreate.CompareAndSwap(false, true) {
		return store.CreateOrderResult{}, errLostAnswer
	}
	return res, err
}

func (s *lostAnswer) FailPayment(ctx context.Context, p store.PaymentParams) (store.PaymentResult, error) {
	res, err := s.Store.FailPayment(ctx, p)
	if err == nil && p.OrderID == s.id && s.lostFail.CompareAndSwap(false, true) {
		return store.PaymentResult{}, errLostAnswer
	}
	return res, err
}

func TestRetriedCreateWhoseAnswerWasLostStillTimesOut(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	// No fallback sweep: only the order's timer can cancel it.
	svc := newService(t, lapse.Config{Store: &lostAnswer{Store: st, id: "o-1"}, SweepInterval: -1})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	// Once an order times out, the timers run and their seed from the store
	// is over: it cannot be what schedules o-1.
	create(t, svc, "o-0", time.Millisecond)
	waitFor(t, 5*time.Second, "the first order to time out", func() bool { return status(t, svc, "o-0") == order.Cancelled })
	req := lapse.CreateOrderRequest{
		ID: "o-1", Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100,
		Timeout: 50 * time.Millisecond, IdempotencyKey: "cart-1",
	}
	if _, err := svc.CreateOrder(context.Background(), req); err == nil {
		t.Fatal("the first create answered; want its answer lost")
	}
	res, err := svc.CreateOrder(context.Background(), req) // the client retries
	if err != nil || !res.Replayed || res.Order.Status != order.Pending {
		t.Fatalf("retry: %+v, %v; want the first create's PENDING order replayed", res, err)
	}
	waitFor(t, 5*time.Second, "the replayed order to time out", func() bool { return status(t, svc, "o-1") == order.Cancelled })
	storetest.AuditOK(t, st)
}
