package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultHTTPTimeout bounds one command over HTTP, answer included.
const DefaultHTTPTimeout = 5 * time.Second

// HTTPOption configures NewHTTPClient.
type HTTPOption func(*httpClient)

// WithTimeout bounds each command, from sending it to reading the answer:
// past it the outcome is unknown and Send returns an error. Defaults to
// DefaultHTTPTimeout; d <= 0 leaves the default.
func WithTimeout(d time.Duration) HTTPOption {
	return func(c *httpClient) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithHTTPClient sends the commands with a copy of hc (its transport,
// proxies, TLS settings) that follows no redirect. Defaults to a client of
// its own; nil leaves the default.
func WithHTTPClient(hc *http.Client) HTTPOption {
	return func(c *httpClient) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// httpClient is the HTTP transport of Client.
type httpClient struct {
	base    string
	hc      *http.Client
	own     bool // hc is the client's own, closed by Close
	timeout time.Duration
}

// NewHTTPClient returns a Client that sends commands to the inventory at
// baseURL (http://host:port, or with a path prefix):
//
//	reserve  POST {baseURL}/reservations {"reservation_id", "order_id", "items"}
//	release  POST {baseURL}/reservations/{reservation_id}/release {"order_id", "items"}
//	confirm  POST {baseURL}/reservations/{reservation_id}/confirm {"order_id", "items"}
//
// each with Idempotency-Key: <task id>. The status decides the answer:
//
//   - 201, and any 2xx but 200 on a reserve: Success. A reserve answered 200
//     is AlreadyDone (the reservation existed: an inventory answering 200
//     to a fresh reserve is only labelled differently — both are done).
//     Any 2xx on a release or confirm: Success.
//   - 409: AlreadyDone, except a 409 whose error code refuses the command:
//     insufficient_stock always, released on a reserve or confirm — those
//     are Rejected with the code as the reason.
//   - 408 and 429: an error (the inventory asks to be tried again later).
//   - Any other 4xx: Rejected, the reason the error code of the body
//     {"error": {"code"}}, or "http_<status>" without one.
//   - 5xx, a 3xx (redirects are not followed, also with WithHTTPClient's
//     client), any other status, a timeout, a connection refused or closed
//     without an answer: an error — the outcome is unknown, send again.
//
// A command that fails Command.Validate is not sent: Send returns an error.
func NewHTTPClient(baseURL string, opts ...HTTPOption) Client {
	c := &httpClient{base: strings.TrimRight(baseURL, "/"), timeout: DefaultHTTPTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc, c.own = &http.Client{}, true
	} else {
		hc := *c.hc // the caller's client is left as it is
		c.hc = &hc
	}
	// A redirect is never followed (as the webhook sink does): net/http
	// would re-issue a POST as a GET, and the target's 2xx would read as
	// a command applied though none was. A 3xx is an unknown outcome.
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// httpCommand is a command's request body.
type httpCommand struct {
	ReservationID string `json:"reservation_id,omitempty"`
	OrderID       string `json:"order_id,omitempty"`
	Items         []Item `json:"items,omitempty"`
}

// Send implements Client.
func (c *httpClient) Send(ctx context.Context, cmd Command) (Answer, error) {
	if err := cmd.Validate(); err != nil {
		return Answer{}, err
	}
	u := c.base + "/reservations"
	body := httpCommand{OrderID: cmd.OrderID, Items: cmd.Items}
	if cmd.Action == Reserve {
		body.ReservationID = cmd.ReservationID
	} else {
		u += "/" + url.PathEscape(cmd.ReservationID) + "/" + string(cmd.Action)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return Answer{}, fmt.Errorf("inventory: http: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return Answer{}, fmt.Errorf("inventory: http: %s %s: %w", cmd.Action, cmd.ReservationID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", cmd.TaskID)
	resp, err := c.hc.Do(req)
	if err != nil {
		// A *url.Error: net/http strips a password from its URL.
		return Answer{}, fmt.Errorf("inventory: http: %s %s: %w", cmd.Action, cmd.ReservationID, err)
	}
	defer resp.Body.Close()
	// The body is read in full so that the connection can be reused, and
	// read under the timeout: an answer cut off is no answer.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Answer{}, fmt.Errorf("inventory: http: %s %s: reading the answer (status %d): %w", cmd.Action, cmd.ReservationID, resp.StatusCode, err)
	}
	return answerOf(cmd, resp.StatusCode, raw)
}

// answerOf maps an HTTP answer to a command's Answer (see NewHTTPClient).
func answerOf(cmd Command, status int, body []byte) (Answer, error) {
	ans := Answer{TaskID: cmd.TaskID}
	code := errorCode(body)
	switch {
	case status == http.StatusOK && cmd.Action == Reserve:
		ans.Result = AlreadyDone
	case status >= 200 && status < 300:
		ans.Result = Success
	case status == http.StatusConflict:
		switch {
		case code == ReasonInsufficientStock, code == "released" && cmd.Action != Release:
			ans.Result, ans.Reason = Rejected, code
		default:
			ans.Result = AlreadyDone
		}
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return Answer{}, fmt.Errorf("inventory: http: %s %s: status %d: try again later", cmd.Action, cmd.ReservationID, status)
	case status >= 400 && status < 500:
		if code == "" {
			code = fmt.Sprintf("http_%d", status)
		}
		ans.Result, ans.Reason = Rejected, code
	case status >= 300 && status < 400:
		return Answer{}, fmt.Errorf("inventory: http: %s %s: status %d (redirects are not followed: give --inventory the URL the inventory answers at)", cmd.Action, cmd.ReservationID, status)
	default:
		return Answer{}, fmt.Errorf("inventory: http: %s %s: status %d %s", cmd.Action, cmd.ReservationID, status, code)
	}
	return ans, nil
}

// errorCode is the code of an error body {"error": {"code": …}}, or "".
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error.Code) > 200 {
		return ""
	}
	return e.Error.Code
}

// Close implements Client: it closes the idle connections of the client's
// own transport (a client given with WithHTTPClient is left alone).
func (c *httpClient) Close() error {
	if c.own {
		c.hc.CloseIdleConnections()
	}
	return nil
}
