package payment

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/lapsehq/lapse/redact"
)

// Errors of the HTTP gateway client. Both mean "unknown": the caller retries
// later and never cancels on them.
var (
	// ErrCircuitOpen is returned, wrapped, without any request being sent
	// while the circuit breaker is open (the gateway failed too many times in
	// a row) or while its one half-open probe is in flight.
	ErrCircuitOpen = errors.New("payment: gateway circuit breaker is open")
	// ErrBadResponse is returned, wrapped, when the gateway answers something
	// the protocol does not allow: an unexpected status code, a malformed
	// body, an unknown state, another order's record.
	ErrBadResponse = errors.New("payment: unexpected gateway response")
)

// maxResponseBytes bounds what is read of a gateway's answer.
const maxResponseBytes = 1 << 20

// HTTPConfig configures an HTTPGateway. Zero fields take the defaults named below.
type HTTPConfig struct {
	// Timeout bounds one HTTP request (one attempt), from dialling to the
	// last byte of the body. Defaults to 2 s.
	Timeout time.Duration
	// Retries is how many times a request is sent again after a 5xx answer, a
	// timeout or a connection error — never after a 4xx, a malformed answer
	// or a TLS certificate error, and never while the breaker is open. Query and Close are both
	// idempotent at the gateway, so a retry is safe. Defaults to 2 (three
	// attempts in all); negative disables retries.
	Retries int
	// BackoffBase is the wait before the first retry; it doubles for each
	// further retry, and each wait is drawn uniformly from [d/2, d) (jitter,
	// so many lapse instances do not retry in step). Defaults to 100 ms.
	BackoffBase time.Duration
	// BackoffMax caps one wait between retries. Defaults to 2 s.
	BackoffMax time.Duration
	// BreakerFailures is how many failed attempts in a row (5xx, timeout,
	// connection error, malformed 2xx body) open the circuit breaker; while it
	// is open every call fails at once with ErrCircuitOpen, so a gateway that
	// is down never stalls the caller. A 4xx answer counts as a success (the
	// gateway is up), and a call abandoned by the caller's context counts as
	// nothing. Defaults to 5; negative disables the breaker.
	BreakerFailures int
	// BreakerOpenFor is how long the breaker stays open before it half-opens:
	// one probe request is let through; its success closes the breaker, its
	// failure opens it again for as long. Defaults to 10 s.
	BreakerOpenFor time.Duration
	// BearerToken, when set, is sent as "Authorization: Bearer <token>".
	// Defaults to none.
	BearerToken string
	// Header is added to every request (an API key header, a tenant id).
	// Defaults to none.
	Header http.Header
	// HTTPClient sends the requests; pass one for TLS settings, a proxy or
	// instrumentation. Its own Timeout, if any, applies on top of Timeout.
	// Defaults to a client with a transport of its own (the settings of
	// http.DefaultTransport) that does not follow redirects: a 3xx is an error.
	HTTPClient *http.Client
	// Logger receives the breaker's state changes. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *HTTPConfig) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 2
	} else if c.Retries < 0 {
		c.Retries = 0
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 2 * time.Second
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = 5
	}
	if c.BreakerOpenFor == 0 {
		c.BreakerOpenFor = 10 * time.Second
	}
	if c.HTTPClient == nil {
		c.HTTPClient = NewHTTPClient()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *HTTPConfig) validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("payment: HTTPConfig.Timeout %s: want a positive duration", c.Timeout)
	case c.BackoffBase < 0:
		return fmt.Errorf("payment: HTTPConfig.BackoffBase %s: want a positive duration", c.BackoffBase)
	case c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("payment: HTTPConfig.BackoffMax %s: want at least BackoffBase (%s)", c.BackoffMax, c.BackoffBase)
	case c.BreakerOpenFor < 0:
		return fmt.Errorf("payment: HTTPConfig.BreakerOpenFor %s: want a positive duration", c.BreakerOpenFor)
	}
	return nil
}

// HTTPGateway is a Gateway speaking lapse's generic JSON protocol over HTTP:
//
//	GET  {base}/payments/{order_id}
//	  200 {"order_id", "status": "PAID"|"NOT_PAID"|"PENDING"|"CLOSED", "amount_cents", "payment_id",
//	       "currency" (optional, ISO 4217: the currency of amount_cents; absent, the order's)}
//	  404 {"order_id": <the same id>, ...}  the gateway never saw the order: NOT_PAID
//	POST {base}/payments/{order_id}/close
//	  200 {"status": "CLOSED"}  closed, now or before (also for an order the gateway never
//	                            saw: it must then refuse any later payment of it)
//	  409 {"status": "PAID"}    too late: ErrAlreadyPaid
//
// Both take ?payment_id=… to name one payment attempt (PerAttempt): the
// answer is then about that attempt's trade only.
//
// Anything else — a 5xx, a timeout, a malformed body, an unknown status, a
// PAID record without payment_id or amount_cents, a record of another order,
// a 404 without the protocol's body (a wrong base URL or a proxy's page must
// never read as "not paid") — is an error, so the caller treats the state as
// unknown. Order ids are path-escaped. It is safe for concurrent use.
type HTTPGateway struct {
	base    string // without a trailing slash
	cfg     HTTPConfig
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}] // nil when disabled
}

var _ Gateway = (*HTTPGateway)(nil)

// NewHTTPGateway returns a client of the gateway at baseURL (http or https,
// optionally with a path prefix: https://pay.example.com/lapse).
func NewHTTPGateway(baseURL string, cfg HTTPConfig) (*HTTPGateway, error) {
	shown := redact.URL(baseURL) // the URL may hold a password: never show it whole
	u, err := url.Parse(baseURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL
		}
		return nil, fmt.Errorf("payment: gateway URL %q: %w", shown, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("payment: gateway URL %q: want http(s)://host[:port][/prefix]", shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("payment: gateway URL %q: no query or fragment allowed", shown)
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &HTTPGateway{base: strings.TrimRight(u.String(), "/"), cfg: cfg}
	if cfg.BreakerFailures > 0 {
		n := uint32(cfg.BreakerFailures)
		log, base := cfg.Logger, redact.URL(g.base)
		g.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:        "payment gateway " + base,
			MaxRequests: 1,
			Timeout:     cfg.BreakerOpenFor,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n },
			IsExcluded:  func(err error) bool { return errors.Is(err, errAbandoned) },
			OnStateChange: func(_ string, from, to gobreaker.State) {
				log.Warn("payment gateway circuit breaker", "gateway", base, "from", from.String(), "to", to.String())
			},
		})
	}
	return g, nil
}

// BreakerState reports the circuit breaker's state: "closed", "half-open",
// "open", or "disabled" (for a metric or a readiness page).
func (g *HTTPGateway) BreakerState() string {
	if g.breaker == nil {
		return "disabled"
	}
	return g.breaker.State().String()
}

// queryBody is the protocol's answer to a query (and the body of a 404).
type queryBody struct {
	OrderID     *string `json:"order_id"`
	Status      *string `json:"status"`
	AmountCents *int64  `json:"amount_cents"`
	PaymentID   string  `json:"payment_id"`
	Currency    string  `json:"currency"`
}

// closeBody is the protocol's answer to a close.
type closeBody struct {
	Status string `json:"status"`
}

// Query implements Gateway.
func (g *HTTPGateway) Query(ctx context.Context, orderID string) (Status, error) {
	return g.query(ctx, orderID, "")
}

// PerAttempt returns g asking about, and closing, each payment attempt
// (?payment_id=…): for a gateway behind the protocol that keeps a trade per
// attempt. g itself speaks of the order as a whole — one trade per order,
// which every attempt pays into — and is not an AttemptGateway.
func (g *HTTPGateway) PerAttempt() AttemptGateway { return perAttempt{g} }

// perAttempt is an HTTPGateway that also speaks per attempt.
type perAttempt struct{ *HTTPGateway }

// QueryAttempt implements AttemptGateway: GET {base}/payments/{order_id}?payment_id=….
func (g perAttempt) QueryAttempt(ctx context.Context, orderID, paymentID string) (Status, error) {
	if paymentID == "" {
		return Status{}, errors.New("payment: query: empty payment id")
	}
	return g.query(ctx, orderID, paymentID)
}

// attemptURL is an order's URL under the base, with ?payment_id= when given.
func (g *HTTPGateway) attemptURL(orderID, suffix, paymentID string) string {
	u := g.base + "/payments/" + url.PathEscape(orderID) + suffix
	if paymentID != "" {
		u += "?payment_id=" + url.QueryEscape(paymentID)
	}
	return u
}

func (g *HTTPGateway) query(ctx context.Context, orderID, paymentID string) (Status, error) {
	if orderID == "" {
		return Status{}, errors.New("payment: query: empty order id")
	}
	var st Status
	err := g.do(ctx, request{method: http.MethodGet, url: g.attemptURL(orderID, "", paymentID)}, func(code int, body []byte) (verdict, error) {
		switch {
		case code == http.StatusOK:
			var err error
			st, err = parseQuery(orderID, body)
			if err != nil {
				return broken, err
			}
			return answered, nil
		case code == http.StatusNotFound:
			var b queryBody
			if json.Unmarshal(body, &b) != nil || b.OrderID == nil || *b.OrderID != orderID ||
				(b.Status != nil && *b.Status != string(StateNotPaid)) {
				return answered, fmt.Errorf("%w: 404 without the protocol's body naming the order (is the gateway URL right?): %s", ErrBadResponse, Snippet(body))
			}
			st = Status{State: StateNotPaid}
			return answered, nil
		case code >= 500:
			return transient, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
		}
		return answered, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
	})
	if err != nil {
		if paymentID != "" {
			return Status{}, fmt.Errorf("payment: query order %q payment %q: %w", orderID, paymentID, err)
		}
		return Status{}, fmt.Errorf("payment: query order %q: %w", orderID, err)
	}
	return st, nil
}

func parseQuery(orderID string, body []byte) (Status, error) {
	var b queryBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Status{}, fmt.Errorf("%w: malformed JSON: %v: %s", ErrBadResponse, err, Snippet(body))
	}
	if b.OrderID == nil || *b.OrderID != orderID {
		got := "none"
		if b.OrderID != nil {
			got = fmt.Sprintf("%q", *b.OrderID)
		}
		return Status{}, fmt.Errorf("%w: answer is about order %s", ErrBadResponse, got)
	}
	if b.Status == nil {
		return Status{}, fmt.Errorf("%w: no status: %s", ErrBadResponse, Snippet(body))
	}
	st := Status{State: State(*b.Status), PaymentID: b.PaymentID}
	if b.AmountCents != nil {
		st.AmountCents = *b.AmountCents
	}
	if b.Currency != "" {
		if len(b.Currency) != 3 || strings.IndexFunc(b.Currency, func(r rune) bool { return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') }) >= 0 {
			return Status{}, fmt.Errorf("%w: currency %q: want an ISO 4217 code", ErrBadResponse, b.Currency)
		}
		st.Currency = strings.ToUpper(b.Currency)
	}
	switch st.State {
	case StatePaid:
		if b.PaymentID == "" || b.AmountCents == nil || *b.AmountCents < 0 {
			return Status{}, fmt.Errorf("%w: PAID without payment_id or a valid amount_cents: %s", ErrBadResponse, Snippet(body))
		}
	case StateNotPaid, StatePending, StateClosed:
	default:
		return Status{}, fmt.Errorf("%w: unknown status %q", ErrBadResponse, *b.Status)
	}
	return st, nil
}

// Close implements Gateway.
func (g *HTTPGateway) Close(ctx context.Context, orderID string) error {
	return g.close(ctx, orderID, "")
}

// CloseAttempt implements AttemptGateway: POST {base}/payments/{order_id}/close?payment_id=….
func (g perAttempt) CloseAttempt(ctx context.Context, orderID, paymentID string) error {
	if paymentID == "" {
		return errors.New("payment: close: empty payment id")
	}
	return g.close(ctx, orderID, paymentID)
}

func (g *HTTPGateway) close(ctx context.Context, orderID, paymentID string) error {
	if orderID == "" {
		return errors.New("payment: close: empty order id")
	}
	err := g.do(ctx, request{method: http.MethodPost, url: g.attemptURL(orderID, "/close", paymentID)}, func(code int, body []byte) (verdict, error) {
		var b closeBody
		jsonErr := json.Unmarshal(body, &b)
		switch {
		case code == http.StatusOK:
			if jsonErr != nil || b.Status != string(StateClosed) {
				return broken, fmt.Errorf("%w: 200 without {\"status\":\"CLOSED\"}: %s", ErrBadResponse, Snippet(body))
			}
			return answered, nil
		case code == http.StatusConflict:
			if jsonErr == nil && b.Status == string(StatePaid) {
				return answered, ErrAlreadyPaid
			}
			return answered, fmt.Errorf("%w: 409 without {\"status\":\"PAID\"}: %s", ErrBadResponse, Snippet(body))
		case code >= 500:
			return transient, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
		}
		return answered, fmt.Errorf("%w: %d: %s", ErrBadResponse, code, Snippet(body))
	})
	if err != nil {
		if paymentID != "" {
			return fmt.Errorf("payment: close order %q payment %q: %w", orderID, paymentID, err)
		}
		return fmt.Errorf("payment: close order %q: %w", orderID, err)
	}
	return nil
}

var _ AttemptGateway = perAttempt{}

// verdict is what one attempt's outcome means for retries and the breaker.
type verdict int

const (
	answered  verdict = iota // the gateway answered (per the protocol, or with a 4xx): a breaker success, not retried
	transient                // 5xx, timeout, connection error: a breaker failure, retried
	broken                   // a malformed 2xx answer: a breaker failure, not retried
	abandoned                // the caller's context ended: not counted, not retried
	refused                  // the breaker is open: nothing was sent, not retried
)

// Markers handed to the breaker's done callback.
var (
	errFailed    = errors.New("gateway failure")
	errAbandoned = errors.New("call abandoned by the caller")
)

// request is one request of the protocol.
type request struct {
	method, url string
	body        []byte // JSON; nil for none
	key         string // sent as Idempotency-Key when set
}

// do sends one request with retries; interpret turns an answer into a verdict
// and the call's error.
func (g *HTTPGateway) do(ctx context.Context, rq request, interpret func(code int, body []byte) (verdict, error)) error {
	for attempt := 0; ; attempt++ {
		v, err := g.attempt(ctx, rq, interpret)
		if v != transient {
			return err
		}
		if attempt >= g.cfg.Retries {
			return fmt.Errorf("after %d attempts: %w", attempt+1, err)
		}
		t := time.NewTimer(g.backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gave up waiting to retry (%w) after %d attempts: %w", context.Cause(ctx), attempt+1, err)
		}
	}
}

// backoff is the wait before retry number attempt+1: BackoffBase doubled
// attempt times, capped at BackoffMax, drawn from [d/2, d).
func (g *HTTPGateway) backoff(attempt int) time.Duration {
	d := g.cfg.BackoffBase
	for range attempt {
		d *= 2
		if d >= g.cfg.BackoffMax {
			d = g.cfg.BackoffMax
			break
		}
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2)
}

func (g *HTTPGateway) attempt(ctx context.Context, rq request, interpret func(code int, body []byte) (verdict, error)) (verdict, error) {
	if err := ctx.Err(); err != nil {
		return abandoned, context.Cause(ctx)
	}
	done := func(error) {}
	if g.breaker != nil {
		var err error
		done, err = g.breaker.Allow()
		if err != nil {
			return refused, fmt.Errorf("%w (%v)", ErrCircuitOpen, err)
		}
	}
	v, err := g.send(ctx, rq, interpret)
	switch v {
	case transient, broken:
		done(errFailed)
	case abandoned:
		done(errAbandoned)
	default:
		done(nil)
	}
	return v, err
}

func (g *HTTPGateway) send(ctx context.Context, rq request, interpret func(code int, body []byte) (verdict, error)) (verdict, error) {
	actx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if rq.body != nil {
		rd = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(actx, rq.method, rq.url, rd)
	if err != nil {
		return answered, err
	}
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rq.key != "" {
		req.Header.Set("Idempotency-Key", rq.key)
	}
	for k, vs := range g.cfg.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if g.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+g.cfg.BearerToken)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return abandoned, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		var badCert *tls.CertificateVerificationError
		if errors.As(err, &badCert) {
			return broken, err // a certificate does not fix itself in 100 ms
		}
		return transient, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return abandoned, fmt.Errorf("%w: reading the answer: %w", context.Cause(ctx), err)
		}
		return transient, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	if len(body) > maxResponseBytes {
		return broken, fmt.Errorf("%w: answer over %d bytes", ErrBadResponse, maxResponseBytes)
	}
	return interpret(resp.StatusCode, body)
}
