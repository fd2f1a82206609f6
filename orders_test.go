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

// unreachable is a store whose PendingDeadlines fails a number of times
// first, as a database that is restarting when lapse starts.
type unreachable struct {
	store.Store
	failures atomic.Int32
}

func (s *unreachable) PendingDeadlines(ctx context.Context, after store.Deadline, limit int) ([]store.Deadline, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return s.Store.PendingDeadlines(ctx, after, limit)
}

// In-process timers are seeded from the store at start; a store that does
// not answer yet delays the seed (retried with backoff) rather than stopping
// the service, and the orders it holds are still cancelled on time.
func TestSeedWaitsForTheStore(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	t.Cleanup(func() { st.Close() })
	storetest.Stock(t, st, 10, "sku")
	if _, err := st.CreateOrder(context.Background(), store.CreateOrderParams{
		ID: "o-1", Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100, Currency: "EUR", Timeout: 50 * time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
	flaky := &unreachable{Store: st}
	flaky.failures.Store(3)
	// No fallback sweep: only the seeded timer can cancel o-1.
	svc := newService(t, lapse.Config{Store: flaky, SweepInterval: -1})
	start(t, svc)
	waitFor(t, 10*time.Second, "the order held by the store to time out", func() bool { return status(t, svc, "o-1") == order.Cancelled })
	if left := flaky.failures.Load(); left >= 0 {
		t.Errorf("the seed did not meet the failures (%d left)", left)
	}
	storetest.AuditOK(t, st)
}
