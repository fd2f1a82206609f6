package ordersvc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/outbox/webhook"
)

// Defaults of the ReceiverConfig fields left zero.
const (
	// DefaultTolerance is how far a request's webhook-timestamp may be
	// from the receiver's clock, either way: Standard Webhooks' five
	// minutes. lapse stamps every attempt with the time it is sent, so a
	// retry days after the deadline is still fresh.
	DefaultTolerance = webhook.DefaultTolerance
	// DefaultMaxBodyBytes bounds a command's body: a command is a few
	// hundred bytes, a thousand payment attempts fit in it.
	DefaultMaxBodyBytes = 1 << 20
)

// QueryOrderID is the query parameter of a status request.
const QueryOrderID = "order_id"

// The receiver's error codes, in {"error": {"code", "message"}} bodies.
// They are stable: an operator's alert may match them.
const (
	// 401: the request is not lapse's (or not fresh). lapse parks the
	// command DEAD: the secrets or a clock need fixing, then a retry.
	CodeMissingSignature = "missing_signature"  // a webhook-* header is absent
	CodeInvalidSignature = "invalid_signature"  // no signature matches a secret
	CodeStaleTimestamp   = "stale_timestamp"    // webhook-timestamp outside the tolerance
	CodeStatusIDMismatch = "status_id_mismatch" // a status request's webhook-id names another order
	// 400 and 413: the command cannot be read; lapse parks it DEAD.
	CodeInvalidJSON    = "invalid_json"
	CodeInvalidCommand = "invalid_command" // Command.Validate refused it (type, schema_version, …)
	CodeInvalidOrderID = "invalid_order_id"
	CodeBodyTooLarge   = "body_too_large"
	// 503: Apply, Status or the Deduper failed; lapse retries.
	CodeUnavailable = "unavailable"
	// 500: Apply or Status answered something outside the contract; lapse
	// retries (the order service's bug may be fixed meanwhile).
	CodeInvalidAnswer = "invalid_answer"
	// 404 and 405: no status route (ReceiverConfig.Status is nil), or a
	// method other than POST and GET.
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
)

// OrderStatus is where an order stands in the order service, as a status
// request answers it (and as lapse reconcile compares it with its own).
type OrderStatus string

// The five statuses of a StatusAnswer.
const (
	StatusPending   OrderStatus = "pending"   // awaiting payment: a command would cancel it
	StatusPaying    OrderStatus = "paying"    // a payment is in flight
	StatusPaid      OrderStatus = "paid"      // paid: never cancelled
	StatusCancelled OrderStatus = "cancelled" // cancelled, by lapse's command or otherwise
	StatusNotFound  OrderStatus = "not_found" // the order service has no such order
)

// Valid reports whether s is one of the five statuses.
func (s OrderStatus) Valid() bool {
	switch s {
	case StatusPending, StatusPaying, StatusPaid, StatusCancelled, StatusNotFound:
		return true
	}
	return false
}

// StatusAnswer is the body of a status request's 200.
type StatusAnswer struct {
	OrderID string      `json:"order_id"`
	Status  OrderStatus `json:"status"`
}

// ApplyFunc applies one command in the order service: a conditional
// update (`UPDATE orders SET status='cancelled' WHERE id=? AND
// status='pending'`), then, when it changed no row, a read of what the
// order is, committed before it returns. It answers:
//
//   - Cancelled when its update cancelled the order;
//   - AlreadyCancelled when the order was cancelled before (by the buyer,
//     or by an earlier delivery of this very command whose answer lapse
//     did not hear: same final state, so lapse takes both alike);
//   - AlreadyPaid when the order is paid;
//   - Paying when a payment is in flight (or the order is pending again
//     after a failed payment, between the update and the read): lapse asks
//     again later, after RetryAfterSeconds when set;
//   - NotFound when there is no such order.
//
// An error means "I do not know": the Receiver answers 503 and lapse sends
// the command again, so ApplyFunc must be safe to run again with the same
// command, which the conditional update makes it. commandID is the
// command's webhook-id, for the log or an answers table.
type ApplyFunc func(ctx context.Context, c Command, commandID string) (Answer, error)

// StatusFunc tells where an order stands: one of the five OrderStatus
// values (StatusNotFound for no such order; an error only when it cannot
// tell).
type StatusFunc func(ctx context.Context, orderID string) (OrderStatus, error)

// Deduper remembers the final answer given to a command id, so that the
// Receiver answers a redelivered command with the answer of its first
// delivery without calling Apply again.
//
// A Deduper is an optimisation, not what makes a receiver correct: two
// deliveries of one command may arrive at once and both miss, and a Put
// may fail after Apply committed. A production receiver is correct without
// one — its conditional update answers a retry of an applied cancel
// AlreadyCancelled, which lapse treats as Cancelled (the same final state)
// — or, to answer exactly the same, stores the answer in a table of its
// own in the same transaction as the update (and needs no Deduper).
type Deduper interface {
	// Get returns the answer stored for commandID, and whether there is one.
	Get(ctx context.Context, commandID string) (Answer, bool, error)
	// Put stores the final answer to commandID. It is never called with
	// Paying, which is not final: the command is asked again and must be
	// applied again.
	Put(ctx context.Context, commandID string, a Answer) error
}

// ReceiverConfig is a Receiver's setup.
type ReceiverConfig struct {
	// Secrets verify the requests: the whsec_ secrets given to lapse's
	// --order-service-secret, current and previous during a rotation. A
	// request verifies when any one of its signatures matches any one
	// secret. Required.
	Secrets []string
	// Apply applies a verified, valid command. Required.
	Apply ApplyFunc
	// Status answers status requests (lapse reconcile). Nil means the
	// receiver has no status route: a GET is 404.
	Status StatusFunc
	// Dedupe, when set, answers a command id it has an answer for without
	// calling Apply. Optional; see Deduper for why a production receiver
	// needs none.
	Dedupe Deduper
	// Tolerance is how far webhook-timestamp may be from Now, either way.
	// Defaults to DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// MaxBodyBytes bounds a request's body; a larger one is 413. Defaults
	// to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Logger logs what is refused and what fails (never a secret nor a
	// body). Defaults to slog.Default().
	Logger *slog.Logger
	// Now tells the time the timestamps are checked against. Defaults to
	// time.Now; tests set it.
	Now func() time.Time
}

// Receiver is the order service's side of the contract, as an http.Handler
// a Go order service mounts at the URL it gives lapse (any path):
//
//	POST <URL>  a signed order.cancel_if_pending command → 200 {"result",
//	            "command_id", "retry_after_seconds"?}
//	GET  <URL>?order_id=ID  a signed status request → 200 StatusAnswer
//
// It verifies the Standard Webhooks signature against any of its secrets
// and the timestamp's freshness (401 otherwise, before reading the body as
// JSON), decodes the command (unknown fields allowed: a later lapse may add
// some; 400 when it is not JSON, 413 over MaxBodyBytes), refuses an invalid
// one (Command.Validate: 400), then answers from Dedupe or calls Apply
// (its error: 503, which lapse retries; an answer outside the contract:
// 500). The answer carries the command's id in command_id. Error bodies are
// {"error": {"code", "message"}} with the Code constants.
//
// A Receiver is safe for concurrent use.
type Receiver struct {
	verifier  *webhook.Signer
	apply     ApplyFunc
	status    StatusFunc
	dedupe    Deduper
	tolerance time.Duration
	maxBody   int64
	logger    *slog.Logger
	now       func() time.Time
}

var _ http.Handler = (*Receiver)(nil)

// NewReceiver validates cfg and returns its Receiver.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	verifier, err := webhook.NewSigner(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("ordersvc: receiver secrets: %w", err)
	}
	switch {
	case cfg.Apply == nil:
		return nil, errors.New("ordersvc: receiver without Apply")
	case cfg.Tolerance < 0:
		return nil, fmt.Errorf("ordersvc: receiver Tolerance %s: want a positive duration", cfg.Tolerance)
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("ordersvc: receiver MaxBodyBytes %d: want a positive size", cfg.MaxBodyBytes)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Receiver{
		verifier:  verifier,
		apply:     cfg.Apply,
		status:    cfg.Status,
		dedupe:    cfg.Dedupe,
		tolerance: cmp.Or(cfg.Tolerance, DefaultTolerance),
		maxBody:   cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		logger:    cmp.Or(cfg.Logger, slog.Default()),
		now:       now,
	}, nil
}

// ServeHTTP implements http.Handler.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		rc.command(w, r)
	case http.MethodGet:
		if rc.status == nil {
			writeError(w, http.StatusNotFound, CodeNotFound, "this receiver has no status route")
			return
		}
		rc.orderStatus(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "POST a command, or GET ?order_id= a status")
	}
}

// command serves POST: one order.cancel_if_pending.
func (rc *Receiver) command(w http.ResponseWriter, r *http.Request) {
	body, ok := rc.verified(w, r)
	if !ok {
		return
	}
	id := r.Header.Get(standardwebhooks.HeaderWebhookID)
	var c Command
	if err := json.Unmarshal(body, &c); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "the body is not a JSON command")
		return
	}
	if err := c.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, err.Error())
		return
	}
	ctx := r.Context()
	if rc.dedupe != nil {
		a, found, err := rc.dedupe.Get(ctx, id)
		if err != nil {
			rc.logger.ErrorContext(ctx, "ordersvc: dedupe lookup failed", "command_id", id, "order_id", c.OrderID, "err", err)
			writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the answers store failed; send the command again")
			return
		}
		if found {
			rc.answer(w, r, c, id, a)
			return
		}
	}
	a, err := rc.apply(ctx, c, id)
	if err != nil {
		rc.logger.ErrorContext(ctx, "ordersvc: apply failed", "command_id", id, "order_id", c.OrderID, "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the command could not be applied now; send it again")
		return
	}
	if rc.dedupe != nil && a.Result.Final() && checkAnswer(a) == nil {
		a.CommandID = id
		if err := rc.dedupe.Put(ctx, id, a); err != nil {
			// The answer stands: Apply committed it, and a retry that
			// misses the store gets the same final state from Apply.
			rc.logger.WarnContext(ctx, "ordersvc: dedupe store failed", "command_id", id, "order_id", c.OrderID, "err", err)
		}
	}
	rc.answer(w, r, c, id, a)
}

// answer writes a command's 200, or 500 when a is outside the contract.
func (rc *Receiver) answer(w http.ResponseWriter, r *http.Request, c Command, id string, a Answer) {
	if err := checkAnswer(a); err != nil {
		rc.logger.ErrorContext(r.Context(), "ordersvc: invalid answer", "command_id", id, "order_id", c.OrderID, "err", err)
		writeError(w, http.StatusInternalServerError, CodeInvalidAnswer, "the order service's answer is outside the contract")
		return
	}
	a.CommandID = id
	writeJSON(w, http.StatusOK, a)
}

// checkAnswer reports what makes a an answer lapse would not take.
func checkAnswer(a Answer) error {
	switch {
	case !a.Result.Valid():
		return fmt.Errorf("result %q is not one of the five", a.Result)
	case a.RetryAfterSeconds < 0:
		return fmt.Errorf("retry_after_seconds %d is negative", a.RetryAfterSeconds)
	case a.RetryAfterSeconds > 0 && a.Result != Paying:
		return fmt.Errorf("retry_after_seconds with result %q: only paying is asked again", a.Result)
	}
	return nil
}

// orderStatus serves GET ?order_id=: where the order stands.
func (rc *Receiver) orderStatus(w http.ResponseWriter, r *http.Request) {
	if _, ok := rc.verified(w, r); !ok {
		return
	}
	orderID := r.URL.Query().Get(QueryOrderID)
	if !validOrderID(orderID) {
		writeError(w, http.StatusBadRequest, CodeInvalidOrderID, "want ?order_id= with an order id")
		return
	}
	if !statusIDNames(r.Header.Get(standardwebhooks.HeaderWebhookID), orderID) {
		writeError(w, http.StatusUnauthorized, CodeStatusIDMismatch,
			"the webhook-id of a status request is status_<order_id>_<unix ms>, for the order_id asked about")
		return
	}
	ctx := r.Context()
	s, err := rc.status(ctx, orderID)
	if err != nil {
		rc.logger.ErrorContext(ctx, "ordersvc: status failed", "order_id", orderID, "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the order's status could not be read now")
		return
	}
	if !s.Valid() {
		rc.logger.ErrorContext(ctx, "ordersvc: invalid status", "order_id", orderID, "status", string(s))
		writeError(w, http.StatusInternalServerError, CodeInvalidAnswer, "the order service's status is outside the contract")
		return
	}
	writeJSON(w, http.StatusOK, StatusAnswer{OrderID: orderID, Status: s})
}

// verified reads the body (at most maxBody) and checks its signature,
// answering the request itself when either fails.
func (rc *Receiver) verified(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the body is over %d bytes", rc.maxBody))
			return nil, false
		}
		// The client went away or sent a broken body: it is not waiting
		// for an answer that decides anything.
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "the body could not be read")
		return nil, false
	}
	err = rc.verifier.Verify(r.Header, body, rc.now(), rc.tolerance)
	if err == nil {
		return body, true
	}
	code := CodeInvalidSignature
	switch {
	case errors.Is(err, webhook.ErrMissingHeaders):
		code = CodeMissingSignature
	case errors.Is(err, webhook.ErrStale):
		code = CodeStaleTimestamp
	}
	rc.logger.WarnContext(r.Context(), "ordersvc: request refused", "code", code, "webhook_id", logID(r.Header.Get(standardwebhooks.HeaderWebhookID)), "err", err)
	writeError(w, http.StatusUnauthorized, code, "the request is not signed with a current secret within the timestamp tolerance")
	return nil, false
}

// statusIDNames reports whether id is StatusID(orderID, t) for some t.
func statusIDNames(id, orderID string) bool {
	ms, ok := strings.CutPrefix(id, "status_"+orderID+"_")
	if !ok || ms == "" || len(ms) > 19 {
		return false
	}
	for _, c := range ms {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// maxOrderID bounds an order id in a status request: lapse's ids are at
// most 64 characters.
const maxOrderID = 256

func validOrderID(s string) bool {
	return s != "" && len(s) <= maxOrderID && !strings.ContainsFunc(s, unicode.IsControl)
}

// logID is a webhook-id fit for a log line: an unsigned request's id is
// anyone's text.
func logID(id string) string {
	if len(id) > 100 {
		id = id[:100]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, id)
}

// errorBody is every error's JSON.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

// MemoryDeduper is a Deduper in a map: for tests and examples only. It
// forgets everything when the process ends, is not shared between
// replicas, and grows without bound; a production receiver dedupes with its
// conditional update, or keeps answers in its own database (see Deduper).
type MemoryDeduper struct {
	mu      sync.Mutex
	answers map[string]Answer
}

// NewMemoryDeduper returns an empty MemoryDeduper.
func NewMemoryDeduper() *MemoryDeduper {
	return &MemoryDeduper{answers: map[string]Answer{}}
}

// Get implements Deduper.
func (d *MemoryDeduper) Get(_ context.Context, commandID string) (Answer, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.answers[commandID]
	return a, ok, nil
}

// Put implements Deduper.
func (d *MemoryDeduper) Put(_ context.Context, commandID string, a Answer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[commandID] = a
	return nil
}
