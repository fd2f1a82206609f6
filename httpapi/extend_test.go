package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
)

// ---------------------------------------------------------------------------
// POST /v1/orders/{id}/extend
// ---------------------------------------------------------------------------

func TestExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Minute})
	e.setStock(t, "a", 100)
	mk := func(t *testing.T, id string, timeout float64) order.Order {
		return e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(timeout)})
	}

	t.Run("expires_at moves both deadlines, keeping the grace", func(t *testing.T) {
		o := mk(t, "x-at", 60)
		at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
		got := wantOrder(t, e.do(t, "POST", "/v1/orders/x-at/extend", map[string]any{"expires_at": at.Format(time.RFC3339Nano)}), http.StatusOK)
		if !got.ExpiresAt.Equal(at) || got.CancelAfter.Sub(got.ExpiresAt) != time.Minute || got.Version != o.Version+1 || got.Status != order.Pending {
			t.Errorf("extended %+v; want expires_at %v, the minute of grace kept, version %d", got, at, o.Version+1)
		}
		if g := e.get(t, "x-at"); !g.ExpiresAt.Equal(at) {
			t.Errorf("read back expires_at %v, want %v", g.ExpiresAt, at)
		}
	})

	t.Run("timeout_seconds counts from now, and may shorten", func(t *testing.T) {
		o := mk(t, "x-secs", 3600)
		before := time.Now()
		got := wantOrder(t, e.do(t, "POST", "/v1/orders/x-secs/extend", map[string]any{"timeout_seconds": 30}), http.StatusOK)
		after := time.Now()
		if got.ExpiresAt.Before(before.Add(30*time.Second).Truncate(time.Millisecond)) || got.ExpiresAt.After(after.Add(30*time.Second)) ||
			!got.ExpiresAt.Before(o.ExpiresAt) {
			t.Errorf("expires_at %v; want now + 30 s (between %v and %v)", got.ExpiresAt, before.Add(30*time.Second), after.Add(30*time.Second))
		}
	})

	t.Run("not exactly one of expires_at and timeout_seconds is 400 invalid_field", func(t *testing.T) {
		mk(t, "x-bad", 60)
		before := e.snapshot(t, []string{"x-bad"}, []string{"a"})
		for name, body := range map[string]any{
			"neither":              map[string]any{},
			"both":                 map[string]any{"expires_at": time.Now().Add(time.Hour).Format(time.RFC3339), "timeout_seconds": 60},
			"not RFC 3339":         map[string]any{"expires_at": "tomorrow"},
			"in the past":          map[string]any{"expires_at": time.Now().Add(-time.Minute).Format(time.RFC3339)},
			"zero seconds":         map[string]any{"timeout_seconds": 0},
			"negative seconds":     map[string]any{"timeout_seconds": -5},
			"over the max timeout": map[string]any{"timeout_seconds": 8 * 24 * 3600},
		} {
			r := e.do(t, "POST", "/v1/orders/x-bad/extend", body)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400: %s", name, r.Status, r.Body)
				continue
			}
			wantError(t, r, http.StatusBadRequest, "invalid_field")
		}
		wantError(t, e.do(t, "POST", "/v1/orders/x-bad/extend", ""), http.StatusBadRequest, "invalid_json")
		wantUnchanged(t, before, e.snapshot(t, []string{"x-bad"}, []string{"a"}))
	})

	t.Run("PAYING, PAID and CANCELLED are 409 order_not_pending", func(t *testing.T) {
		mk(t, "x-paying", 60)
		wantOrder(t, e.do(t, "POST", "/v1/orders/x-paying/pay", nil), http.StatusOK)
		paid := mk(t, "x-paid", 60)
		wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "x-paid", PaymentID: "pay-x", Status: "SUCCEEDED", AmountCents: paid.AmountCents}), "paid")
		mk(t, "x-cancelled", 60)
		wantOrder(t, e.do(t, "POST", "/v1/orders/x-cancelled/cancel", nil), http.StatusOK)
		ids := []string{"x-paying", "x-paid", "x-cancelled"}
		before := e.snapshot(t, ids, []string{"a"})
		for _, id := range ids {
			wantError(t, e.do(t, "POST", "/v1/orders/"+id+"/extend", map[string]any{"timeout_seconds": 60}), http.StatusConflict, "order_not_pending")
		}
		wantUnchanged(t, before, e.snapshot(t, ids, []string{"a"}))
	})

	t.Run("a PENDING order past expires_at is 409 order_expired", func(t *testing.T) {
		o := mk(t, "x-late", 0.05) // the minute of grace holds the cancel off
		waitFor(t, "expires_at to pass", 5*time.Second, func() bool { return time.Now().After(o.ExpiresAt.Add(time.Millisecond)) })
		wantError(t, e.do(t, "POST", "/v1/orders/x-late/extend", map[string]any{"timeout_seconds": 60}), http.StatusConflict, "order_expired")
		if g := e.get(t, "x-late"); g.Version != o.Version || !g.ExpiresAt.Equal(o.ExpiresAt) {
			t.Errorf("a refused extend changed the order: %+v", g)
		}
	})

	t.Run("an unknown order is 404", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/orders/nope/extend", map[string]any{"timeout_seconds": 60}), http.StatusNotFound, "order_not_found")
	})
}
