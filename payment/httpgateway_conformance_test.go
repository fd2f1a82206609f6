package payment_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/gatewaytest"
)

// mockFake is the conformance suite's gateway for the generic protocol: the
// mock gateway, behind a handler that fails as the suite asks and answers a
// status the protocol does not have for the trades set TradeUnmapped.
type mockFake struct {
	mock *payment.Mock

	mu       sync.Mutex
	fault    gatewaytest.Fault
	unmapped map[string]bool // order ids
	release  chan struct{}   // ends hung requests when the test ends
}

func (f *mockFake) Set(orderID, paymentID string, st gatewaytest.Trade, amountCents int64) {
	pay := func(outcome string) {
		if _, err := f.mock.Pay(orderID, amountCents, outcome, paymentID); err != nil {
			panic(err)
		}
	}
	switch st {
	case gatewaytest.TradePaid:
		pay(payment.OutcomeSucceeded)
	case gatewaytest.TradeNotPaid:
		pay(payment.OutcomeFailed)
	case gatewaytest.TradePending:
		pay(payment.OutcomePending)
	case gatewaytest.TradeClosed:
		pay(payment.OutcomeFailed)
		u := "/payments/" + url.PathEscape(orderID) + "/close"
		if paymentID != "" {
			u += "?payment_id=" + url.QueryEscape(paymentID)
		}
		rec := httptest.NewRecorder()
		f.mock.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, u, nil))
		if rec.Code != http.StatusOK {
			panic("mock close: " + rec.Body.String())
		}
	case gatewaytest.TradeUnknown:
	case gatewaytest.TradeUnmapped:
		f.mu.Lock()
		f.unmapped[orderID] = true
		f.mu.Unlock()
	}
}

func (f *mockFake) Refunds(orderID, paymentID string) int {
	n := 0
	for _, rf := range f.mock.Refunds(orderID) {
		if rf.PaymentID == paymentID {
			n++
		}
	}
	return n
}

func (f *mockFake) Fail(fault gatewaytest.Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

func (f *mockFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fault := f.fault
	unmapped := f.unmapped[r.PathValue("order_id")]
	f.mu.Unlock()
	switch fault {
	case gatewaytest.FaultServerError:
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
		return
	case gatewaytest.FaultHang:
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	case gatewaytest.FaultGarbage:
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>Service maintenance</body></html>"))
		return
	}
	if unmapped && r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"order_id":"` + r.PathValue("order_id") + `","status":"REFUNDED","amount_cents":0,"payment_id":""}`))
		return
	}
	f.mock.ServeHTTP(w, r)
}

func newMockFake(t *testing.T) (*payment.HTTPGateway, *mockFake) {
	f := &mockFake{mock: payment.NewMock(payment.MockConfig{DropCallbacks: true}), unmapped: map[string]bool{},
		release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/payments/{order_id}", f)
	mux.Handle("/payments/{order_id}/{op}", f)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release); _ = f.mock.Close() }) // runs first
	gw, err := payment.NewHTTPGateway(srv.URL+"/", payment.HTTPConfig{Timeout: conformanceTimeout, Retries: -1, BreakerFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	return gw, f
}

const conformanceTimeout = 250 * time.Millisecond

// The generic HTTP gateway passes the conformance suite every adapter runs:
// speaking of the order as a whole, and per attempt (?payment_id=).
func TestHTTPGatewayConformance(t *testing.T) {
	t.Parallel()
	t.Run("order", func(t *testing.T) {
		gatewaytest.Run(t, gatewaytest.Harness{Timeout: conformanceTimeout, New: func(t *testing.T) (payment.Gateway, gatewaytest.Fake) {
			return newMockFake(t)
		}})
	})
	t.Run("per attempt", func(t *testing.T) {
		gatewaytest.Run(t, gatewaytest.Harness{Timeout: conformanceTimeout, New: func(t *testing.T) (payment.Gateway, gatewaytest.Fake) {
			gw, f := newMockFake(t)
			return gw.PerAttempt(), f
		}})
	})
}
