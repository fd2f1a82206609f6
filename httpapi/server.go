// Package httpapi serves lapse's HTTP API (documented in openapi.yaml).
//
// Every error is {"error": {"code", "message"}} with a stable code; no stack
// trace or driver message leaves the process for a 5xx.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Options configures the API.
type Options struct {
	// APIToken, when set, is required as "Authorization: Bearer <token>" on
	// every /v1 route except the payment callback (which is signed instead).
	// Without one, every route refuses a request whose Host is not the
	// address it arrived at (or localhost at that port) or whose Origin is
	// another site's, with 403 foreign_origin: see guard.go. Use 16 bytes
	// or more (lapse serve and the dashboard refuse less); wrong tokens are
	// throttled per address (AuthThrottle).
	APIToken string
	// CallbackSecrets verify the payment callback's signature; two may be
	// given while a secret is rotated. With none, every callback is refused.
	CallbackSecrets [][]byte
	// SignatureTolerance is the callback replay window. Defaults to 5 minutes.
	SignatureTolerance time.Duration
	// Now is the clock for signature timestamps. Defaults to time.Now.
	Now func() time.Time
	// RequestTimeout bounds the work of one request. Defaults to 20
	// seconds: under the server's write timeout (lapse serve: 30 s), so a
	// request stuck behind a lock is answered 503 timeout rather than having
	// its connection dropped unanswered.
	RequestTimeout time.Duration
	// Notifiers verify gateways' own notifications, each served at POST
	// /v1/payments/notify/{Name} (gateways.go).
	Notifiers []payment.Notifier
	// AuthThrottle limits wrong bearer tokens per remote address (429
	// auth_throttled past its budget). nil: one of the API's own with
	// AuthThrottleConfig's defaults. lapse serve gives the API and the
	// dashboard the same one.
	AuthThrottle *AuthThrottle
	Logger       *slog.Logger
}

// DefaultRequestTimeout is Options.RequestTimeout's default.
const DefaultRequestTimeout = 20 * time.Second

// OpenAPI is the API's OpenAPI 3.1 document, served at GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

type server struct {
	svc      *lapse.Service
	opts     Options
	log      *slog.Logger
	throttle *AuthThrottle
}

// New returns the API's handler.
func New(svc *lapse.Service, opts Options) http.Handler {
	if opts.SignatureTolerance == 0 {
		opts.SignatureTolerance = payment.DefaultTolerance
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AuthThrottle == nil {
		opts.AuthThrottle = NewAuthThrottle(AuthThrottleConfig{})
	}
	s := &server{svc: svc, opts: opts, log: opts.Logger, throttle: opts.AuthThrottle}
	mux := http.NewServeMux()
	const takesBody, noBody = true, false
	v1 := func(pattern string, body bool, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.Handle(pattern, s.authed(s.handle(jsonBody(body, h))))
	}
	v1("POST /v1/orders", takesBody, s.createOrder)
	v1("GET /v1/orders", noBody, s.listOrders)
	v1("GET /v1/orders/{id}", noBody, s.getOrder)
	v1("POST /v1/orders/{id}/pay", noBody, s.pay)
	v1("POST /v1/orders/{id}/cancel", noBody, s.cancel)
	v1("POST /v1/orders/{id}/extend", takesBody, s.extend)
	v1("POST /v1/orders/{id}/check", noBody, s.check)
	v1("PUT /v1/skus/{sku}", takesBody, s.setStock)
	v1("GET /v1/skus/{sku}", noBody, s.getSKU)
	v1("GET /v1/events", noBody, s.listEvents)
	v1("POST /v1/events/retry", takesBody, s.retryEvents)
	v1("GET /v1/tasks", noBody, s.listTasks)
	v1("POST /v1/tasks/retry", takesBody, s.retryTasks)
	v1("GET /v1/commands", noBody, s.listCommands)
	v1("POST /v1/commands/retry", takesBody, s.retryCommands)
	v1("POST /v1/commands/purge", takesBody, s.purgeCommands)
	v1("POST /v1/payments/{payment_id}/refund", noBody, s.refund) // the body is optional
	v1("GET /v1/refunds", noBody, s.listRefunds)
	v1("POST /v1/refunds/retry", takesBody, s.retryRefunds)
	mux.Handle("POST /v1/payments/notify", s.handle(jsonBody(takesBody, s.notify)))
	for _, n := range opts.Notifiers {
		mux.Handle("POST /v1/payments/notify/"+n.Name(), s.gatewayNotify(n))
	}
	mux.Handle("GET /healthz", s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.Handle("GET /readyz", s.handle(s.ready))
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(svc.Registry(), promhttp.HandlerOpts{}))
	// Every request no route takes ends here, whatever its method: with the
	// method-less "/" pattern registered, ServeMux never answers 405 itself
	// (and its own 404 and 405 are plain text, not the error envelope).
	mux.Handle("/", s.handle(func(w http.ResponseWriter, r *http.Request) error {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			return &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
				Message: echo(r.Method) + " is not allowed on " + echo(r.URL.Path) + "; allowed: " + strings.Join(allow, ", ")}
		}
		return &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: echo(r.Method) + " " + echo(r.URL.Path) + " is not a route of this API"}
	}))
	if opts.APIToken == "" {
		return s.sameOrigin(mux)
	}
	return mux
}

// jsonBody makes h refuse with 415 a body not declared application/json:
// always for a route that takes a body, else only when the request carries
// one (such a route has no use for it, and a cross-site form would carry
// one). See guard.go for why.
func jsonBody(required bool, h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if required || hasBody(r) {
			if err := requireJSON(r); err != nil {
				return err
			}
		}
		return h(w, r)
	}
}

// probeMethods are the methods a 405's Allow header may name.
var probeMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// allowedMethods asks the mux which methods it routes for r's path to a
// handler other than the catch-all, so the Allow header can never disagree
// with the routes actually registered.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// handle adapts a handler that returns an error, writing the error body.
func (s *server) handle(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

func (s *server) authed(next http.Handler) http.Handler {
	if s.opts.APIToken == "" {
		return next
	}
	want := sha256.Sum256([]byte(s.opts.APIToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if auth != "" {
			// A credential from an address out of its budget of wrong ones
			// is not looked at (AuthThrottle).
			if ok, wait, first := s.throttle.Allow(r.RemoteAddr); !ok {
				if first {
					s.log.Warn("too many wrong API tokens from one address: its requests are answered 429 until its budget refills (logged once per burst)",
						"remote", r.RemoteAddr, "wait", wait.Round(time.Second))
				}
				secs := RetryAfter(wait)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				s.writeError(w, r, &apiError{Status: http.StatusTooManyRequests, Code: "auth_throttled",
					Message: fmt.Sprintf("too many wrong tokens from this address; retry in %d s", secs)})
				return
			}
		}
		if !bearerMatches(auth, want) {
			if auth != "" && s.throttle.Fail(r.RemoteAddr) {
				s.log.Warn("a wrong API token (logged once per burst of them from one address)", "remote", r.RemoteAddr)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="lapse"`)
			s.writeError(w, r, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized",
				Message: "missing or wrong Authorization: Bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerMatches reports whether header is "Bearer <token>" for the token
// whose SHA-256 is want. The scheme is case-insensitive (RFC 9110 §11.1:
// "bearer t" is the same credential). The tokens are compared as digests,
// which always have the same length: subtle.ConstantTimeCompare returns at
// once when lengths differ, so comparing the tokens themselves would let the
// answer's timing tell the token's length.
func bearerMatches(header string, want [sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimLeft(token, " ")))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// writeError maps errors to statuses and stable codes.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var inv *lapse.InvalidError
	var tooBig *http.MaxBytesError
	var refused *lapse.ReservationError
	switch {
	case errors.As(err, &ae):
	case operatorError(err) != nil:
		ae = operatorError(err)
	case errors.As(err, &tooBig):
		ae = &apiError{http.StatusRequestEntityTooLarge, "body_too_large", "request body is over 1 MiB"}
	case errors.As(err, &inv):
		ae = &apiError{http.StatusBadRequest, inv.Code, inv.Error()}
	case errors.Is(err, store.ErrInsufficientStock):
		ae = &apiError{http.StatusConflict, "insufficient_stock", "not enough stock for every item (or an unknown sku); nothing was reserved"}
	case errors.Is(err, store.ErrOrderExists):
		ae = &apiError{http.StatusConflict, "order_exists", "an order with this id already exists"}
	case errors.Is(err, store.ErrIdempotencyMismatch):
		ae = &apiError{http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used for a different request"}
	case errors.Is(err, store.ErrOrderExpired):
		ae = &apiError{http.StatusConflict, "order_expired", "the order's payment window has closed"}
	case errors.Is(err, store.ErrNotPending):
		ae = &apiError{http.StatusConflict, "order_not_pending", "the order is not PENDING"}
	case errors.Is(err, store.ErrPaymentIDUsed):
		ae = &apiError{http.StatusConflict, "payment_id_used", "this payment_id belongs to an earlier attempt of this order or to another order"}
	case errors.Is(err, context.DeadlineExceeded):
		ae = &apiError{http.StatusServiceUnavailable, "timeout",
			"the request did not finish in time (a row held by another transaction?); a create's outcome is unknown: retry it with the same Idempotency-Key"}
	case errors.Is(err, store.ErrReservationUsed):
		ae = &apiError{http.StatusConflict, "reservation_used", "another order holds this reservation_id; a reservation backs one order"}
	case errors.Is(err, store.ErrReservationReleased):
		ae = &apiError{http.StatusConflict, "reservation_released",
			"the stock reserved for this order id was given back after an earlier try failed; create the order under a new id"}
	case errors.As(err, &refused):
		code := "reservation_mismatch"
		if errors.Is(refused.Err, lapse.ErrReservationNotHeld) {
			code = "reservation_not_held"
		}
		ae = &apiError{http.StatusConflict, code, refused.Error() + "; nothing was written"}
	case errors.Is(err, lapse.ErrReservationUnknown):
		ae = &apiError{http.StatusServiceUnavailable, "reservation_unknown",
			"the inventory did not answer the reservation; retry the create with the same Idempotency-Key (nothing is held that lapse does not know about)"}
	case errors.Is(err, lapse.ErrRemoteStock):
		ae = &apiError{http.StatusConflict, "stock_remote", "the stock is held by the inventory service (--inventory): ask it"}
	case errors.Is(err, store.ErrInvalidCursor):
		ae = &apiError{http.StatusBadRequest, "invalid_cursor", "cursor is not one this API returned"}
	case errors.Is(err, store.ErrNotFound):
		ae = &apiError{http.StatusNotFound, "not_found", "no such resource"}
		if r.PathValue("sku") != "" {
			ae.Code, ae.Message = "sku_not_found", "no such sku"
		} else if r.PathValue("payment_id") != "" {
			ae.Code, ae.Message = "payment_not_found", "no payment attempt has this payment_id"
		} else if r.PathValue("id") != "" || r.URL.Path == "/v1/payments/notify" {
			ae.Code, ae.Message = "order_not_found", "no such order"
		}
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = &apiError{http.StatusInternalServerError, "internal", "internal error; see the server log"}
	}
	_ = writeJSON(w, ae.Status, map[string]any{"error": map[string]string{"code": ae.Code, "message": clipMessage(ae.Message)}})
}

// writeJSON answers v as JSON with status. v is encoded before anything is
// written, so a value that does not encode is answered 500 by the caller's
// error path, not cut off after a 200.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, err
		}
		return nil, badRequest("invalid_json", "reading body: %v", err)
	}
	return b, nil
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, err := DecodeCreateOrder(body)
	if err != nil {
		return err
	}
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	if err := plainText("Idempotency-Key", req.IdempotencyKey); err != nil {
		return err
	}
	res, err := s.svc.CreateOrder(r.Context(), req)
	if err != nil {
		return err
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/v1/orders/"+res.Order.ID)
	return writeJSON(w, http.StatusCreated, res.Order)
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "id")
	if err != nil {
		return err
	}
	o, err := s.svc.Get(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

func (s *server) listOrders(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := store.ListOrdersParams{Status: order.Status(q.Get("status")), Cursor: q.Get("cursor")}
	if err := checkCursor(p.Cursor); err != nil {
		return err
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return badRequest("invalid_field", "limit: want an integer between 1 and 500")
		}
		p.Limit = n
	}
	res, err := s.svc.List(r.Context(), p)
	if err != nil {
		return err
	}
	orders := res.Orders
	if orders == nil {
		orders = []order.Order{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"orders": orders, "next_cursor": res.NextCursor})
}

func (s *server) pay(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "id")
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	// The body is optional: {"payment_id": "…"} names the attempt (the id
	// the client uses at the gateway); without one lapse assigns
	// "<order id>-<attempt number>".
	var req struct {
		PaymentID *string `json:"payment_id"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
	}
	paymentID := ""
	if req.PaymentID != nil {
		if *req.PaymentID == "" {
			return &lapse.InvalidError{Code: "invalid_field", Field: "payment_id", Message: "want 1-128 printable ASCII characters, or no payment_id"}
		}
		paymentID = *req.PaymentID
	}
	o, err := s.svc.PayAttempt(r.Context(), id, paymentID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withPayBefore(o))
}

// withPayBefore is the pay answer: the order, and pay_before (= its
// expires_at), the absolute deadline for the client to give the gateway as
// the trade's own expiry (Stripe Checkout expires_at, Alipay and WeChat Pay
// time_expire), so that the gateway itself refuses a payment after it.
func withPayBefore(o order.Order) json.Marshaler { return payAnswer{o} }

type payAnswer struct{ o order.Order }

func (a payAnswer) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(a.o)
	if err != nil {
		return nil, err
	}
	pb, err := json.Marshal(order.FormatTime(a.o.ExpiresAt))
	if err != nil {
		return nil, err
	}
	// b is the order's object, never empty: its last byte is the '}'.
	b = append(b[:len(b)-1], `,"pay_before":`...)
	return append(append(b, pb...), '}'), nil
}

// extend moves the deadline of a PENDING order (lapse.Service.Extend).
func (s *server) extend(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "id")
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	at, err := decodeExtend(body, time.Now())
	if err != nil {
		return err
	}
	o, err := s.svc.Extend(r.Context(), id, at)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// notify is the gateway's callback. The signature is checked over the raw
// body before anything is parsed; a refused callback changes nothing.
func (s *server) notify(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	v, err := payment.VerifyCallback(r.Header.Get(payment.SignatureHeader), body, s.opts.CallbackSecrets, s.opts.Now(), s.opts.SignatureTolerance)
	if n := len(r.Header.Values(payment.SignatureHeader)); err == nil && n > 1 {
		// One message, one header: which of several is "the" signature
		// would be a guess, and a second header is one more spelling.
		err = fmt.Errorf("%w: %d %s headers", payment.ErrMalformed, n, payment.SignatureHeader)
	}
	if err != nil {
		if errors.Is(err, payment.ErrNoSecret) {
			return &apiError{http.StatusUnauthorized, "callbacks_disabled",
				"no callback secret is configured; start lapse with --callback-secret or LAPSE_CALLBACK_SECRET"}
		}
		s.log.Warn("payment callback refused", "err", err, "remote", r.RemoteAddr)
		return &apiError{http.StatusUnauthorized, "invalid_signature", err.Error()}
	}
	n, err := decodeNotify(body)
	if err != nil {
		return err
	}
	// The replay key is what the signature vouched for — the signed
	// timestamp and the body — never the header's text: the same message
	// sent again under another valid spelling (one more v1 during a secret
	// rotation) is recognised by the store and changes nothing.
	n.CallbackID = v.ID
	res, err := s.svc.Notify(r.Context(), n)
	if err != nil {
		return err
	}
	result := map[store.PaymentOutcome]string{
		store.OutcomeNoChange: "no_change", store.OutcomePaid: "paid",
		store.OutcomeRefundRequired: "refund_required", store.OutcomeFailed: "failed", store.OutcomeReplayed: "replayed",
		store.OutcomeConflict: "conflict",
	}[res.Outcome]
	return writeJSON(w, http.StatusOK, map[string]any{"result": result, "order": res.Order})
}

func (s *server) setStock(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b setStockBody
	if err := decodeStrict(body, &b); err != nil {
		return err
	}
	if b.Available == nil {
		return badRequest("invalid_field", "available: required")
	}
	name, err := pathText(r, "sku")
	if err != nil {
		return err
	}
	sku, err := s.svc.SetStock(r.Context(), name, *b.Available)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sku)
}

func (s *server) getSKU(w http.ResponseWriter, r *http.Request) error {
	name, err := pathText(r, "sku")
	if err != nil {
		return err
	}
	sku, err := s.svc.GetSKU(r.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sku)
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.Ready(r.Context()); err != nil {
		s.log.Warn("not ready", "err", err)
		if errors.Is(err, lapse.ErrRelayStopped) {
			return &apiError{http.StatusServiceUnavailable, "not_ready", "the outbox relay stopped: no event reaches any sink until lapse restarts (the server log says why)"}
		}
		return &apiError{http.StatusServiceUnavailable, "not_ready", "the store or the timer backend does not answer (the server log says which)"}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
