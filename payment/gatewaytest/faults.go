package gatewaytest

import (
	"net/http"
	"net/http/httptest"
	"sync"
)

// Faults is the fault injection the fakes of gateways share, by operation
// (each fake names its own: Alipay's method, WeChat Pay's "refund",
// Stripe's "POST /v1/refunds"): the next requests of an operation answered
// 500 without being applied, or one applied and its answer never sent —
// the gateway made the refund, but the process that asked died before it
// could record it. Its zero value injects nothing; it is safe for
// concurrent use.
type Faults struct {
	mu   sync.Mutex
	fail map[string]int
	hold map[string]chan struct{}
	stop chan struct{}
}

// FailNext makes the next n requests of op answer 500, changing nothing.
func (f *Faults) FailNext(op string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]int{}
	}
	f.fail[op] = n
}

// HoldNext makes the next request of op (after those FailNext fails) be
// applied and its answer withheld until the client gives up on it (its
// connection closes: a process killed) or Release. The channel returned
// closes once that request was applied.
func (f *Faults) HoldNext(op string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold == nil {
		f.hold = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.hold[op] = ch
	return ch
}

// Release ends every answer held, now and from now on (a fake's cleanup
// calls it, so that its server can close).
func (f *Faults) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop == nil {
		f.stop = make(chan struct{})
	}
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
}

// Serve serves a request of op through next under the faults set: fail
// writes the fake's own 500 (each gateway words it its own way).
func (f *Faults) Serve(w http.ResponseWriter, r *http.Request, op string, next http.Handler, fail func(http.ResponseWriter)) {
	f.mu.Lock()
	if f.stop == nil {
		f.stop = make(chan struct{})
	}
	stop := f.stop
	failing := f.fail[op] > 0
	held := f.hold[op]
	switch {
	case failing:
		f.fail[op]--
	case held != nil:
		delete(f.hold, op)
	}
	f.mu.Unlock()
	switch {
	case failing:
		fail(w)
	case held != nil:
		next.ServeHTTP(httptest.NewRecorder(), r) // applied; the answer is dropped
		close(held)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
		// Cut the connection rather than answer: the client never learns.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
	default:
		next.ServeHTTP(w, r)
	}
}

// TradeNo is the out_trade_no under which a fake keeps the trade of an
// order's payment attempt: the payment id, or the order id when there is
// none (payment.ByTradeNo's rule).
func TradeNo(orderID, paymentID string) string {
	if paymentID != "" {
		return paymentID
	}
	return orderID
}
