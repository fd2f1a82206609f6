package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/ordersvctest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/payment"
)

// stubGateway answers per order as the test sets it; every close succeeds
// unless closeErr is set, and a close of a paid trade is ErrAlreadyPaid.
type stubGateway struct {
	mu       sync.Mutex
	state    map[string]payment.Status
	queryErr error
	closeErr error
	closes   map[string]int
}

func newStubGateway() *stubGateway {
	return &stubGateway{state: map[string]payment.Status{}, closes: map[string]int{}}
}

func (g *stubGateway) Query(_ context.Context, id string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queryErr != nil {
		return payment.Status{}, g.queryErr
	}
	if st, ok := g.state[id]; ok {
		return st, nil
	}
	return payment.Status{State: payment.StateNotPaid}, nil
}

func (g *stubGateway) Close(_ context.Context, id string) error {
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

func (g *stubGateway) with(f func(g *stubGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *stubGateway) closed(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closes[id]
}

// payingOrder creates an order (an hour to pay) and starts its payment.
func (e *env) payingOrder(t *testing.T, id string) order.Order {
	t.Helper()
	e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
	return wantOrder(t, e.do(t, "POST", "/v1/orders/"+id+"/pay", nil), http.StatusOK)
}

// ---------------------------------------------------------------------------
// POST /v1/orders/{id}/cancel with {"reason": "operator", "force": true}
// ---------------------------------------------------------------------------

func TestOperatorCancel(t *testing.T) {
	t.Parallel()
	gw := newStubGateway()
	e := newEnv(t, envConfig{Gateway: gw})
	e.setStock(t, "a", 100)
	op := map[string]any{"reason": "operator", "force": true}

	t.Run("a PAYING order is closed at the gateway, then CANCELLED as operator", func(t *testing.T) {
		e.payingOrder(t, "op-1")
		got := wantOrder(t, e.do(t, "POST", "/v1/orders/op-1/cancel", op), http.StatusOK)
		if got.Status != order.Cancelled || got.CancelReason != order.ReasonOperator {
			t.Fatalf("operator's cancel: %s %q", got.Status, got.CancelReason)
		}
		if gw.closed("op-1") != 1 {
			t.Errorf("closes: %d, want 1", gw.closed("op-1"))
		}
	})

	t.Run("no body, and {}, are the buyer's cancel as before", func(t *testing.T) {
		for _, body := range []any{nil, map[string]any{}} {
			id := "op-buyer-" + map[bool]string{true: "none", false: "empty"}[body == nil]
			e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
			got := wantOrder(t, e.do(t, "POST", "/v1/orders/"+id+"/cancel", body), http.StatusOK)
			if got.CancelReason != order.ReasonBuyer {
				t.Errorf("%s: cancel_reason %q, want buyer", id, got.CancelReason)
			}
		}
		e.payingOrder(t, "op-buyer-paying")
		wantError(t, e.do(t, "POST", "/v1/orders/op-buyer-paying/cancel", nil), http.StatusConflict, "order_not_pending")
	})

	t.Run("bad bodies are 400 and change nothing", func(t *testing.T) {
		e.payingOrder(t, "op-bad")
		before := e.snapshot(t, []string{"op-bad"}, []string{"a"})
		for name, body := range map[string]any{
			"another reason":       map[string]any{"reason": "buyer", "force": true},
			"no force":             map[string]any{"reason": "operator"},
			"force false":          map[string]any{"reason": "operator", "force": false},
			"force without reason": map[string]any{"force": true},
			"no_close alone":       map[string]any{"no_close": true},
		} {
			r := e.do(t, "POST", "/v1/orders/op-bad/cancel", body)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", name, r.Status, r.Body)
				continue
			}
			wantError(t, r, http.StatusBadRequest, "invalid_field")
		}
		wantError(t, e.do(t, "POST", "/v1/orders/op-bad/cancel", map[string]any{"reason": "operator", "force": "yes"}), http.StatusBadRequest, "invalid_field")
		wantError(t, e.do(t, "POST", "/v1/orders/op-bad/cancel", map[string]any{"reason": "operator", "force": true, "why": "x"}), http.StatusBadRequest, "invalid_field")
		wantError(t, e.do(t, "POST", "/v1/orders/op-bad/cancel", "{"), http.StatusBadRequest, "invalid_json")
		wantUnchanged(t, before, e.snapshot(t, []string{"op-bad"}, []string{"a"}))
		if n := gw.closed("op-bad"); n != 0 {
			t.Errorf("%d closes for refused requests", n)
		}
	})

	t.Run("a close that fails is 502 close_failed and changes nothing; no_close then cancels", func(t *testing.T) {
		e.payingOrder(t, "op-down")
		gw.with(func(g *stubGateway) { g.closeErr = errors.New("gateway down") })
		before := e.snapshot(t, []string{"op-down"}, []string{"a"})
		wantError(t, e.do(t, "POST", "/v1/orders/op-down/cancel", op), http.StatusBadGateway, "close_failed")
		wantUnchanged(t, before, e.snapshot(t, []string{"op-down"}, []string{"a"}))
		got := wantOrder(t, e.do(t, "POST", "/v1/orders/op-down/cancel", map[string]any{"reason": "operator", "force": true, "no_close": true}), http.StatusOK)
		gw.with(func(g *stubGateway) { g.closeErr = nil })
		if got.Status != order.Cancelled || got.CancelReason != order.ReasonOperator || gw.closed("op-down") != 1 {
			t.Errorf("no_close: %s %q after %d closes", got.Status, got.CancelReason, gw.closed("op-down"))
		}
	})

	t.Run("a close that finds the trade paid is 409 already_paid, the order PAID", func(t *testing.T) {
		e.payingOrder(t, "op-paid")
		gw.with(func(g *stubGateway) {
			g.state["op-paid"] = payment.Status{State: payment.StatePaid, PaymentID: "op-paid-1", AmountCents: 100}
		})
		wantError(t, e.do(t, "POST", "/v1/orders/op-paid/cancel", op), http.StatusConflict, "already_paid")
		if got := e.get(t, "op-paid"); got.Status != order.Paid {
			t.Errorf("after already_paid: %s, want PAID", got.Status)
		}
		wantError(t, e.do(t, "POST", "/v1/orders/op-paid/cancel", op), http.StatusConflict, "order_not_open")
	})

	t.Run("no such order is 404 order_not_found", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders/op-missing/cancel", op), http.StatusNotFound, "order_not_found")
	})
}

func TestOperatorCancelWithoutAGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.setStock(t, "a", 10)
	e.payingOrder(t, "og-1")
	before := e.snapshot(t, []string{"og-1"}, []string{"a"})
	wantError(t, e.do(t, "POST", "/v1/orders/og-1/cancel", map[string]any{"reason": "operator", "force": true}), http.StatusConflict, "no_gateway")
	wantUnchanged(t, before, e.snapshot(t, []string{"og-1"}, []string{"a"}))
	got := wantOrder(t, e.do(t, "POST", "/v1/orders/og-1/cancel", map[string]any{"reason": "operator", "force": true, "no_close": true}), http.StatusOK)
	if got.CancelReason != order.ReasonOperator {
		t.Errorf("no_close without a gateway: %q", got.CancelReason)
	}
	wantError(t, e.do(t, "POST", "/v1/orders/og-1/check", nil), http.StatusConflict, "no_gateway")
}

func TestOperatorCancelInOrderServiceMode(t *testing.T) {
	rcv := ordersvctest.New(t)
	e := newEnv(t, envConfig{Postgres: true, OrderService: rcv.Client(t), Commands: ordersvc.DispatcherConfig{
		Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}})
	rcv.Set("os-1", ordersvctest.Pending)
	e.create(t, createReq{ID: "os-1", Items: []item{{"tee", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
	before := e.snapshot(t, []string{"os-1"}, nil)
	wantError(t, e.do(t, "POST", "/v1/orders/os-1/cancel", map[string]any{"reason": "operator", "force": true, "no_close": true}),
		http.StatusConflict, "order_service_owns_status")
	wantUnchanged(t, before, e.snapshot(t, []string{"os-1"}, nil))
}

// ---------------------------------------------------------------------------
// POST /v1/orders/{id}/check
// ---------------------------------------------------------------------------

func TestCheckOrderNow(t *testing.T) {
	t.Parallel()
	gw := newStubGateway()
	e := newEnv(t, envConfig{Gateway: gw})
	e.setStock(t, "a", 100)
	type answer struct {
		Gateway struct {
			State     string `json:"state"`
			PaymentID string `json:"payment_id"`
		} `json:"gateway"`
		Order order.Order `json:"order"`
	}
	check := func(t *testing.T, id string) answer {
		t.Helper()
		r := e.do(t, "POST", "/v1/orders/"+id+"/check", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("check %s: %d %s", id, r.Status, r.Body)
		}
		var a answer
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}

	t.Run("a PAID answer marks the order PAID at once", func(t *testing.T) {
		e.payingOrder(t, "ck-paid")
		gw.with(func(g *stubGateway) {
			g.state["ck-paid"] = payment.Status{State: payment.StatePaid, PaymentID: "ck-paid-1", AmountCents: 100}
		})
		a := check(t, "ck-paid")
		if a.Gateway.State != "PAID" || a.Gateway.PaymentID != "ck-paid-1" || a.Order.Status != order.Paid {
			t.Errorf("check: %+v", a)
		}
	})

	t.Run("in the buyer's window NOT_PAID changes nothing", func(t *testing.T) {
		e.payingOrder(t, "ck-early")
		a := check(t, "ck-early")
		if a.Gateway.State != "NOT_PAID" || a.Order.Status != order.Paying || gw.closed("ck-early") != 0 {
			t.Errorf("check: %+v after %d closes", a, gw.closed("ck-early"))
		}
	})

	t.Run("an order with nothing to check is 409 order_not_checkable", func(t *testing.T) {
		e.create(t, createReq{ID: "ck-pending", Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
		before := e.snapshot(t, []string{"ck-pending"}, []string{"a"})
		wantError(t, e.do(t, "POST", "/v1/orders/ck-pending/check", nil), http.StatusConflict, "order_not_checkable")
		wantUnchanged(t, before, e.snapshot(t, []string{"ck-pending"}, []string{"a"}))
		wantError(t, e.do(t, "POST", "/v1/orders/ck-missing/check", nil), http.StatusNotFound, "order_not_found")
	})

	t.Run("a gateway that does not answer is 502 gateway_unavailable", func(t *testing.T) {
		e.payingOrder(t, "ck-down")
		gw.with(func(g *stubGateway) { g.queryErr = errors.New("down") })
		defer gw.with(func(g *stubGateway) { g.queryErr = nil })
		wantError(t, e.do(t, "POST", "/v1/orders/ck-down/check", nil), http.StatusBadGateway, "gateway_unavailable")
		if got := e.get(t, "ck-down"); got.Status != order.Paying {
			t.Errorf("after the failed check: %s", got.Status)
		}
	})
}
