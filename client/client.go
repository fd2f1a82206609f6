// Package client is a typed Go client of lapse's HTTP API (httpapi/openapi.yaml).
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(token))
//	o, err := c.CreateOrder(ctx, client.CreateOrder{
//		Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1999, Timeout: 15 * time.Minute,
//	})
//	if errors.Is(err, client.ErrInsufficientStock) { … }
//
// The requests are built by code oapi-codegen generates from the OpenAPI
// document (client/internal/gen, checked by a test to be current), so a
// route, parameter or body the document changes changes here too. This
// package is the hand-written face over it:
//
//   - Orders are order.Order, the type the service itself stores and serves
//     (its JSON is the API's): statuses are order.Status constants, times
//     time.Time in UTC, absent times zero. Stock tasks are order.StockTask,
//     items order.Item. SKUs, event deliveries and pages are this package's
//     plain structs.
//   - Every answer other than the documented success is a *Error with the
//     API's status, code and message: errors.As gets it, errors.Is matches
//     it against the sentinels (ErrNotFound, ErrOrderNotPending, …) or any
//     &Error{Code: …} or &Error{Status: …}.
//   - A create is retried on a transport error and on 503 with the same
//     Idempotency-Key — the caller's, or one generated for the call — so
//     the order is made once whatever the network did. Requests safe to
//     repeat (reads, SetStock, Pay) are retried the same way; Cancel and
//     the retries of dead work are not. See WithRetry.
//
// The token given with WithToken is sent as a bearer token and appears in
// no error. No redirect is followed (lapse's API never answers one, and a
// followed redirect would carry the token): a 3xx is a *Error.
package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/client/internal/gen"
	"github.com/lapsehq/lapse/redact"
)

// Client talks to one lapse server. It is safe for concurrent use.
type Client struct {
	gen      *gen.Client
	base     string // for messages: the URL without credentials
	token    string
	hc       *http.Client
	attempts int
	backoff  time.Duration
}

// Option configures a Client.
type Option func(*Client) error

// WithToken sends token as "Authorization: Bearer <token>" (lapse serve
// --api-token).
func WithToken(token string) Option {
	return func(c *Client) error {
		if strings.ContainsAny(token, "\r\n") {
			return errors.New("client: the token holds a line break")
		}
		c.token = token
		return nil
	}
}

// WithHTTPClient sends the requests with a copy of hc instead of a client
// with a 30 s timeout; the copy follows no redirect, whatever hc's
// CheckRedirect says.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient(nil)")
		}
		c.hc = hc
		return nil
	}
}

// WithRetry sets how many times a request that may be repeated is sent in
// all (1: no retry; default 4) and the first wait between two sends
// (default 100 ms), doubled after each and jittered, at most 5 s.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(c *Client) error {
		if attempts < 1 || backoff < 0 {
			return fmt.Errorf("client: WithRetry(%d, %s): want at least 1 attempt and a backoff not negative", attempts, backoff)
		}
		c.attempts, c.backoff = attempts, backoff
		return nil
	}
}

// Defaults of New.
const (
	DefaultAttempts = 4
	DefaultBackoff  = 100 * time.Millisecond
	maxBackoff      = 5 * time.Second
	// maxAnswer bounds an answer read into memory: a page of 500 orders
	// with their items is well under it.
	maxAnswer = 64 << 20
)

// New returns a client of the lapse server at serverURL (http://host:port).
func New(serverURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server %q: want http://host:port", redact.URL(serverURL))
	}
	c := &Client{
		base:     redact.URL(strings.TrimRight(serverURL, "/")),
		hc:       &http.Client{Timeout: 30 * time.Second},
		attempts: DefaultAttempts,
		backoff:  DefaultBackoff,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	// lapse's API never redirects, so a redirect is a proxy's or another
	// server's doing: followed, it would carry the bearer token wherever it
	// points (net/http keeps Authorization for another port of the same
	// host). None is followed; once answers it with an error. A caller's
	// http.Client is copied, not changed.
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	g, err := gen.NewClient(serverURL, gen.WithHTTPClient(c.hc), gen.WithRequestEditorFn(c.authorize))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.gen = g
	return c, nil
}

func (c *Client) authorize(_ context.Context, req *http.Request) error {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return nil
}

// URL is the server's URL, without credentials.
func (c *Client) URL() string { return c.base }

// call is one API operation: send makes the request (the generated code
// builds it), want is its success status, out (if not nil) what its JSON
// answer decodes into. With retry, a transport error or a 503 sends it again
// after a backoff, up to the client's attempts.
type call struct {
	op    string // "POST /v1/orders", for messages
	send  func(ctx context.Context) (*http.Response, error)
	want  int
	also  int // another status that succeeds (0: none), as 202 beside 200
	out   any
	retry bool
}

func (c *Client) do(ctx context.Context, k call) error {
	attempts := 1
	if k.retry {
		attempts = c.attempts
	}
	wait := c.backoff
	var err error
	for attempt := 1; ; attempt++ {
		var again bool
		again, err = c.once(ctx, k)
		if err == nil || !again || attempt >= attempts {
			return err
		}
		// Full jitter: many clients refused at once do not come back at once.
		d := time.Duration(rand.Int64N(int64(wait) + 1))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// once sends k once; again says whether the failure may be retried.
func (c *Client) once(ctx context.Context, k call) (again bool, err error) {
	resp, err := k.send(ctx)
	if err != nil {
		// The request may or may not have reached the server: a repeat
		// is safe only for the calls marked retry.
		return ctx.Err() == nil, fmt.Errorf("lapse client: %s: %w", k.op, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("lapse client: %s: reading the answer: %w", k.op, err)
	}
	if k.also != 0 && resp.StatusCode == k.also {
		resp.StatusCode = k.want // a success as well: decoded alike
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != k.want {
		return false, fmt.Errorf("lapse client: %s: %w", k.op, &Error{Status: resp.StatusCode,
			Message: "a redirect to " + strconv.Quote(redact.URL(resp.Header.Get("Location"))) +
				" was not followed: lapse's API never redirects (is the server URL right, or is a proxy answering?)"})
	}
	if resp.StatusCode != k.want {
		e := apiError(resp.StatusCode, body)
		return resp.StatusCode == http.StatusServiceUnavailable, fmt.Errorf("lapse client: %s: %w", k.op, e)
	}
	if k.out == nil {
		return false, nil
	}
	if b, ok := k.out.(*[]byte); ok {
		*b = body
		return false, nil
	}
	if err := json.Unmarshal(body, k.out); err != nil {
		return false, fmt.Errorf("lapse client: %s: decoding the answer: %w", k.op, err)
	}
	return false, nil
}

// apiError reads the error envelope of an answer; an answer without one (a
// proxy's page) keeps its status and a piece of its text.
func apiError(status int, body []byte) *Error {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		return &Error{Status: status, Code: env.Error.Code, Message: env.Error.Message}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}

// newIdempotencyKey is a random key for a create the caller gave none.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return "lapse-client-" + hex.EncodeToString(b[:])
}
