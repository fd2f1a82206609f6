// Package ordersvctest is an order service for tests of order-service mode:
// a real HTTP receiver of lapse's signed cancel commands, served on
// loopback, that verifies each with the Standard Webhooks library, keeps its
// own record of orders, applies a cancel once, and answers as
// docs/order-service.md asks a shop's receiver to. lapse reaches it through
// the real sender (ordersvc.NewHTTP), as `lapse serve --order-service` does.
package ordersvctest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/ordersvc"
)

// Secret signs the commands the receiver takes (for tests only).
const Secret = "whsec_b3JkZXJzdmN0ZXN0LXNlY3JldC1mb3ItbGFwc2UtdGVzdHM="

// State is where an order stands at the receiver, which decides its answer.
type State string

// The states. An order the receiver does not know is answered not_found.
const (
	// Pending orders are cancelled by the command: answered cancelled, then
	// already_cancelled.
	Pending   State = "pending"
	Cancelled State = "cancelled" // answered already_cancelled
	Paid      State = "paid"      // answered already_paid
	Paying    State = "paying"    // answered paying, retry after a second
	// Refuse answers the order's commands 400: lapse parks them DEAD.
	Refuse State = "refuse"
	// Unavailable answers the order's commands 503: lapse retries them.
	Unavailable State = "unavailable"
)

// Receiver is the order service. Its methods are safe for concurrent use.
type Receiver struct {
	verify *standardwebhooks.Webhook
	srv    *httptest.Server

	mu         sync.Mutex
	orders     map[string]State
	deliveries map[string]int // order id → commands received
	cancels    map[string]int // order id → cancels applied
}

// New starts a receiver, stopped when the test ends.
func New(t testing.TB) *Receiver {
	t.Helper()
	w, err := standardwebhooks.NewWebhook(Secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{verify: w, orders: map[string]State{}, deliveries: map[string]int{}, cancels: map[string]int{}}
	r.srv = httptest.NewServer(r)
	t.Cleanup(r.srv.Close)
	return r
}

// Client is lapse's sender to the receiver (Config.OrderService).
func (r *Receiver) Client(t testing.TB) ordersvc.Client {
	t.Helper()
	c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: r.srv.URL + "/lapse/commands", Secrets: []string{Secret}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Set records where an order stands at the receiver.
func (r *Receiver) Set(orderID string, s State) {
	r.mu.Lock()
	r.orders[orderID] = s
	r.mu.Unlock()
}

// State returns where an order stands at the receiver.
func (r *Receiver) State(orderID string) (State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.orders[orderID]
	return s, ok
}

// Deliveries counts the commands received for an order, and the cancels
// they applied (at most one, whatever the deliveries).
func (r *Receiver) Deliveries(orderID string) (received, cancels int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliveries[orderID], r.cancels[orderID]
}

// ServeHTTP takes one command.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil || r.verify.Verify(body, req.Header) != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var c ordersvc.Command
	if err := json.Unmarshal(body, &c); err != nil || c.Validate() != nil {
		http.Error(w, "bad command", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.deliveries[c.OrderID]++
	var res ordersvc.Result
	switch st, ok := r.orders[c.OrderID]; {
	case !ok:
		res = ordersvc.NotFound
	case st == Refuse:
		r.mu.Unlock()
		http.Error(w, "this order service refuses the command", http.StatusBadRequest)
		return
	case st == Unavailable:
		r.mu.Unlock()
		http.Error(w, "down for a while", http.StatusServiceUnavailable)
		return
	case st == Pending: // the receiver's conditional update
		r.orders[c.OrderID] = Cancelled
		r.cancels[c.OrderID]++
		res = ordersvc.Cancelled
	case st == Cancelled:
		res = ordersvc.AlreadyCancelled
	case st == Paid:
		res = ordersvc.AlreadyPaid
	case st == Paying:
		res = ordersvc.Paying
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ordersvc.Answer{Result: res, RetryAfterSeconds: 1,
		CommandID: req.Header.Get(standardwebhooks.HeaderWebhookID)})
}
