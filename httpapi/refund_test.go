package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
)

type refundAnswer struct {
	Order    order.Order `json:"order"`
	Pending  bool        `json:"pending"`
	RefundID string      `json:"refund_id"`
}

func wantRefund(t *testing.T, r response, status int) refundAnswer {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var a refundAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	return a
}

func attemptStatus(o order.Order, paymentID string) order.PaymentStatus {
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return p.Status
		}
	}
	return ""
}

// POST /v1/payments/{payment_id}/refund: an operator gives back a
// REFUND_REQUIRED attempt's money now (once at the gateway however often
// asked), or records a refund made by hand; nothing else is refundable,
// and a gateway that does not refund is said so.
func TestRefundPaymentNow(t *testing.T) {
	t.Parallel()
	mock := payment.NewMock(payment.MockConfig{})
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = mock.Close() })
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{Gateway: gw})
	e.setStock(t, "a", 100)
	// A paid order charged a second time: the second payment is money to
	// give back.
	paidTwice := func(id, first, second string, atGateway bool) {
		t.Helper()
		e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
		if r := e.notifySigned(t, notifyReq{OrderID: id, PaymentID: first, Status: "SUCCEEDED", AmountCents: 100}); r.Status != http.StatusOK {
			t.Fatalf("notify %s: %d %s", first, r.Status, r.Body)
		}
		if atGateway {
			if _, err := mock.Pay(id, 100, payment.OutcomeSucceeded, second); err != nil {
				t.Fatal(err)
			}
		}
		if r := e.notifySigned(t, notifyReq{OrderID: id, PaymentID: second, Status: "SUCCEEDED", AmountCents: 100}); r.Status != http.StatusOK {
			t.Fatalf("notify %s: %d %s", second, r.Status, r.Body)
		}
		o := wantOrder(t, e.do(t, "GET", "/v1/orders/"+id, nil), http.StatusOK)
		if !o.RefundRequired || attemptStatus(o, second) != order.PaymentRefundRequired {
			t.Fatalf("%s paid twice: %+v, want %s REFUND_REQUIRED", id, o, second)
		}
	}

	t.Run("a REFUND_REQUIRED attempt is refunded at the gateway once, however often asked", func(t *testing.T) {
		paidTwice("r1", "r1-a", "r1-b", true)
		a := wantRefund(t, e.do(t, "POST", "/v1/payments/r1-b/refund", nil), http.StatusOK)
		if a.Order.RefundRequired || attemptStatus(a.Order, "r1-b") != order.PaymentRefunded || a.RefundID == "" || a.Pending {
			t.Fatalf("refund: %+v, want r1-b REFUNDED with the gateway's refund id, nothing owed", a)
		}
		again := wantRefund(t, e.do(t, "POST", "/v1/payments/r1-b/refund", map[string]any{}), http.StatusOK)
		if attemptStatus(again.Order, "r1-b") != order.PaymentRefunded {
			t.Fatalf("asked again: %+v", again)
		}
		if rs := mock.Refunds("r1"); len(rs) != 1 || rs[0].PaymentID != "r1-b" || rs[0].AmountCents != 100 {
			t.Fatalf("refunds at the gateway: %+v, want one of r1-b", rs)
		}
		wantError(t, e.do(t, "POST", "/v1/payments/r1-a/refund", nil), http.StatusConflict, "not_refundable")
		wantError(t, e.do(t, "POST", "/v1/payments/no-such-payment/refund", nil), http.StatusNotFound, "payment_not_found")
	})

	t.Run("a refund made by hand is recorded, the gateway not asked", func(t *testing.T) {
		paidTwice("r2", "r2-a", "r2-b", false)
		a := wantRefund(t, e.do(t, "POST", "/v1/payments/r2-b/refund",
			map[string]any{"manual": true, "note": "refunded in the console", "refund_id": "re_by_hand"}), http.StatusOK)
		if a.Order.RefundRequired || attemptStatus(a.Order, "r2-b") != order.PaymentRefunded {
			t.Fatalf("manual: %+v", a)
		}
		if rs := mock.Refunds("r2"); len(rs) != 0 {
			t.Fatalf("the gateway was asked for a refund made by hand: %+v", rs)
		}
	})

	t.Run("the gateway failing is a 502 and records nothing; asked again, one refund", func(t *testing.T) {
		paidTwice("r3", "r3-a", "r3-b", true)
		ctl := mock.Control()
		ctl.FailRefunds = 1
		mock.SetControl(ctl)
		wantError(t, e.do(t, "POST", "/v1/payments/r3-b/refund", nil), http.StatusBadGateway, "gateway_unavailable")
		o := wantOrder(t, e.do(t, "GET", "/v1/orders/r3", nil), http.StatusOK)
		if !o.RefundRequired || attemptStatus(o, "r3-b") != order.PaymentRefundRequired {
			t.Fatalf("after the failed refund: %+v, want r3-b still owed", o)
		}
		wantRefund(t, e.do(t, "POST", "/v1/payments/r3-b/refund", nil), http.StatusOK)
		if rs := mock.Refunds("r3"); len(rs) != 1 {
			t.Fatalf("refunds at the gateway: %+v, want one", rs)
		}
	})

	t.Run("bad bodies are 400 and change nothing", func(t *testing.T) {
		paidTwice("r4", "r4-a", "r4-b", true)
		for name, body := range map[string]any{
			"refund_id without manual":  map[string]any{"refund_id": "re_x"},
			"an unknown field":          map[string]any{"why": "x"},
			"manual not a boolean":      map[string]any{"manual": "yes"},
			"a note too long":           map[string]any{"manual": true, "note": strings.Repeat("n", 1001)},
			"by hand without a note":    map[string]any{"manual": true},
			"by hand with a blank note": map[string]any{"manual": true, "note": "  "},
			"a refund id too long":      map[string]any{"manual": true, "note": "console", "refund_id": strings.Repeat("r", 256)},
		} {
			if r := e.do(t, "POST", "/v1/payments/r4-b/refund", body); r.Status != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", name, r.Status, r.Body)
			}
		}
		o := wantOrder(t, e.do(t, "GET", "/v1/orders/r4", nil), http.StatusOK)
		if attemptStatus(o, "r4-b") != order.PaymentRefundRequired || len(mock.Refunds("r4")) != 0 {
			t.Fatalf("after bad bodies: %+v, refunds %+v", o, mock.Refunds("r4"))
		}
	})
}

// A gateway that cannot refund: the API says so (409 no_refunder), and a
// refund made by hand can still be recorded.
func TestRefundPaymentWithoutARefunder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Gateway: newStubGateway()})
	e.setStock(t, "a", 100)
	e.create(t, createReq{ID: "n1", Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
	for _, p := range []string{"n1-a", "n1-b"} {
		if r := e.notifySigned(t, notifyReq{OrderID: "n1", PaymentID: p, Status: "SUCCEEDED", AmountCents: 100}); r.Status != http.StatusOK {
			t.Fatalf("notify %s: %d %s", p, r.Status, r.Body)
		}
	}
	wantError(t, e.do(t, "POST", "/v1/payments/n1-b/refund", nil), http.StatusConflict, "no_refunder")
	a := wantRefund(t, e.do(t, "POST", "/v1/payments/n1-b/refund", map[string]any{"manual": true, "note": "by hand"}), http.StatusOK)
	if attemptStatus(a.Order, "n1-b") != order.PaymentRefunded || a.Order.RefundRequired {
		t.Fatalf("manual without a refunder: %+v", a)
	}
}

type refundsPage struct {
	Refunds   []order.Refund `json:"refunds"`
	NextAfter string         `json:"next_after"`
}

func (e *env) listRefunds(t *testing.T, query string) refundsPage {
	t.Helper()
	r := e.do(t, "GET", "/v1/refunds"+query, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/refunds%s: %d %s", query, r.Status, r.Body)
	}
	var p refundsPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// GET /v1/refunds and POST /v1/refunds/retry, with --auto-refund and lapse's
// mock gateway: refunds of payments the gateway does not know are DEAD at
// once, listed with their error and paged by payment id; once the gateway
// holds the money, a retry by payment id (then of every dead one) refunds
// them; bad queries and bodies are 400 with a stable code and change
// nothing.
func TestRefundsOverHTTP(t *testing.T) {
	t.Parallel()
	mock := payment.NewMock(payment.MockConfig{})
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = mock.Close() })
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{Gateway: gw, AutoRefund: true, Refunds: refund.Config{Interval: 10 * time.Millisecond, RetryBase: time.Hour, RetryMax: time.Hour}})
	e.setStock(t, "a", 100)
	// Each order is paid, then paid again by an attempt the gateway knows
	// nothing of: its refund is DEAD (unknown payment).
	for _, id := range []string{"d1", "d2"} {
		e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: 100, TimeoutSeconds: secs(3600)})
		for _, p := range []string{id + "-a", id + "-b"} {
			if r := e.notifySigned(t, notifyReq{OrderID: id, PaymentID: p, Status: "SUCCEEDED", AmountCents: 100}); r.Status != http.StatusOK {
				t.Fatalf("notify %s: %d %s", p, r.Status, r.Body)
			}
		}
	}
	eventually(t, "two DEAD refunds", func() bool { return len(e.listRefunds(t, "?dead=true").Refunds) == 2 })
	dead := e.listRefunds(t, "?dead=true")
	if r := dead.Refunds[0]; r.PaymentID != "d1-b" || r.OrderID != "d1" || r.Status != order.TaskDead || r.AmountCents != 100 ||
		r.Currency != "USD" || r.LastError == "" || r.DeadAt.IsZero() || dead.Refunds[1].PaymentID != "d2-b" || dead.NextAfter != "" {
		t.Fatalf("DEAD refunds: %+v", dead)
	}
	first := e.listRefunds(t, "?limit=1")
	if len(first.Refunds) != 1 || first.NextAfter != "d1-b" {
		t.Fatalf("a page of one: %+v", first)
	}
	if rest := e.listRefunds(t, "?limit=1&after="+first.NextAfter); len(rest.Refunds) != 1 || rest.Refunds[0].PaymentID != "d2-b" || rest.NextAfter != "" {
		t.Fatalf("the next page: %+v", rest)
	}
	if p := e.listRefunds(t, "?order_id=nobody"); len(p.Refunds) != 0 ||
		!strings.Contains(string(e.do(t, "GET", "/v1/refunds?order_id=nobody", nil).Body), `"refunds":[]`) {
		t.Fatalf("refunds of an unknown order: %+v", p)
	}

	// Bad input: 400 invalid_field (invalid_json for a body that does not
	// parse), nothing retried.
	for _, q := range []string{"?dead=maybe", "?limit=0", "?limit=501", "?limit=x", "?order_id=not%20an%20id", "?after=%00", "?after=" + strings.Repeat("p", 129)} {
		wantError(t, e.do(t, "GET", "/v1/refunds"+q, nil), http.StatusBadRequest, "invalid_field")
	}
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("p-%d", i)
	}
	for _, body := range []any{`{}`, `{"dead":false}`, `{"ids":["d1-b"],"dead":true}`, `{"ids":[""]}`, `{"ids":[]}`, `{"all":true}`,
		map[string]any{"ids": tooMany}, map[string]any{"ids": []string{strings.Repeat("p", 129)}}} {
		wantError(t, e.do(t, "POST", "/v1/refunds/retry", body), http.StatusBadRequest, "invalid_field")
	}
	wantError(t, e.do(t, "POST", "/v1/refunds/retry", `{"dead":`), http.StatusBadRequest, "invalid_json")
	wantError(t, e.do(t, "GET", "/v1/refunds/retry", nil), http.StatusMethodNotAllowed, "method_not_allowed")
	if p := e.listRefunds(t, "?dead=true"); len(p.Refunds) != 2 {
		t.Fatalf("after the refused requests: %+v, want both still DEAD", p)
	}

	// The gateway now holds both second payments: d1-b retried by its
	// payment id, then every dead one (d2-b).
	for _, id := range []string{"d1", "d2"} {
		if _, err := mock.Pay(id, 100, payment.OutcomeSucceeded, id+"-b"); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(t, "/v1/refunds/retry", map[string]any{"ids": []string{"d1-b", "no-such-payment"}}, "retried"); n != 1 {
		t.Fatalf("retry d1-b: %d, want 1", n)
	}
	eventually(t, "d1-b REFUNDED", func() bool { return attemptStatus(e.get(t, "d1"), "d1-b") == order.PaymentRefunded })
	if n := e.count(t, "/v1/refunds/retry", map[string]bool{"dead": true}, "retried"); n != 1 {
		t.Fatalf("retry every dead refund: %d, want d2-b's", n)
	}
	eventually(t, "d2-b REFUNDED", func() bool { return attemptStatus(e.get(t, "d2"), "d2-b") == order.PaymentRefunded })
	if p := e.listRefunds(t, ""); len(p.Refunds) != 0 {
		t.Fatalf("refunds not DONE after the retries: %+v", p)
	}
	if p := e.listRefunds(t, "?order_id=d1"); len(p.Refunds) != 1 || p.Refunds[0].Status != order.TaskDone || p.Refunds[0].RefundID == "" {
		t.Fatalf("d1's refunds: %+v, want one DONE with the gateway's id", p)
	}
	if rs := mock.Refunds("d1"); len(rs) != 1 {
		t.Fatalf("refunds of d1 at the gateway: %+v, want one", rs)
	}
}
