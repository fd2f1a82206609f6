// Package webhook is the outbox sink that POSTs every event to one HTTP
// endpoint as a Standard Webhooks message (https://www.standardwebhooks.com),
// so receivers verify lapse's events with any of that specification's
// libraries.
//
// # The Standard Webhooks mapping
//
//   - webhook-id: the event id. It is the same on every attempt, so it is
//     what the receiver dedupes by.
//   - webhook-timestamp: the attempt's time in unix seconds, not the
//     event's: receivers refuse messages more than a few minutes off their
//     clock, and a retry may come days after the event (the event's own
//     time is in the body).
//   - webhook-signature: "v1," and the base64 HMAC-SHA256 of
//     "<webhook-id>.<webhook-timestamp>.<body>", keyed with the bytes a
//     whsec_ secret decodes to. During a rotation there are several
//     secrets and one signature per secret, space-separated, so a receiver
//     holding either the old or the new secret verifies the message.
//   - The body is outbox.Format.Structured: the JSON envelope
//     (application/json) or a structured CloudEvent
//     (application/cloudevents+json); see docs/events.
//
// # Guarantees
//
// An event is delivered once the endpoint answers it 2xx; anything else is
// an error for that event alone and the relay retries it (at least once
// delivery: a receiver sees an event again when its answer was lost, and
// dedupes by webhook-id). The sink schedules nothing itself: it classifies
// the answer and the relay does the backoff under the sink's Policy (retries
// for up to Config.MaxAge, 72 hours by default):
//
//   - 2xx: delivered.
//   - 410 Gone: an error wrapping outbox.ErrGone; the relay stops
//     publishing to the endpoint and keeps its events.
//   - 429 and 503: outbox.RefusedRetryAfter when the answer carries a
//     Retry-After (seconds or an HTTP-date), else outbox.Refused.
//   - 408, 409, every other 5xx, a 3xx, no answer within Config.Timeout
//     (15 s), and a connection that fails: outbox.Refused, so an endpoint
//     that stays down counts toward the maximum age like one that answers
//     500.
//   - Any other 4xx: outbox.RefusedForGood; the request itself is wrong
//     and retrying cannot help, the event is dead for this sink at once.
//
// The end of Publish's context is not the endpoint's fault: what it
// interrupts is answered with the context's error, not a refusal.
//
// Redirects are not followed (a redirect to another host would hand it the
// event): a 3xx is a refusal naming the status. Plain http is refused
// except to a loopback address (or with Config.Insecure), since the body is
// order data and the signature only authenticates it. Secrets, the URL's
// user info and its query string (which may hold a token) appear in no
// error and not in Name (which holds a digest of the query's non-secret
// parameters, see Sink.Name); neither do response bodies, which may echo
// the URL.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/internal/endpoint"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/redact"
)

// Defaults of the Config fields left zero.
const (
	// DefaultMaxAge is how long refused events are retried: three days,
	// long enough for an endpoint to outlast a weekend's outage.
	DefaultMaxAge = 72 * time.Hour
	// DefaultTimeout bounds one request, answer included.
	DefaultTimeout = 15 * time.Second
	// DefaultConcurrency is how many requests one Publish has in flight.
	DefaultConcurrency = 16
)

// UserAgent is the User-Agent of every request.
const UserAgent = "lapse"

// maxResponseBody is how much of an answer's body is read: enough to drain
// a typical short answer so its connection is reused, while an endpoint
// that streams megabytes costs one connection rather than the bandwidth.
const maxResponseBody = 4 << 10

// Config is a webhook sink's setup: the --sink URL and the --webhook-*
// flags.
type Config struct {
	// URL is the endpoint, https:// (http:// only to a loopback host, or
	// with Insecure). Its query string is sent but never shown; user info
	// is refused, since the signature is what authenticates lapse.
	URL string
	// Secrets sign every request, one signature each: whsec_ followed by
	// the standard base64 of at least 24 random bytes. Several during a
	// rotation. At least one is required: lapse offers no unsigned
	// webhooks.
	Secrets []string
	// Insecure allows http:// to any host (--webhook-insecure).
	Insecure bool
	// MaxAge is how long an event's refusals are retried before it is
	// dead for this sink (--webhook-max-age). Zero means DefaultMaxAge.
	MaxAge time.Duration
	// Timeout bounds each request, from connecting to reading the answer.
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// Concurrency is the most requests in flight per Publish. Zero means
	// DefaultConcurrency.
	Concurrency int
	// Format is how events are written (--event-format); empty means
	// outbox.FormatJSON.
	Format outbox.Format
	// Client sends the requests; nil means a client of the sink's own
	// (proxy from the environment, idle connections kept for Concurrency
	// requests). The sink uses a copy that never follows redirects,
	// whatever Client.CheckRedirect says.
	Client *http.Client
}

// Sink delivers events to one webhook endpoint. It is safe for concurrent
// use.
type Sink struct {
	target      string // the URL requests go to, query included
	display     string // scheme://host/path: what errors and Name show
	query       string // the digest of the query that Name shows (queryDigest)
	signer      *Signer
	client      *http.Client
	ownClient   bool // the transport is ours to close
	format      outbox.Format
	policy      outbox.Policy
	timeout     time.Duration
	concurrency int
}

var (
	_ outbox.PolicySink = (*Sink)(nil)
	_ io.Closer         = (*Sink)(nil)
)

// New validates cfg and returns its sink. It connects to nothing: an
// endpoint that is down shows in the first Publish.
func New(cfg Config) (*Sink, error) {
	u, display, err := endpoint.Parse(cfg.URL, "webhook URL", cfg.Insecure, "--webhook-insecure")
	if err != nil {
		return nil, err
	}
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("webhook %s: no secret: lapse signs every webhook, give one with --webhook-secret or --webhook-secret-file", display)
	}
	signer, err := NewSigner(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", display, err)
	}
	format, err := outbox.ParseFormat(string(cfg.Format))
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", display, err)
	}
	switch {
	case cfg.MaxAge < 0:
		return nil, fmt.Errorf("webhook %s: max age %s: want a positive duration", display, cfg.MaxAge)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("webhook %s: timeout %s: want a positive duration", display, cfg.Timeout)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("webhook %s: concurrency %d: want a positive number", display, cfg.Concurrency)
	}
	s := &Sink{
		target: u.String(), display: display, query: queryDigest(u.RawQuery), signer: signer, format: format,
		policy:      outbox.Policy{MaxAge: cmp.Or(cfg.MaxAge, DefaultMaxAge)},
		timeout:     cmp.Or(cfg.Timeout, DefaultTimeout),
		concurrency: cmp.Or(cfg.Concurrency, DefaultConcurrency),
	}
	if cfg.Client != nil {
		c := *cfg.Client
		s.client = &c
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// The default keeps two idle connections per host: a Publish of
		// Concurrency requests would open and close the rest every time.
		tr.MaxIdleConnsPerHost = s.concurrency
		s.client, s.ownClient = &http.Client{Transport: tr}, true
	}
	s.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return s, nil
}

// Name implements outbox.Sink: "webhook:" and the URL without its query
// string or user info, then, when the query has parameters that are not
// secrets (see queryDigest), "?query-sha256=" and a digest of them. Two
// endpoints that differ only in such a parameter (?tenant=a, ?tenant=b) are
// two sinks, each with its own progress; changing a token in the query keeps
// the sink's progress; and the name, which is logged, stored and a metrics
// label, shows no part of the query.
func (s *Sink) Name() string {
	if s.query == "" {
		return "webhook:" + s.display
	}
	return "webhook:" + s.display + "?query-sha256=" + s.query
}

// SinkName is the Name of the sink New would make of rawURL, without making
// it: for checking, before opening anything, that two configured sinks are
// not one. It checks only what the name needs.
func SinkName(rawURL string) (string, error) {
	u, display, err := endpoint.Parse(rawURL, "webhook URL", true, "--webhook-insecure")
	if err != nil {
		return "", err
	}
	s := Sink{display: display, query: queryDigest(u.RawQuery)}
	return s.Name(), nil
}

// queryDigest is the first 16 hex digits of the SHA-256 of a query's
// parameters, secret ones (redact.SecretParam: token, key, signature, …)
// and empty ones left out, the rest sorted (their order does not make
// another endpoint); "" when none is left. The digest, never the query,
// goes into the name: a parameter redact does not know for a secret may
// still be one.
func queryDigest(rawQuery string) string {
	var kept []string
	for p := range strings.SplitSeq(rawQuery, "&") {
		name, _, _ := strings.Cut(p, "=")
		if p == "" || redact.SecretParam(name) {
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return ""
	}
	slices.Sort(kept)
	sum := sha256.Sum256([]byte(strings.Join(kept, "&")))
	return hex.EncodeToString(sum[:8])
}

// Policy implements outbox.PolicySink: refusals are retried for MaxAge.
func (s *Sink) Policy() outbox.Policy { return s.policy }

// Close releases the idle connections of the sink's own client (none when
// Config.Client was given). Call it once no Publish is running.
func (s *Sink) Close() error {
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

// Publish implements outbox.Sink: it POSTs events concurrently, at most
// Concurrency at a time, and returns one result per event once every
// request has been answered, has failed, or has been cut short by the end
// of ctx. The relay hands it at most one event per order, so sending them
// concurrently reorders no order's events.
func (s *Sink) Publish(ctx context.Context, events []order.Event) []error {
	errs := make([]error, len(events))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i, e := range events {
		if !acquire(ctx, sem) {
			for j := i; j < len(events); j++ {
				errs[j] = ctx.Err()
			}
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.deliver(ctx, e)
		})
	}
	wg.Wait()
	return errs
}

// acquire takes a slot of sem, or reports false once ctx has ended.
func acquire(ctx context.Context, sem chan<- struct{}) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// deliver sends one event and classifies the answer (see the package doc).
func (s *Sink) deliver(ctx context.Context, e order.Event) error {
	body, contentType, err := s.format.Structured(e)
	if err != nil {
		// The payload is not JSON: no attempt can ever send it, and a
		// transport error would be retried forever, holding up the order's
		// later events. It is dead for this sink.
		return outbox.RefusedForGood(fmt.Errorf("webhook %s: %w", s.display, err))
	}
	now := time.Now()
	sig, err := s.sign(e.ID, now, body)
	if err != nil {
		return outbox.RefusedForGood(fmt.Errorf("webhook %s: sign event %s: %w", s.display, e.ID, err))
	}

	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil {
		// The URL was parsed by New: only a bug gets here.
		return fmt.Errorf("webhook %s: build request: %w", s.display, endpoint.Cause(err))
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set(standardwebhooks.HeaderWebhookID, e.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)

	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportError(ctx, err)
	}
	// Read what a short answer holds so the connection goes back to the
	// pool; the status alone decides, so a failed read changes nothing.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()
	return s.classify(resp, time.Now())
}

// sign returns the webhook-signature header: one v1 signature per secret.
func (s *Sink) sign(id string, ts time.Time, body []byte) (string, error) {
	return s.signer.Sign(id, ts, body)
}

// transportError classifies a request that got no answer: the end of ctx
// is the caller's and says so; anything else (refused connection, TLS
// failure, the per-request timeout) is the endpoint being unreachable, a
// refusal that counts toward the maximum age.
//
// The client's *url.Error is unwrapped because its message holds the URL,
// query string included.
func (s *Sink) transportError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("webhook %s: %w", s.display, ctxErr)
	}
	cause := endpoint.Cause(err)
	if errors.Is(cause, context.DeadlineExceeded) {
		return outbox.Refused(fmt.Errorf("webhook %s: no answer within %s: %w", s.display, s.timeout, cause))
	}
	return outbox.Refused(fmt.Errorf("webhook %s: %w", s.display, cause))
}

// classify maps an answer to Publish's result for its event.
func (s *Sink) classify(resp *http.Response, now time.Time) error {
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	serr := &StatusError{URL: s.display, Code: code}
	switch {
	case code == http.StatusGone:
		return fmt.Errorf("%w: %w", outbox.ErrGone, serr)
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d := endpoint.RetryAfter(resp.Header.Get("Retry-After"), now, s.policy.MaxAge); d > 0 {
			return outbox.RefusedRetryAfter(serr, d)
		}
		return outbox.Refused(serr)
	case code == http.StatusRequestTimeout || code == http.StatusConflict:
		return outbox.Refused(serr)
	case code >= 400 && code <= 499:
		return outbox.RefusedForGood(serr)
	}
	// 5xx, a redirect not followed, or a status outside the classes.
	return outbox.Refused(serr)
}

// StatusError is an endpoint's answer other than 2xx, as wrapped in
// Publish's results (in an outbox.RefusedError, or with outbox.ErrGone).
type StatusError struct {
	// URL is the endpoint without query string or user info.
	URL string
	// Code is the HTTP status.
	Code int
}

// Error names the status; the response body is not quoted (it may echo
// the URL's query string).
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("webhook %s answered %d %s", e.URL, e.Code, http.StatusText(e.Code))
	if e.Code >= 300 && e.Code <= 399 {
		msg += " (redirects are not followed)"
	}
	return msg
}
