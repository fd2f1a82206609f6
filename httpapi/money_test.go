package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

// TestMoneyPaths replays through the API the money paths issue 23 found
// broken, on SQLite and PostgreSQL: a wrong amount never leaves an order
// PAYING, a re-report of an ended attempt never pays, a payment of an id
// lapse never started supersedes the open attempt, a payment in another
// currency never pays, and one payment id never serves two orders.
func TestMoneyPaths(t *testing.T) {
	t.Parallel()
	for _, pg := range []bool{false, true} {
		name := "sqlite"
		if pg {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{Grace: time.Hour, Postgres: pg})
			e.setStock(t, "a", 10)
			pay := func(id, paymentID string) order.Order {
				t.Helper()
				return wantOrder(t, e.do(t, "POST", "/v1/orders/"+id+"/pay", map[string]string{"payment_id": paymentID}), http.StatusOK)
			}

			// A wrong amount on the current attempt: PENDING again, flagged;
			// the right amount for the same attempt after that is a conflict.
			e.create(t, createReq{ID: "m-amount", Items: []item{{"a", 1}}, AmountCents: 1000})
			pay("m-amount", "pay-1")
			o := wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "m-amount", PaymentID: "pay-1", Status: "SUCCEEDED", AmountCents: 999}), "refund_required")
			if o.Status != order.Pending || !o.RefundRequired || o.PaymentAttempts != 1 {
				t.Fatalf("after 999 of 1000: %+v, want PENDING, refund_required, 1 attempt", o)
			}
			o = wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "m-amount", PaymentID: "pay-1", Status: "SUCCEEDED", AmountCents: 1000}), "conflict")
			if o.Status != order.Pending {
				t.Fatalf("the ended attempt re-reported with 1000 paid the order: %+v", o)
			}
			if p := e.get(t, "m-amount").Payments; len(p) != 1 || p[0].Status != order.PaymentRefundRequired || p[0].Conflicts != 1 {
				t.Fatalf("attempts %+v, want pay-1 REFUND_REQUIRED with 1 conflict", p)
			}

			// The README's walk-through: /pay opens m-open-1, the callback names pay_1.
			e.create(t, createReq{ID: "m-open", Items: []item{{"a", 1}}, AmountCents: 1000})
			wantOrder(t, e.do(t, "POST", "/v1/orders/m-open/pay", nil), http.StatusOK)
			wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "m-open", PaymentID: "pay_1", Status: "SUCCEEDED", AmountCents: 1000}), "paid")
			for _, p := range e.get(t, "m-open").Payments {
				if p.Status == order.PaymentPending {
					t.Fatalf("attempt %s still PENDING on a PAID order", p.PaymentID)
				}
			}

			// Currency: JPY never pays a USD order; "usd" does; a bad code is 400.
			e.create(t, createReq{ID: "m-jpy", Items: []item{{"a", 1}}, AmountCents: 1000})
			pay("m-jpy", "pay-jpy")
			wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "m-jpy", PaymentID: "pay-jpy", Status: "SUCCEEDED", AmountCents: 1000, Currency: "JPY"}), "refund_required")
			e.create(t, createReq{ID: "m-usd", Items: []item{{"a", 1}}, AmountCents: 1000})
			pay("m-usd", "pay-usd")
			wantError(t, e.notifySigned(t, notifyReq{OrderID: "m-usd", PaymentID: "pay-usd", Status: "SUCCEEDED", AmountCents: 1000, Currency: "US"}), http.StatusBadRequest, "invalid_field")
			wantNotify(t, e.notifySigned(t, notifyReq{OrderID: "m-usd", PaymentID: "pay-usd", Status: "SUCCEEDED", AmountCents: 1000, Currency: "usd"}), "paid")

			// One payment id, one order.
			e.create(t, createReq{ID: "m-x1", Items: []item{{"a", 1}}, AmountCents: 1000})
			e.create(t, createReq{ID: "m-x2", Items: []item{{"a", 1}}, AmountCents: 1000})
			pay("m-x1", "pi_shared")
			wantError(t, e.do(t, "POST", "/v1/orders/m-x2/pay", map[string]string{"payment_id": "pi_shared"}), http.StatusConflict, "payment_id_used")
			wantError(t, e.notifySigned(t, notifyReq{OrderID: "m-x2", PaymentID: "pi_shared", Status: "SUCCEEDED", AmountCents: 1000}), http.StatusConflict, "payment_id_used")
			if o := e.get(t, "m-x2"); o.Status != order.Pending || len(o.Payments) != 0 {
				t.Fatalf("m-x2 after the refusals: %+v, want untouched", o)
			}
			storetest.AuditOK(t, e.st)
		})
	}
}
