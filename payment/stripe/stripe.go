// Package stripe is lapse's Stripe adapter: a payment.AttemptGateway over
// PaymentIntents (and the Checkout Sessions they belong to), and a
// payment.Notifier for Stripe's signed webhook events, on stripe-go.
//
// An order's payment attempt is one PaymentIntent: the payment_id the client
// gives POST /v1/orders/{id}/pay is its id (pi_…). lapse retrieves it to ask
// whether it was paid, and cancels it — or expires the open Checkout Session
// it belongs to, whose PaymentIntent Stripe will not cancel directly — so
// that the buyer can no longer pay once the order is cancelled.
package stripe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
)

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// Errors of the gateway. Each means "unknown" to lapse: it asks again later
// and never cancels on them — but for a PaymentIntent Stripe does not have
// (404 resource_missing) or one made for another order, which also wrap
// payment.ErrUnknownPayment: lapse waits for those at most
// --gateway-pending-max, then cancels the order without touching them.
var (
	// ErrNeedsAttempt is returned by Query and Close, which name an order
	// without a PaymentIntent: Stripe is asked about payment attempts only.
	ErrNeedsAttempt = errors.New("stripe: an order is asked about by its payment attempt's PaymentIntent id; this one has no open attempt lapse knows of")
	// ErrNotPaymentIntent is returned for a payment_id that is not a
	// PaymentIntent id (pi_…).
	ErrNotPaymentIntent = errors.New("stripe: payment_id is not a PaymentIntent id (pi_…)")
	// ErrUnexpected is returned, wrapped, for an answer lapse cannot read as
	// a payment state: a status it does not map (requires_capture), a
	// PaymentIntent other than the one asked for, one that names another
	// order in metadata.order_id (also payment.ErrUnknownPayment).
	ErrUnexpected = errors.New("stripe: unexpected answer")
)

// Config configures a Gateway. Zero fields take the defaults named below.
type Config struct {
	// Key is the secret (sk_…) or restricted (rk_…) API key: read and write
	// on PaymentIntents and Checkout Sessions. Required. It is never
	// logged, and it is cut out of every error.
	Key string
	// APIBase is Stripe's API base URL. Defaults to DefaultAPIBase; a
	// stripe-mock or a test server otherwise. Plain http is accepted for a
	// loopback host only (the key travels in every request).
	APIBase string
	// Timeout bounds one HTTP request. Defaults to 2 s.
	Timeout time.Duration
	// Retries is how many times stripe-go sends a request again after a
	// connection error or a timeout, a 409, or an answer with
	// Stripe-Should-Retry: true (a POST with the same idempotency key),
	// waiting 0.5 s and more between tries. Stripe's error answers are not
	// retried: lapse asks again later. Defaults to 2; negative disables
	// retries.
	Retries int
	// HTTPClient sends the requests; its Timeout is set to Timeout.
	// Defaults to a client with a transport of its own that follows no
	// redirect.
	HTTPClient *http.Client
}

// Gateway is a payment.AttemptGateway over Stripe PaymentIntents. It is safe
// for concurrent use.
type Gateway struct {
	c   *stripego.Client
	key string
}

var _ payment.AttemptGateway = (*Gateway)(nil)

// New returns a Gateway. Its errors never hold the key.
func New(cfg Config) (*Gateway, error) {
	if err := CheckKey(cfg.Key); err != nil {
		return nil, err
	}
	base := cfg.APIBase
	if base == "" {
		base = DefaultAPIBase
	}
	base, err := CheckAPIBase(base)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("stripe: Config.Timeout %s: want a positive duration", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = 2
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = payment.NewHTTPClient()
	} else {
		c := *hc
		hc = &c
	}
	hc.Timeout = cfg.Timeout
	backends := stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL:               stripego.String(base),
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(int64(cfg.Retries)),
		// The library's logs would go to stderr beside lapse's; its errors
		// come back to lapse, which logs them once, redacted.
		LeveledLogger:   &stripego.LeveledLogger{Level: stripego.LevelNull},
		EnableTelemetry: stripego.Bool(false),
	})
	return &Gateway{c: stripego.NewClient(cfg.Key, stripego.WithBackends(backends)), key: cfg.Key}, nil
}

// CheckKey says what is wrong with an API key, without showing it.
func CheckKey(key string) error {
	switch {
	case key == "":
		return errors.New("stripe: no API key")
	case !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_"):
		return errors.New("stripe: the API key is neither a secret key (sk_…) nor a restricted key (rk_…); a publishable key (pk_…) or a webhook secret (whsec_…) will not do")
	case strings.ContainsAny(key, " \t\r\n"):
		return errors.New("stripe: the API key holds white space")
	}
	return nil
}

// CheckAPIBase validates an API base URL and returns it without a trailing
// slash: https://host[:port][/prefix], or http:// for a loopback host
// (stripe-mock). Its errors show the URL without a password.
func CheckAPIBase(base string) (string, error) {
	shown := redact.URL(base)
	u, err := url.Parse(base)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return "", fmt.Errorf("stripe: API base %q: %w", shown, err)
	}
	switch {
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "", fmt.Errorf("stripe: API base %q: want https://host[:port][/prefix]", shown)
	case u.User != nil:
		return "", fmt.Errorf("stripe: API base %q: no user or password allowed (the key is sent as a bearer token)", shown)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("stripe: API base %q: no query or fragment allowed", shown)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return "", fmt.Errorf("stripe: API base %q: plain http only to a loopback host (a stripe-mock): the API key travels in every request", shown)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Query implements payment.Gateway: Stripe knows PaymentIntents, not orders,
// so it is ErrNeedsAttempt. lapse asks an AttemptGateway about each open
// attempt; an order reaches Query only if lapse recorded none.
func (g *Gateway) Query(_ context.Context, orderID string) (payment.Status, error) {
	return payment.Status{}, fmt.Errorf("query order %q: %w", orderID, ErrNeedsAttempt)
}

// Close implements payment.Gateway: ErrNeedsAttempt, as Query.
func (g *Gateway) Close(_ context.Context, orderID string) error {
	return fmt.Errorf("close order %q: %w", orderID, ErrNeedsAttempt)
}

// QueryAttempt implements payment.AttemptGateway: GET
// /v1/payment_intents/{id}, its status mapped by StateOf.
func (g *Gateway) QueryAttempt(ctx context.Context, orderID, paymentID string) (payment.Status, error) {
	pi, err := g.retrieve(ctx, orderID, paymentID)
	if err != nil {
		return payment.Status{}, fmt.Errorf("stripe: query order %q payment %q: %w", orderID, paymentID, err)
	}
	st, err := StateOf(pi)
	if err != nil {
		return payment.Status{}, fmt.Errorf("stripe: query order %q payment %q: %w", orderID, paymentID, err)
	}
	return st, nil
}

// StateOf maps a PaymentIntent's status onto lapse's states: succeeded →
// PAID (amount_received in currency, the id); requires_payment_method, and
// requires_confirmation without a next_action → NOT_PAID; requires_action,
// requires_confirmation with a next_action (the buyer is in 3-D Secure or
// another authentication step) and processing → PENDING, asked again up to
// --gateway-pending-max rather than closed under the buyer; canceled →
// CLOSED. Any other status (requires_capture: authorised, not captured) is
// an error, never NOT_PAID.
func StateOf(pi *stripego.PaymentIntent) (payment.Status, error) {
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		if pi.ID == "" || pi.AmountReceived < 0 {
			return payment.Status{}, fmt.Errorf("%w: succeeded without an id or a valid amount_received", ErrUnexpected)
		}
		return payment.Status{State: payment.StatePaid, PaymentID: pi.ID, AmountCents: pi.AmountReceived, Currency: Currency(pi.Currency)}, nil
	case stripego.PaymentIntentStatusRequiresConfirmation:
		if pi.NextAction != nil {
			return payment.Status{State: payment.StatePending}, nil
		}
		return payment.Status{State: payment.StateNotPaid}, nil
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		return payment.Status{State: payment.StateNotPaid}, nil
	case stripego.PaymentIntentStatusRequiresAction, stripego.PaymentIntentStatusProcessing:
		return payment.Status{State: payment.StatePending}, nil
	case stripego.PaymentIntentStatusCanceled:
		return payment.Status{State: payment.StateClosed}, nil
	}
	return payment.Status{}, fmt.Errorf("%w: PaymentIntent status %q", ErrUnexpected, pi.Status)
}

// Currency is lapse's form of a Stripe currency: Stripe writes ISO 4217 in
// lower case (usd), lapse in upper case (USD).
func Currency(c stripego.Currency) string { return strings.ToUpper(string(c)) }

// CloseAttempt implements payment.AttemptGateway. It retrieves the
// PaymentIntent: succeeded → ErrAlreadyPaid; canceled → nil. Otherwise, if
// it belongs to an open Checkout Session (GET
// /v1/checkout/sessions?payment_intent=…), the Session is expired (POST
// /v1/checkout/sessions/{id}/expire), which cancels its PaymentIntent;
// else the PaymentIntent is cancelled (POST /v1/payment_intents/{id}/cancel).
// Stripe refusing either because the PaymentIntent moved on meanwhile (paid,
// cancelled) is read by retrieving it again.
func (g *Gateway) CloseAttempt(ctx context.Context, orderID, paymentID string) error {
	if err := g.close(ctx, orderID, paymentID); err != nil {
		if errors.Is(err, payment.ErrAlreadyPaid) {
			return err
		}
		return fmt.Errorf("stripe: close order %q payment %q: %w", orderID, paymentID, err)
	}
	return nil
}

func (g *Gateway) close(ctx context.Context, orderID, paymentID string) error {
	pi, err := g.retrieve(ctx, orderID, paymentID)
	if err != nil {
		return err
	}
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return payment.ErrAlreadyPaid
	case stripego.PaymentIntentStatusCanceled:
		return nil
	case stripego.PaymentIntentStatusRequiresPaymentMethod, stripego.PaymentIntentStatusRequiresConfirmation,
		stripego.PaymentIntentStatusRequiresAction, stripego.PaymentIntentStatusProcessing:
	default:
		// requires_capture: cancelling would release money the buyer
		// authorised; lapse does not decide that.
		return fmt.Errorf("%w: PaymentIntent status %q: not closed", ErrUnexpected, pi.Status)
	}
	session, err := g.openSession(ctx, paymentID)
	if err != nil {
		return err
	}
	if session != "" {
		if _, err := g.c.V1CheckoutSessions.Expire(ctx, session, &stripego.CheckoutSessionExpireParams{}); err != nil {
			return g.settled(ctx, orderID, paymentID, fmt.Errorf("expire Checkout Session %s: %w", session, g.describe(err)), err)
		}
		return nil
	}
	if _, err := g.c.V1PaymentIntents.Cancel(ctx, paymentID, &stripego.PaymentIntentCancelParams{}); err != nil {
		return g.settled(ctx, orderID, paymentID, fmt.Errorf("cancel: %w", g.describe(err)), err)
	}
	return nil
}

// openSession returns the id of the open Checkout Session the PaymentIntent
// belongs to, or "".
func (g *Gateway) openSession(ctx context.Context, paymentID string) (string, error) {
	params := &stripego.CheckoutSessionListParams{PaymentIntent: stripego.String(paymentID), Status: stripego.String(string(stripego.CheckoutSessionStatusOpen))}
	params.Limit = stripego.Int64(10)
	seen := 0
	for s, err := range g.c.V1CheckoutSessions.List(ctx, params) {
		if err != nil {
			return "", fmt.Errorf("list Checkout Sessions: %w", g.describe(err))
		}
		// Stripe lists only this PaymentIntent's sessions; a server that
		// ignores the filter (stripe-mock) must not have another expired.
		if s.Status == stripego.CheckoutSessionStatusOpen && s.PaymentIntent != nil && s.PaymentIntent.ID == paymentID {
			return s.ID, nil
		}
		if seen++; seen >= 10 {
			break
		}
	}
	return "", nil
}

// settled reads a refused cancel or expire: the PaymentIntent paid
// meanwhile → ErrAlreadyPaid; cancelled → nil; else the refusal, described.
func (g *Gateway) settled(ctx context.Context, orderID, paymentID string, described, raw error) error {
	if se, ok := errors.AsType[*stripego.Error](raw); !ok || se.HTTPStatusCode < 400 || se.HTTPStatusCode >= 500 {
		return described
	}
	pi, err := g.retrieve(ctx, orderID, paymentID)
	if err != nil {
		return fmt.Errorf("%w; then %w", described, err)
	}
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return payment.ErrAlreadyPaid
	case stripego.PaymentIntentStatusCanceled:
		return nil
	}
	return fmt.Errorf("%w (the PaymentIntent is %s)", described, pi.Status)
}

// retrieve gets the PaymentIntent and checks it is the one asked for, of
// this order.
func (g *Gateway) retrieve(ctx context.Context, orderID, paymentID string) (*stripego.PaymentIntent, error) {
	if orderID == "" {
		return nil, errors.New("empty order id")
	}
	if !IsPaymentIntentID(paymentID) {
		return nil, fmt.Errorf("%w: %q", ErrNotPaymentIntent, paymentID)
	}
	pi, err := g.c.V1PaymentIntents.Retrieve(ctx, paymentID, &stripego.PaymentIntentRetrieveParams{})
	if err != nil {
		if se, ok := errors.AsType[*stripego.Error](err); ok && se.HTTPStatusCode == http.StatusNotFound && se.Code == stripego.ErrorCodeResourceMissing {
			// Never "not paid" at once (a live key asked about a test
			// id reads the same), but not retried forever either.
			return nil, fmt.Errorf("retrieve: %w: %w", payment.ErrUnknownPayment, g.describe(err))
		}
		return nil, fmt.Errorf("retrieve: %w", g.describe(err))
	}
	if pi.ID != paymentID {
		return nil, fmt.Errorf("%w: asked for PaymentIntent %s, got %q", ErrUnexpected, paymentID, pi.ID)
	}
	if o, ok := pi.Metadata["order_id"]; ok && o != orderID {
		// Another order's money: never reported as this order's, and
		// never closed on its behalf.
		return nil, fmt.Errorf("%w: %w: PaymentIntent %s is for order %q (metadata.order_id)", ErrUnexpected, payment.ErrUnknownPayment, paymentID, o)
	}
	return pi, nil
}

// IsPaymentIntentID reports whether id looks like a PaymentIntent id.
func IsPaymentIntentID(id string) bool {
	if !strings.HasPrefix(id, "pi_") || len(id) == 3 || len(id) > 255 {
		return false
	}
	for _, r := range id[3:] {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// describe turns stripe-go's error into a short one without the key: the
// status, Stripe's type and code, its message and request id (not the
// library's JSON, which may carry the whole PaymentIntent).
func (g *Gateway) describe(err error) error {
	if se, ok := errors.AsType[*stripego.Error](err); ok {
		msg := fmt.Sprintf("%d %s", se.HTTPStatusCode, se.Type)
		if se.Code != "" {
			msg += "/" + string(se.Code)
		}
		if se.Msg != "" {
			msg += ": " + se.Msg
		}
		if se.RequestID != "" {
			msg += " (request " + se.RequestID + ")"
		}
		return &keyless{msg: g.cut(msg), err: se}
	}
	return &keyless{msg: g.cut(err.Error()), err: err}
}

// cut removes the key from s.
func (g *Gateway) cut(s string) string {
	if g.key == "" {
		return s
	}
	return strings.ReplaceAll(s, g.key, "[redacted]")
}

// keyless is an error whose text was cleared of the key; errors.Is and As
// still see what it wraps.
type keyless struct {
	msg string
	err error
}

func (e *keyless) Error() string { return e.msg }
func (e *keyless) Unwrap() error { return e.err }
