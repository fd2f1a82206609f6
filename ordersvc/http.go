package ordersvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/internal/endpoint"
	"github.com/lapsehq/lapse/outbox/webhook"
)

// HTTPConfig configures an HTTP Client.
type HTTPConfig struct {
	// URL is the order service's receiver (--order-service): https://, or
	// http:// to a loopback address (or any, with Insecure).
	URL string
	// Secrets sign every command (whsec_…; several during a rotation: the
	// receiver verifies with any one of them).
	Secrets []string
	// Timeout bounds one command's round trip. Defaults to 10 s.
	Timeout  time.Duration
	Insecure bool
	// HTTPClient, when set, sends the requests (tests); redirects are never
	// followed either way.
	HTTPClient *http.Client
}

// HTTP sends commands as signed POSTs: Standard Webhooks' webhook-id (the
// command id), webhook-timestamp and webhook-signature, with lapse-attempt
// and lapse-deadline, the command as the JSON body, the answer as the JSON
// body of a 200.
type HTTP struct {
	url, display string
	signer       *webhook.Signer
	client       *http.Client
	timeout      time.Duration
}

// maxAnswer bounds what is read of an answer: it is one small object.
const maxAnswer = 64 << 10

// NewHTTP checks cfg and returns the client.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, display, err := endpoint.Parse(cfg.URL, "--order-service URL", cfg.Insecure, "--order-service-insecure")
	if err != nil {
		return nil, err
	}
	signer, err := webhook.NewSigner(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("--order-service-secret: %w", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	c := cfg.HTTPClient
	if c == nil {
		c = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	nc := *c
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &HTTP{url: u.String(), display: display, signer: signer, client: &nc, timeout: cfg.Timeout}, nil
}

// Send implements Client.
func (h *HTTP) Send(ctx context.Context, d Delivery) (Answer, error) {
	body, err := json.Marshal(d.Command)
	if err != nil {
		return Answer{}, &Refusal{Err: fmt.Errorf("encode command %s: %w", d.ID, err)}
	}
	now := time.Now()
	sig, err := h.signer.Sign(d.ID, now, body)
	if err != nil {
		return Answer{}, fmt.Errorf("sign command %s: %w", d.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("order service %s: build request: %w", h.display, endpoint.Cause(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lapse")
	req.Header.Set(standardwebhooks.HeaderWebhookID, d.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	req.Header.Set(HeaderDeadline, d.Command.Deadline)
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Answer{}, fmt.Errorf("order service %s: no answer within %s", h.display, h.timeout)
		}
		return Answer{}, fmt.Errorf("order service %s: %w", h.display, endpoint.Cause(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return Answer{}, fmt.Errorf("order service %s: read the answer: %w", h.display, endpoint.Cause(err))
	}
	if resp.StatusCode != http.StatusOK {
		serr := &StatusError{URL: h.display, Code: resp.StatusCode,
			RetryAfter: endpoint.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), time.Hour)}
		if !endpoint.Retryable(resp.StatusCode) {
			return Answer{}, &Refusal{Err: serr}
		}
		return Answer{}, serr
	}
	return ReadAnswer(raw, d.ID)
}

// ReadAnswer decodes an answer's body to the command id and checks it: an
// unreadable answer, an unknown result or an answer to another command is
// an error (the command goes again), never a guess.
func ReadAnswer(raw []byte, id string) (Answer, error) {
	if len(raw) > maxAnswer {
		return Answer{}, fmt.Errorf("answer to %s: larger than %d KiB", id, maxAnswer>>10)
	}
	var a Answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return Answer{}, fmt.Errorf("answer to %s: not JSON with a result", id)
	}
	switch {
	case !a.Result.Valid():
		return Answer{}, fmt.Errorf("answer to %s: result %q, want one of cancelled, already_cancelled, already_paid, paying, not_found", id, a.Result)
	case a.CommandID != "" && a.CommandID != id:
		return Answer{}, fmt.Errorf("answer to %s names command %q", id, a.CommandID)
	case a.RetryAfterSeconds < 0:
		return Answer{}, fmt.Errorf("answer to %s: retry_after_seconds %d", id, a.RetryAfterSeconds)
	}
	return a, nil
}

// ErrNoStatusRoute is the error of Status when the order service answers
// 404 or 405 to a status request: its receiver has no status route (the
// Receiver without ReceiverConfig.Status, a receiver that takes POSTs only),
// or the URL is not the receiver's.
var ErrNoStatusRoute = errors.New("ordersvc: the order service has no status route")

// Status asks the order service where an order stands (lapse reconcile):
// the signed GET <URL>?order_id=orderID of NewStatusRequest, whose answer
// is a StatusAnswer. An error says why no status was had — a refused
// signature (401), no status route (ErrNoStatusRoute), an answer outside
// the contract, no answer within the timeout — and is never a guess.
func (h *HTTP) Status(ctx context.Context, orderID string) (OrderStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := NewStatusRequest(ctx, h.url, h.signer, orderID, time.Now())
	if err != nil {
		return "", err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("status of order %s: order service %s: no answer within %s", orderID, h.display, h.timeout)
		}
		return "", fmt.Errorf("status of order %s: order service %s: %w", orderID, h.display, endpoint.Cause(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return "", fmt.Errorf("status of order %s: order service %s: read the answer: %w", orderID, h.display, endpoint.Cause(err))
	}
	if resp.StatusCode != http.StatusOK {
		serr := &StatusError{URL: h.display, Code: resp.StatusCode}
		code := errorCode(raw)
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed:
			return "", fmt.Errorf("status of order %s: %w: %w to GET ?order_id= (a receiver answers status requests with ReceiverConfig.Status, "+
				"or the reference receivers' GET route: docs/order-service.md)", orderID, ErrNoStatusRoute, serr)
		case http.StatusUnauthorized, http.StatusForbidden:
			return "", fmt.Errorf("status of order %s: %w%s: the order service does not take the request's signature (check the secret)", orderID, serr, code)
		}
		return "", fmt.Errorf("status of order %s: %w%s", orderID, serr, code)
	}
	return readStatus(raw, orderID)
}

// readStatus decodes a status answer to the request about orderID.
func readStatus(raw []byte, orderID string) (OrderStatus, error) {
	if len(raw) > maxAnswer {
		return "", fmt.Errorf("status of order %s: the answer is larger than %d KiB", orderID, maxAnswer>>10)
	}
	var a StatusAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("status of order %s: the answer is not JSON with a status", orderID)
	}
	switch {
	case !a.Status.Valid():
		return "", fmt.Errorf("status of order %s: status %q, want one of pending, paying, paid, cancelled, not_found", orderID, a.Status)
	case a.OrderID != "" && a.OrderID != orderID:
		return "", fmt.Errorf("status of order %s: the answer names order %q", orderID, a.OrderID)
	}
	return a.Status, nil
}

// errorCode is " (code)" for an error body of the receivers' shape
// ({"error": {"code": …}}) whose code is a plain word, "" otherwise: the
// rest of a body is not quoted (it may echo anything).
func errorCode(raw []byte) string {
	var b errorBody
	if json.Unmarshal(raw, &b) != nil || b.Error.Code == "" || len(b.Error.Code) > 64 ||
		strings.ContainsFunc(b.Error.Code, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' }) {
		return ""
	}
	return " (" + b.Error.Code + ")"
}

// Close implements Client.
func (h *HTTP) Close() error {
	h.client.CloseIdleConnections()
	return nil
}

// StatusError is an answer other than 200.
type StatusError struct {
	URL  string // without query or user info
	Code int
	// RetryAfter is the answer's Retry-After, zero when none.
	RetryAfter time.Duration
}

// Error names the status; the body is not quoted (it may echo anything).
func (e *StatusError) Error() string {
	return fmt.Sprintf("order service %s answered %d %s", e.URL, e.Code, http.StatusText(e.Code))
}
