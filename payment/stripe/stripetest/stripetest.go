// Package stripetest is a local server playing Stripe's API for the calls
// lapse makes — GET /v1/payment_intents/{id}, POST
// /v1/payment_intents/{id}/cancel, GET /v1/checkout/sessions?payment_intent=…,
// POST /v1/checkout/sessions/{id}/expire, POST /v1/refunds, GET
// /v1/refunds?payment_intent=… — with Stripe's documented request
// and response shapes: a bearer key, form-encoded POSTs, JSON objects, error
// objects ({"error": {"type", "code", "message", "param"}}) and a Request-Id
// header. Unlike stripe-mock it keeps state, so that tests can set a
// PaymentIntent's status and see a cancel take effect, and count refunds. A
// POST with an Idempotency-Key already used answers what the first answered
// (Idempotent-Replayed: true), or 400 idempotency_error if its parameters
// differ, as Stripe does.
package stripetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lapsehq/lapse/payment/gatewaytest"
)

// PaymentIntent is the state the server keeps of one.
type PaymentIntent struct {
	ID             string
	Status         string // requires_payment_method, …, succeeded, canceled
	Amount         int64
	AmountReceived int64
	// Currency is Stripe's lower-case ISO code; "" answers "usd".
	Currency string
	// NextAction, when set, is the type of the next_action the
	// PaymentIntent answers with (use_stripe_sdk, redirect_to_url: a
	// buyer in 3-D Secure).
	NextAction string
	Metadata   map[string]string
}

// Server is a running fake Stripe. Faults injects faults by "METHOD
// path" ("POST /v1/refunds"): a 500 api_error answered, or a request
// applied and its answer withheld.
type Server struct {
	URL    string
	Key    string
	Faults gatewaytest.Faults

	srv  *httptest.Server
	reqs atomic.Int64

	mu       sync.Mutex
	pis      map[string]*PaymentIntent
	sessions map[string]*session
	calls    []string
	fail     map[string]int // "METHOD path" → status to answer, once per entry in failures
	hang     map[string]bool
	outage   Outage
	refunds  []*Refund
	idem     map[string]idemResult // by Idempotency-Key
	keys     []string              // the Idempotency-Key of each POST
	// RefundStatus, when set, is the status new refunds are created in
	// (pending, failed); they are succeeded otherwise.
	RefundStatus string
	// BeforeCancel, when set, runs before a cancel or expire is applied
	// (under no lock): a payment landing between lapse's retrieve and its
	// cancel.
	BeforeCancel func(piID string)
}

// Refund is a refund the server made.
type Refund struct {
	ID, PaymentIntent, Status, Currency string
	Amount                              int64
	Metadata                            map[string]string
}

// idemResult is the saved answer to a POST with an Idempotency-Key.
type idemResult struct {
	request string // METHOD path and the form, encoded
	status  int
	body    any
}

type session struct {
	id, pi, status string
}

// New starts a server that accepts the API key key; it stops when the test
// ends.
func New(t testing.TB, key string) *Server {
	s := &Server{Key: key, pis: map[string]*PaymentIntent{}, sessions: map[string]*session{},
		fail: map[string]int{}, hang: map[string]bool{}, idem: map[string]idemResult{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.record))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.Faults.Release) // runs first: held answers end
	return s
}

// Set creates or replaces a PaymentIntent.
func (s *Server) Set(pi PaymentIntent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi.Metadata == nil {
		pi.Metadata = map[string]string{}
	}
	s.pis[pi.ID] = &pi
}

// SetStatus changes a PaymentIntent's status (succeeded: amount_received =
// amount).
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.pis[id]
	pi.Status = status
	if status != "requires_action" && status != "requires_confirmation" {
		pi.NextAction = ""
	}
	if status == "succeeded" {
		pi.AmountReceived = pi.Amount
	}
}

// Status is a PaymentIntent's status ("" if unknown).
func (s *Server) Status(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi := s.pis[id]; pi != nil {
		return pi.Status
	}
	return ""
}

// AddSession adds an open Checkout Session for the PaymentIntent.
func (s *Server) AddSession(id, piID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[id] = &session{id: id, pi: piID, status: "open"}
}

// SessionStatus is a Checkout Session's status.
func (s *Server) SessionStatus(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id].status
}

// Forget deletes a PaymentIntent: Stripe then answers 404 resource_missing
// about it.
func (s *Server) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pis, id)
}

// ExpireIdempotencyKeys forgets every Idempotency-Key seen, as Stripe does
// 24 hours after a key's first use.
func (s *Server) ExpireIdempotencyKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.idem)
}

// IdempotencyKeys lists the Idempotency-Key of each POST served ("" for
// none), in order.
func (s *Server) IdempotencyKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// Refunds returns the refunds made of a PaymentIntent, in order.
func (s *Server) Refunds(piID string) []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Refund
	for _, rf := range s.refunds {
		if rf.PaymentIntent == piID {
			out = append(out, *rf)
		}
	}
	return out
}

// Outage is how every request fails while it is set (SetOutage).
type Outage int

// Outages.
const (
	// OutageNone: requests are answered as Stripe does.
	OutageNone Outage = iota
	// OutageServerError: 500 with a Stripe api_error.
	OutageServerError
	// OutageHang: no answer until the client gives up.
	OutageHang
	// OutageGarbage: 200 with an HTML page, as a proxy in the way might.
	OutageGarbage
)

// SetOutage makes every request fail the way o says, from now on;
// OutageNone ends it.
func (s *Server) SetOutage(o Outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = o
}

// Fail makes every request "METHOD path" (path without the query) answer
// status with a Stripe api_error.
func (s *Server) Fail(methodPath string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[methodPath] = status
}

// Hang makes every request "METHOD path" wait until the client gives up.
func (s *Server) Hang(methodPath string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang[methodPath] = true
}

// Calls lists the requests served, as "METHOD path".
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Count is how many requests "METHOD path" were served.
func (s *Server) Count(methodPath string) int {
	n := 0
	for _, c := range s.Calls() {
		if c == methodPath {
			n++
		}
	}
	return n
}

// record counts a request, then serves it under the faults set.
func (s *Server) record(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Request-Id", fmt.Sprintf("req_test%d", s.reqs.Add(1)))
	call := r.Method + " " + r.URL.Path
	s.mu.Lock()
	s.calls = append(s.calls, call)
	if r.Method == http.MethodPost {
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	}
	s.mu.Unlock()
	s.Faults.Serve(w, r, call, http.HandlerFunc(s.serve), func(w http.ResponseWriter) {
		stripeError(w, http.StatusInternalServerError, "api_error", "", "An unknown error occurred")
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	call := r.Method + " " + r.URL.Path
	s.mu.Lock()
	failWith, hang, outage := s.fail[call], s.hang[call], s.outage
	s.mu.Unlock()
	switch {
	case hang || outage == OutageHang:
		// The body read, the server notices the client leaving (a POST's
		// unread body would keep the connection, and Close, waiting).
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	case outage == OutageServerError:
		stripeError(w, http.StatusInternalServerError, "api_error", "", "An unknown error occurred")
		return
	case outage == OutageGarbage:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+s.Key {
		// Worse than Stripe, which masks it: the key sent comes back, so
		// that a test sees lapse cut it out of its errors.
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "", fmt.Sprintf("Invalid API Key provided: %s", strings.TrimPrefix(got, "Bearer ")))
		return
	}
	if r.Header.Get("Stripe-Version") == "" {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "no Stripe-Version header")
		return
	}
	if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "Request's Content-Type must be application/x-www-form-urlencoded")
		return
	}
	if failWith != 0 {
		stripeError(w, failWith, "api_error", "", "An unknown error occurred")
		return
	}
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "malformed form: "+err.Error())
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		s.idempotent(w, r, s.refund)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		s.listRefunds(w, r)
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "v1" && parts[1] == "payment_intents":
		s.retrieve(w, parts[2])
	case r.Method == http.MethodPost && len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "cancel":
		s.cancel(w, parts[2])
	case r.Method == http.MethodGet && len(parts) == 3 && parts[1] == "checkout" && parts[2] == "sessions":
		s.list(w, r)
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "checkout" && parts[2] == "sessions" && parts[4] == "expire":
		s.expire(w, parts[3])
	default:
		stripeError(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL ("+call+")")
	}
}

func (s *Server) retrieve(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.pis[id]
	if pi == nil {
		stripeErrorParam(w, http.StatusNotFound, "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", id), "intent")
		return
	}
	writeJSON(w, http.StatusOK, piJSON(pi))
}

func (s *Server) cancel(w http.ResponseWriter, id string) {
	if f := s.BeforeCancel; f != nil {
		f(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.pis[id]
	if pi == nil {
		stripeErrorParam(w, http.StatusNotFound, "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", id), "intent")
		return
	}
	for _, ss := range s.sessions {
		if ss.pi == id && ss.status == "open" {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "",
				"This PaymentIntent is managed by an open Checkout Session and cannot be canceled directly. Expire the Checkout Session instead.")
			return
		}
	}
	switch pi.Status {
	case "requires_payment_method", "requires_capture", "requires_confirmation", "requires_action":
		pi.Status = "canceled"
		writeJSON(w, http.StatusOK, piJSON(pi))
	default:
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state",
			fmt.Sprintf("You cannot cancel this PaymentIntent because it has a status of %s. Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, processing.", pi.Status))
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, status := r.Form.Get("payment_intent"), r.Form.Get("status")
	data := []any{}
	for _, ss := range s.sessions {
		if (pi == "" || ss.pi == pi) && (status == "" || ss.status == status) {
			data = append(data, sessionJSON(ss))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/checkout/sessions", "has_more": false, "data": data})
}

func (s *Server) expire(w http.ResponseWriter, id string) {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss != nil {
		if f := s.BeforeCancel; f != nil {
			f(ss.pi)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss == nil {
		stripeErrorParam(w, http.StatusNotFound, "resource_missing", fmt.Sprintf("No such checkout.session: '%s'", id), "session")
		return
	}
	if pi := s.pis[ss.pi]; ss.status == "open" && pi != nil && pi.Status == "succeeded" {
		ss.status = "complete"
	}
	if ss.status != "open" {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "",
			fmt.Sprintf("Only Checkout Sessions with a status in [\"open\"] can be expired. This Checkout Session has a status of %q.", ss.status))
		return
	}
	ss.status = "expired"
	if pi := s.pis[ss.pi]; pi != nil {
		pi.Status = "canceled"
	}
	writeJSON(w, http.StatusOK, sessionJSON(ss))
}

// idempotent answers a POST through its Idempotency-Key: the saved answer
// of a key seen before with the same parameters, else op's (called with
// s.mu held, so that two requests with one key make one refund), saved.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, op func(r *http.Request) (int, any)) {
	key := r.Header.Get("Idempotency-Key")
	request := r.Method + " " + r.URL.Path + "?" + r.PostForm.Encode()
	s.mu.Lock()
	defer s.mu.Unlock()
	if saved, ok := s.idem[key]; ok && key != "" {
		if saved.request != request {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"type": "idempotency_error",
				"message": "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '" + key + "' if you meant to execute a different request."}})
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, saved.status, saved.body)
		return
	}
	status, body := op(r)
	if key != "" {
		s.idem[key] = idemResult{request: request, status: status, body: body}
	}
	writeJSON(w, status, body)
}

// refund is POST /v1/refunds: payment_intent, amount (default: what is
// left), metadata[…]; call with s.mu held.
func (s *Server) refund(r *http.Request) (int, any) {
	id := r.PostForm.Get("payment_intent")
	if id == "" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_missing", "Must provide one of charge or payment_intent.", "payment_intent")
	}
	pi := s.pis[id]
	if pi == nil {
		return http.StatusBadRequest, errorBody("invalid_request_error", "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", id), "payment_intent")
	}
	if pi.Status != "succeeded" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", fmt.Sprintf("This PaymentIntent (%s) does not have a successful charge to refund.", id), "")
	}
	left := pi.AmountReceived
	for _, rf := range s.refunds {
		if rf.PaymentIntent == id && rf.Status != "failed" && rf.Status != "canceled" {
			left -= rf.Amount
		}
	}
	if left <= 0 {
		return http.StatusBadRequest, errorBody("invalid_request_error", "charge_already_refunded", fmt.Sprintf("Charge ch_%s has already been refunded.", id), "")
	}
	amount := left
	if a := r.PostForm.Get("amount"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n <= 0 {
			return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_invalid_integer", "Invalid positive integer", "amount")
		}
		if n > left {
			return http.StatusBadRequest, errorBody("invalid_request_error", "amount_too_large", fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", n, left), "amount")
		}
		amount = n
	}
	md := map[string]string{}
	for k, vs := range r.PostForm {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") {
			md[strings.TrimSuffix(name, "]")] = vs[0]
		}
	}
	status := s.RefundStatus
	if status == "" {
		status = "succeeded"
	}
	currency := pi.Currency
	if currency == "" {
		currency = "usd"
	}
	rf := &Refund{ID: fmt.Sprintf("re_test%d", len(s.refunds)+1), PaymentIntent: id, Status: status, Currency: currency, Amount: amount, Metadata: md}
	s.refunds = append(s.refunds, rf)
	return http.StatusOK, refundJSON(rf)
}

// listRefunds is GET /v1/refunds?payment_intent=…, newest first.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := r.Form.Get("payment_intent")
	data := []any{}
	for i := len(s.refunds) - 1; i >= 0; i-- {
		if rf := s.refunds[i]; pi == "" || rf.PaymentIntent == pi {
			data = append(data, refundJSON(rf))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/refunds", "has_more": false, "data": data})
}

func refundJSON(rf *Refund) map[string]any {
	return map[string]any{"id": rf.ID, "object": "refund", "amount": rf.Amount, "currency": rf.Currency, "status": rf.Status,
		"payment_intent": rf.PaymentIntent, "charge": "ch_" + rf.PaymentIntent, "metadata": rf.Metadata, "reason": nil}
}

func errorBody(typ, code, msg, param string) map[string]any {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	return map[string]any{"error": e}
}

func piJSON(pi *PaymentIntent) map[string]any {
	currency := pi.Currency
	if currency == "" {
		currency = "usd"
	}
	var next any
	if pi.NextAction != "" {
		next = map[string]any{"type": pi.NextAction}
	}
	return map[string]any{"id": pi.ID, "object": "payment_intent", "amount": pi.Amount, "amount_received": pi.AmountReceived,
		"currency": currency, "status": pi.Status, "metadata": pi.Metadata, "livemode": false,
		"client_secret": pi.ID + "_secret_test", "next_action": next}
}

func sessionJSON(ss *session) map[string]any {
	return map[string]any{"id": ss.id, "object": "checkout.session", "status": ss.status, "payment_intent": ss.pi,
		"mode": "payment", "livemode": false}
}

func stripeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}

func stripeErrorParam(w http.ResponseWriter, status int, code, msg, param string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "code": code,
		"message": msg, "param": param, "doc_url": "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(code, "_", "-")}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
