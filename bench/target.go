package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Target is what the harness drives: a Service in this process (Running,
// InProcess) or a running `lapse serve` (HTTP).
type Target interface {
	// start prepares the target (starts Services, reads baselines).
	start(ctx context.Context) error
	// stop releases it; the run is over.
	stop()
	setStock(ctx context.Context, sku string, available int64) error
	// create places an order, with idempotencyKey when it is not empty, and
	// with the stock a remote inventory holds for it when reservationID is
	// not empty.
	create(ctx context.Context, id, sku string, amountCents int64, timeout time.Duration, idempotencyKey, reservationID string) (order.Order, error)
	// startPayment starts a payment, as the buyer would (PENDING → PAYING;
	// an order already PAYING is fine). errPayMissed: the order could no
	// longer be paid (expired or already cancelled); it will be cancelled.
	startPayment(ctx context.Context, id string) error
	// completePayment reports the payment's success, as the gateway would.
	// errNotPaid: the order did not end PAID.
	completePayment(ctx context.Context, o order.Order) error
	// counts reads the service's metrics, summed over restarts.
	counts(ctx context.Context) (counts, error)
	// listCancelled pages through CANCELLED orders, newest first, until fn
	// returns false or the orders run out.
	listCancelled(ctx context.Context, fn func([]order.Order) bool) error
	// restart kills the worker and starts a fresh one (errNoRestart when the
	// target cannot).
	restart(ctx context.Context) error
	// audit checks the invariants; a nil report with a reason when it cannot.
	audit(ctx context.Context, p store.AuditParams) (*store.AuditReport, string, error)
	// statements is the store's statement counter, when it keeps one.
	statements() (int64, bool)
}

var (
	errPayMissed = errors.New("bench: order could no longer be paid")
	errNotPaid   = errors.New("bench: order not paid after its payment succeeded")
	errNoRestart = errors.New("bench: this target cannot restart a worker")
)

// StatementCounter is an optional capability of a store.Store: how many SQL
// statements it has sent to the database since it was opened (every Exec,
// Query and QueryRow, BEGIN and COMMIT included). Where the store has it, a
// run reports db_statements_per_order.
type StatementCounter interface {
	Statements() int64
}

// Running drives svc, already running on st: the caller owns both. It cannot
// restart svc (no KillEvery).
func Running(svc *lapse.Service, st store.Store) Target {
	return &inProcess{st: st, cur: svc, external: true}
}

// Checkout places an order in embedded mode (docs/embedding.md): the shop's
// own transaction, its own order row and svc.CreateOrderTx in it, committed.
type Checkout func(ctx context.Context, svc *lapse.Service, r lapse.CreateOrderRequest) (order.Order, error)

// RunningEmbedded is Running whose orders are placed by checkout instead of
// svc.CreateOrder: a shop's checkout, whose row the service's hooks move.
func RunningEmbedded(svc *lapse.Service, st store.Store, checkout Checkout) Target {
	return &inProcess{st: st, cur: svc, external: true, checkout: checkout}
}

// InProcess drives Services that newService makes on st. The harness runs the
// first one and, with Config.KillEvery, kills it and makes another as a
// crashed process would be replaced: a new Service with a fresh scheduler, on
// the same store. newService must return a Service that is not running yet.
func InProcess(st store.Store, newService func() (*lapse.Service, error)) Target {
	return &inProcess{st: st, newService: newService}
}

type inProcess struct {
	st         store.Store
	newService func() (*lapse.Service, error)
	external   bool     // Running: the caller's service, not started or stopped here
	checkout   Checkout // RunningEmbedded: how an order is placed

	// mu is held (read) by every call into the current Service and (write)
	// by a restart, so a killed Service takes no call after its death: what
	// it committed, its successor's seed finds.
	mu       sync.RWMutex
	cur      *lapse.Service
	stopCur  context.CancelFunc
	all      []*lapse.Service // every Service of the run, for the metrics
	runs     sync.WaitGroup   // their Run calls
	runErr   atomic.Pointer[error]
	runCtx   context.Context
	stopRuns context.CancelFunc
}

func (t *inProcess) start(ctx context.Context) error {
	if t.external {
		t.all = []*lapse.Service{t.cur}
		return nil
	}
	t.runCtx, t.stopRuns = context.WithCancel(context.WithoutCancel(ctx))
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.launch()
}

// launch makes and runs a new Service; t.mu is held.
func (t *inProcess) launch() error {
	svc, err := t.newService()
	if err != nil {
		return fmt.Errorf("bench: new service: %w", err)
	}
	ctx, cancel := context.WithCancel(t.runCtx)
	t.cur, t.stopCur = svc, cancel
	t.all = append(t.all, svc)
	t.runs.Go(func() {
		if err := svc.Run(ctx); err != nil {
			t.runErr.CompareAndSwap(nil, &err)
		}
	})
	return nil
}

func (t *inProcess) restart(context.Context) error {
	if t.external {
		return errNoRestart
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The worker dies: its Run context ends and it is dropped. Its batch in
	// hand may still commit or roll back, as a dying process's transaction
	// would; its in-memory timers are gone. The successor seeds from the store.
	t.stopCur()
	return t.launch()
}

func (t *inProcess) stop() {
	if t.external {
		return
	}
	t.stopRuns()
	t.runs.Wait()
}

// failed reports a Service whose Run stopped on its own.
func (t *inProcess) failed() error {
	if err := t.runErr.Load(); err != nil {
		return fmt.Errorf("bench: service stopped: %w", *err)
	}
	return nil
}

func (t *inProcess) svc() (*lapse.Service, func()) {
	t.mu.RLock()
	return t.cur, t.mu.RUnlock
}

func (t *inProcess) setStock(ctx context.Context, sku string, available int64) error {
	svc, done := t.svc()
	defer done()
	_, err := svc.SetStock(ctx, sku, available)
	return err
}

func (t *inProcess) create(ctx context.Context, id, sku string, amountCents int64, timeout time.Duration, idempotencyKey, reservationID string) (order.Order, error) {
	svc, done := t.svc()
	defer done()
	req := lapse.CreateOrderRequest{
		ID: id, Items: []order.Item{{SKU: sku, Qty: 1}}, AmountCents: amountCents, Timeout: timeout,
		IdempotencyKey: idempotencyKey, ReservationID: reservationID,
	}
	if t.checkout != nil {
		return t.checkout(ctx, svc, req)
	}
	r, err := svc.CreateOrder(ctx, req)
	return r.Order, err
}

func (t *inProcess) completePayment(ctx context.Context, o order.Order) error {
	svc, done := t.svc()
	defer done()
	res, err := svc.Notify(ctx, lapse.Notification{
		OrderID: o.ID, PaymentID: "bench-" + o.ID, Status: lapse.PaymentSucceeded, AmountCents: o.AmountCents,
	})
	if err != nil {
		return fmt.Errorf("bench: payment callback %s: %w", o.ID, err)
	}
	if res.Order.Status != order.Paid {
		return fmt.Errorf("bench: payment callback %s: order is %s: %w", o.ID, res.Order.Status, errNotPaid)
	}
	return nil
}

func (t *inProcess) startPayment(ctx context.Context, id string) error {
	svc, done := t.svc()
	defer done()
	_, err := svc.Pay(ctx, id)
	switch {
	case errors.Is(err, lapse.ErrOrderExpired), errors.Is(err, lapse.ErrNotPending):
		return errPayMissed
	case err != nil:
		return fmt.Errorf("bench: pay %s: %w", id, err)
	}
	return nil
}

func (t *inProcess) counts(context.Context) (counts, error) {
	t.mu.RLock()
	all := t.all
	t.mu.RUnlock()
	var sum counts
	for _, svc := range all {
		c, err := gatherCounts(svc.Registry())
		if err != nil {
			return sum, err
		}
		sum = sum.plus(c)
	}
	return sum, t.failed()
}

func (t *inProcess) listCancelled(ctx context.Context, fn func([]order.Order) bool) error {
	cursor := ""
	for {
		page, err := t.st.ListOrders(ctx, store.ListOrdersParams{Status: order.Cancelled, Limit: 500, Cursor: cursor})
		if err != nil {
			return err
		}
		if !fn(page.Orders) || page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

func (t *inProcess) audit(ctx context.Context, p store.AuditParams) (*store.AuditReport, string, error) {
	rep, err := t.st.Audit(ctx, p)
	if err != nil {
		return nil, "", err
	}
	return &rep, "", nil
}

func (t *inProcess) statements() (int64, bool) {
	if c, ok := t.st.(StatementCounter); ok {
		return c.Statements(), true
	}
	return 0, false
}
