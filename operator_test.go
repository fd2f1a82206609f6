package lapse_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// opGateway is a gateway an operator's actions are tried against: per order
// an answer, or an error for every query (a gateway that cannot answer),
// and an error for a close.
type opGateway struct {
	mu       sync.Mutex
	state    map[string]payment.Status
	queryErr error
	closeErr error
	closes   map[string]int
	// asked: only queries made with askedNow in their context are
	// answered, every other (the background checks') fails.
	asked bool
}

type askedKey struct{}

// askedNow marks the context of a query the test makes itself.
func askedNow(ctx context.Context) context.Context { return context.WithValue(ctx, askedKey{}, true) }

func newOpGateway() *opGateway {
	return &opGateway{state: map[string]payment.Status{}, closes: map[string]int{}}
}

func (g *opGateway) Query(ctx context.Context, id string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asked && ctx.Value(askedKey{}) == nil {
		return payment.Status{}, errors.New("not a query the test made")
	}
	if g.queryErr != nil {
		return payment.Status{}, g.queryErr
	}
	if st, ok := g.state[id]; ok {
		return st, nil
	}
	return payment.Status{State: payment.StateNotPaid}, nil
}

func (g *opGateway) Close(_ context.Context, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closes[id]++
	if g.closeErr != nil {
		return g.closeErr
	}
	if g.state[id].State == payment.StatePaid {
		return payment.ErrAlreadyPaid
	}
	g.state[id] = payment.Status{State: payment.StateClosed}
	return nil
}

func (g *opGateway) set(f func(g *opGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *opGateway) closed(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closes[id]
}

func opService(t *testing.T, gw payment.Gateway) *lapse.Service {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	cfg := lapse.Config{Store: st, ConfirmAfter: time.Hour, GatewayPendingMax: time.Hour}
	if gw != nil {
		cfg.Gateway = gw
	}
	svc := newService(t, cfg)
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	return svc
}

func paying(t *testing.T, svc *lapse.Service, id string, timeout time.Duration) order.Order {
	t.Helper()
	create(t, svc, id, timeout)
	o, err := svc.Pay(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The check of a PAYING order past its deadline runs at once when asked:
// the gateway, down until now, says PAID, and the order is PAID when
// CheckNow returns — not at the background check's next try.
func TestCheckNowRunsTheDeadlinesCheckAtOnce(t *testing.T) {
	t.Parallel()
	gw := newOpGateway()
	gw.set(func(g *opGateway) { g.asked, g.queryErr = true, errors.New("gateway down") })
	svc := opService(t, gw)
	ctx := askedNow(context.Background())
	o := paying(t, svc, "cn-paid", 50*time.Millisecond)
	waitFor(t, 5*time.Second, "the deadline", func() bool { return time.Now().After(o.CancelAfter.Add(100 * time.Millisecond)) })
	if _, err := svc.CheckNow(ctx, "cn-paid"); !errors.Is(err, lapse.ErrGateway) {
		t.Fatalf("check with the gateway down: %v, want ErrGateway", err)
	}
	if got := status(t, svc, "cn-paid"); got != order.Paying {
		t.Fatalf("after a failed check: %s, want PAYING", got)
	}
	gw.set(func(g *opGateway) {
		g.queryErr = nil
		g.state["cn-paid"] = payment.Status{State: payment.StatePaid, PaymentID: "cn-paid-1", AmountCents: 100}
	})
	res, err := svc.CheckNow(ctx, "cn-paid")
	if err != nil || res.Gateway.State != payment.StatePaid || res.Order.Status != order.Paid || res.Outcome != store.OutcomePaid {
		t.Fatalf("check now: %+v, %v; want PAID at once", res, err)
	}

	// NOT_PAID past the deadline: the trade closed, the order cancelled.
	o = paying(t, svc, "cn-notpaid", 50*time.Millisecond)
	waitFor(t, 5*time.Second, "the deadline", func() bool { return time.Now().After(o.CancelAfter.Add(100 * time.Millisecond)) })
	res, err = svc.CheckNow(ctx, "cn-notpaid")
	if err != nil || res.Gateway.State != payment.StateNotPaid || res.Order.Status != order.Cancelled || res.Order.CancelReason != order.ReasonTimeout {
		t.Fatalf("check now, not paid: %+v, %v; want CANCELLED (timeout)", res, err)
	}
	if gw.closed("cn-notpaid") == 0 {
		t.Fatal("the order was cancelled without its trade closed")
	}
	storetest.AuditOK(t, svc.Store())
}

// Before the deadline the buyer's window is open: the gateway is asked,
// nothing is closed or cancelled.
func TestCheckNowBeforeTheDeadlineClosesNothing(t *testing.T) {
	t.Parallel()
	gw := newOpGateway()
	svc := opService(t, gw)
	paying(t, svc, "cn-early", time.Hour)
	res, err := svc.CheckNow(context.Background(), "cn-early")
	if err != nil || res.Gateway.State != payment.StateNotPaid || res.Order.Status != order.Paying {
		t.Fatalf("check before the deadline: %+v, %v; want NOT_PAID, the order PAYING", res, err)
	}
	if n := gw.closed("cn-early"); n != 0 {
		t.Fatalf("%d closes in the buyer's window", n)
	}
}

// What the check has nothing to decide about, and a service without a
// gateway, are refused.
func TestCheckNowRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := opService(t, newOpGateway())
	create(t, svc, "cn-pending", time.Hour)
	if _, err := svc.CheckNow(ctx, "cn-pending"); !errors.Is(err, lapse.ErrNotCheckable) {
		t.Errorf("a PENDING order without an attempt: %v, want ErrNotCheckable", err)
	}
	if _, err := svc.CheckNow(ctx, "cn-missing"); !errors.Is(err, lapse.ErrNotFound) {
		t.Errorf("no such order: %v, want ErrNotFound", err)
	}
	plain := opService(t, nil)
	paying(t, plain, "cn-nogw", time.Hour)
	if _, err := plain.CheckNow(ctx, "cn-nogw"); !errors.Is(err, lapse.ErrNoGateway) {
		t.Errorf("no gateway: %v, want ErrNoGateway", err)
	}
}

// cancelDetail is the cancel_detail of an order's order.cancelled event.
func cancelDetail(t *testing.T, svc *lapse.Service, id string) (string, bool) {
	t.Helper()
	evs, err := svc.Store().OrderEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == order.EventCancelled {
			var p struct {
				Reason string `json:"cancel_reason"`
				Detail string `json:"cancel_detail"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.Reason != string(order.ReasonOperator) {
				t.Fatalf("order.cancelled of %s: cancel_reason %q, want operator", id, p.Reason)
			}
			return p.Detail, true
		}
	}
	return "", false
}

// An operator cancels a PAYING order, before its deadline too: the trade is
// closed first, then the order is CANCELLED (operator), its stock released,
// its attempt FAILED, order.cancelled written.
func TestCancelAsOperatorClosesThenCancels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := newOpGateway()
	svc := opService(t, gw)
	paying(t, svc, "oc-1", time.Hour)
	o, err := svc.CancelAsOperator(ctx, "oc-1", lapse.OperatorCancel{})
	if err != nil || o.Status != order.Cancelled || o.CancelReason != order.ReasonOperator {
		t.Fatalf("operator's cancel: %s %q, %v", o.Status, o.CancelReason, err)
	}
	if gw.closed("oc-1") != 1 {
		t.Fatalf("closes: %d, want 1", gw.closed("oc-1"))
	}
	for _, p := range o.Payments {
		if p.Status != order.PaymentFailed {
			t.Errorf("attempt %s: %s, want FAILED", p.PaymentID, p.Status)
		}
	}
	if detail, ok := cancelDetail(t, svc, "oc-1"); !ok || detail != "" {
		t.Errorf("order.cancelled: found %v, cancel_detail %q", ok, detail)
	}
	if sku, err := svc.GetSKU(ctx, "sku"); err != nil || sku.Available != 100 || sku.Locked != 0 {
		t.Errorf("stock after the cancel: %+v, %v", sku, err)
	}
	if _, err := svc.CancelAsOperator(ctx, "oc-1", lapse.OperatorCancel{}); !errors.Is(err, lapse.ErrNotOpen) {
		t.Errorf("cancel a CANCELLED order: %v, want ErrNotOpen", err)
	}
	storetest.AuditOK(t, svc.Store())
}

// A close that fails leaves the order as it was; one that finds the trade
// paid records the payment; no_close cancels without asking the gateway.
func TestCancelAsOperatorNeverCancelsWithoutTheClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := newOpGateway()
	svc := opService(t, gw)
	paying(t, svc, "oc-down", time.Hour)
	gw.set(func(g *opGateway) { g.closeErr = errors.New("gateway down"); g.queryErr = errors.New("gateway down") })
	if _, err := svc.CancelAsOperator(ctx, "oc-down", lapse.OperatorCancel{}); !errors.Is(err, lapse.ErrCloseFailed) {
		t.Fatalf("close failed: %v, want ErrCloseFailed", err)
	}
	if got := status(t, svc, "oc-down"); got != order.Paying {
		t.Fatalf("after a failed close: %s, want PAYING", got)
	}
	o, err := svc.CancelAsOperator(ctx, "oc-down", lapse.OperatorCancel{NoClose: true})
	if err != nil || o.Status != order.Cancelled || o.CancelReason != order.ReasonOperator {
		t.Fatalf("no_close: %s %q, %v", o.Status, o.CancelReason, err)
	}
	if detail, _ := cancelDetail(t, svc, "oc-down"); detail != "closed_by_hand" {
		t.Errorf("cancel_detail %q, want closed_by_hand", detail)
	}
	if n := gw.closed("oc-down"); n != 1 {
		t.Errorf("closes: %d, want the failed one only", n)
	}

	paying(t, svc, "oc-paid", time.Hour)
	gw.set(func(g *opGateway) {
		g.closeErr, g.queryErr = nil, nil
		g.state["oc-paid"] = payment.Status{State: payment.StatePaid, PaymentID: "oc-paid-1", AmountCents: 100}
	})
	if _, err := svc.CancelAsOperator(ctx, "oc-paid", lapse.OperatorCancel{}); !errors.Is(err, lapse.ErrAlreadyPaid) {
		t.Fatalf("a close finding the trade paid: %v, want ErrAlreadyPaid", err)
	}
	if got := status(t, svc, "oc-paid"); got != order.Paid {
		t.Fatalf("after the close found a payment: %s, want PAID", got)
	}
	storetest.AuditOK(t, svc.Store())
}

// Without a gateway a close cannot be made: only no_close cancels.
func TestCancelAsOperatorWithoutAGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := opService(t, nil)
	create(t, svc, "oc-plain", time.Hour)
	if _, err := svc.CancelAsOperator(ctx, "oc-plain", lapse.OperatorCancel{}); !errors.Is(err, lapse.ErrNoGateway) {
		t.Fatalf("no gateway: %v, want ErrNoGateway", err)
	}
	if o, err := svc.CancelAsOperator(ctx, "oc-plain", lapse.OperatorCancel{NoClose: true}); err != nil || o.CancelReason != order.ReasonOperator {
		t.Fatalf("no gateway, no_close: %+v, %v", o, err)
	}
}

// In order-service mode the order service owns the status: refused.
func TestCancelAsOperatorInOrderServiceMode(t *testing.T) {
	t.Parallel()
	svc, _ := orderServicePG(t, http.NotFoundHandler())
	if _, err := svc.CancelAsOperator(context.Background(), "any", lapse.OperatorCancel{NoClose: true}); !errors.Is(err, lapse.ErrOrderServiceOwnsStatus) {
		t.Fatalf("order-service mode: %v, want ErrOrderServiceOwnsStatus", err)
	}
}
