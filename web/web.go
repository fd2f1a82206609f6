// Package web is lapse's dashboard: an overview of orders, timers, lateness
// and stuck work, the orders and one order's story, and the SKUs, served
// by `lapse serve` at / and /ui/… beside the API.
//
// Pages are rendered on the server with html/template (everything escaped);
// the charts are uPlot, vendored under static/vendor with its licence, and
// one script file of ours; nothing is fetched from anywhere else, and the
// Content-Security-Policy says so (no inline script or style). The overview
// refreshes itself by fetching its own content again (?fragment=live,
// rendered here like the page) and swapping in its live parts. Every count
// is a store.Dashboard read bounded by an index range (docs/dashboard.md says
// what each costs).
//
// With an API token the dashboard asks for it once (a login form) and keeps
// a signed session cookie (auth.go); without one it is, like the API,
// reachable on a loopback address only, behind the API's Host/Origin guard.
// Every form posts a CSRF token bound to the session.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/plaintext"
	"github.com/lapsehq/lapse/store"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Options configures the dashboard.
type Options struct {
	// APIToken, when set, is asked for at login (the API's --api-token).
	APIToken string
	// SessionTTL is how long a session lasts. Defaults to 12 hours.
	SessionTTL time.Duration
	// AuditTimeout bounds an audit run from the dashboard. Defaults to 25
	// seconds: under lapse serve's 30 s write timeout, so the page answers.
	AuditTimeout time.Duration
	// SampleEvery is how often Run samples the lateness histogram.
	// Defaults to 15 seconds.
	SampleEvery time.Duration
	// CountCap bounds every count of the overview (store.OverviewParams).
	CountCap int64
	// RefreshEvery is how often an open overview fetches its counts,
	// charts, health and audit again (unless paused in the browser).
	// Defaults to 5 seconds.
	RefreshEvery time.Duration
	// Now is the clock for sessions. Defaults to time.Now.
	Now func() time.Time
	// AuthThrottle limits wrong tokens at the login per remote address
	// (429 past its budget). nil: one of the dashboard's own. lapse serve
	// shares the API's, so an address has one budget for both.
	AuthThrottle *httpapi.AuthThrottle
	Logger       *slog.Logger
}

// MinTokenLen is the shortest APIToken New accepts: 16 random bytes cannot
// be guessed online, a word can.
const MinTokenLen = 16

// Handler serves the dashboard.
type Handler struct {
	svc   *lapse.Service
	opts  Options
	log   *slog.Logger
	keys  keys
	pages map[string]*template.Template
	mux   *http.ServeMux
	lat   *sampler

	auditMu   sync.Mutex // held while an audit runs: one at a time
	lastMu    sync.Mutex
	lastAudit *auditResult
}

type auditResult struct {
	At      time.Time
	Took    time.Duration
	Err     string
	OK      bool
	Checks  []store.AuditCheck
	Invalid int64 // violations
	Warn    int64 // warnings
}

// New returns the dashboard of svc.
func New(svc *lapse.Service, opts Options) (*Handler, error) {
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	if opts.AuditTimeout <= 0 {
		opts.AuditTimeout = 25 * time.Second
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = 15 * time.Second
	}
	if opts.RefreshEvery <= 0 {
		opts.RefreshEvery = 5 * time.Second
	}
	if opts.CountCap <= 0 {
		opts.CountCap = store.DefaultCountCap
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AuthThrottle == nil {
		opts.AuthThrottle = httpapi.NewAuthThrottle(httpapi.AuthThrottleConfig{})
	}
	if n := len(opts.APIToken); n > 0 && n < MinTokenLen {
		return nil, fmt.Errorf("web: an API token of %d bytes: want at least %d", n, MinTokenLen)
	}
	k, err := newKeys(opts.APIToken)
	if err != nil {
		return nil, fmt.Errorf("web: session key: %w", err)
	}
	h := &Handler{svc: svc, opts: opts, log: opts.Logger, keys: k, lat: newSampler(svc.Registry())}
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("web: static files: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticHandler(static)))
	mux.HandleFunc("GET /ui/login", h.loginForm)
	mux.HandleFunc("POST /ui/login", h.login)
	page := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, s session) error) {
		mux.Handle(pattern, h.authed(fn))
	}
	page("POST /ui/logout", h.logout)
	page("GET /{$}", h.overview)
	page("GET /ui/{$}", h.overview)
	page("POST /ui/audit", h.runAudit)
	page("GET /ui/search", h.search)
	page("GET /ui/orders", h.orders)
	page("GET /ui/orders/{id}", h.order)
	page("GET /ui/orders/{id}/{action}", h.confirm)
	page("POST /ui/orders/{id}/{action}", h.act)
	page("GET /ui/skus", h.skus)
	page("GET /ui/events", h.events)
	page("GET /ui/tasks", h.tasks)
	page("GET /ui/hook-failures", h.hookFailures)
	page("GET /ui/commands", h.commands)
	page("GET /ui/refunds", h.refunds)
	for _, kind := range []string{"events", "tasks", "commands", "refunds"} {
		page("GET /ui/"+kind+"/retry", h.retryConfirm(kind))
		page("POST /ui/"+kind+"/retry", h.retry(kind))
	}
	h.mux = mux
	return h, nil
}

// Run samples the lateness histogram until ctx ends.
func (h *Handler) Run(ctx context.Context) {
	t := time.NewTicker(h.opts.SampleEvery)
	defer t.Stop()
	h.lat.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.lat.sample(now)
		}
	}
}

func (h *Handler) now() time.Time { return h.opts.Now() }

// csp allows nothing but this server's own files: no inline script or
// style, no frames, forms posted here only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	if err := h.checkOrigin(r); err != nil {
		h.log.Warn("dashboard request from another origin refused", "host", r.Host, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
		return
	}
	if err := checkText(r); err != nil {
		s, ok := h.keys.session(r, h.now())
		if !ok || (h.keys.has && !s.authed) {
			s = session{}
		}
		h.fail(w, r, s, http.StatusBadRequest, "invalid_field: "+err.Error())
		return
	}
	h.mux.ServeHTTP(w, r)
}

// checkText refuses, before any page runs, a request whose path (every
// path value is a piece of it), query or form holds a NUL or invalid UTF-8
// (internal/plaintext, the API's check): such text would reach the store,
// where PostgreSQL refuses it with an error that was a 500.
func checkText(r *http.Request) error {
	if err := plaintext.Check("the path", r.URL.Path); err != nil {
		return err
	}
	// ParseQuery keeps the pairs it could read when it meets a bad escape.
	query, _ := url.ParseQuery(r.URL.RawQuery)
	if err := plainValues("query", query); err != nil {
		return err
	}
	if r.Method != http.MethodPost {
		return nil
	}
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("the form does not parse: %w", err)
	}
	return plainValues("form", r.PostForm)
}

func plainValues(where string, vals url.Values) error {
	for k, vs := range vals {
		if err := plaintext.Check("a "+where+" parameter's name", k); err != nil {
			return err
		}
		for _, v := range vs {
			if err := plaintext.Check(where+" parameter "+k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Paths says whether a path is the dashboard's (/, /ui and /ui/…), for a
// server that mounts it beside the API.
func Paths(path string) bool {
	return path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

func staticHandler(files fs.FS) http.Handler {
	fsrv := http.FileServer(http.FS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		fsrv.ServeHTTP(w, r)
	})
}

// authed runs fn with the request's session: with a token, only a session
// that logged in (others go to the login form); without, any session, one
// made on the spot for a first visit. A POST must carry the session's CSRF
// token.
func (h *Handler) authed(fn func(w http.ResponseWriter, r *http.Request, s session) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.keys.session(r, h.now())
		if h.keys.has && (!ok || !s.authed) {
			if r.Method != http.MethodGet {
				h.fail(w, r, session{}, http.StatusUnauthorized, "log in first")
				return
			}
			http.Redirect(w, r, "/ui/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if !ok {
			var err error
			if s, err = newSession(true); err != nil {
				h.fail(w, r, session{}, http.StatusInternalServerError, "cannot make a session")
				return
			}
			h.setSession(w, r, s)
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil || !h.keys.csrfOK(s, r.PostForm.Get("csrf")) {
				h.fail(w, r, s, http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		if err := fn(w, r.WithContext(ctx), s); err != nil {
			h.log.Error("dashboard page", "path", r.URL.Path, "err", err)
			h.fail(w, r, s, http.StatusInternalServerError, "something went wrong: the server log says what")
		}
	})
}

// errorView is the error page.
type errorView struct {
	base
	Status  int
	Message string
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s session, status int, msg string) {
	w.WriteHeader(status)
	if err := h.render(w, "error", errorView{base: h.base(r, s, "Error"), Status: status, Message: msg}); err != nil {
		h.log.Error("render the error page", "err", err)
	}
}

// base is what every page's layout shows.
type base struct {
	Title    string
	Nav      string
	CSRF     string
	LoggedIn bool // with a token: show the logout button
	Flash    string
	Remote   bool
	// Commanded: an order service owns the orders (order-service mode).
	Commanded bool
	ServerNow time.Time
}

func (h *Handler) base(r *http.Request, s session, title string) base {
	b := base{Title: title, Nav: title, LoggedIn: h.keys.has && s.authed, Remote: h.svc.Config().Inventory != nil,
		Commanded: h.svc.HasOrderService(), ServerNow: h.now().UTC()}
	if s.id != nil {
		b.CSRF = h.keys.csrf(s)
	}
	b.Flash = flashes[r.URL.Query().Get("done")]
	return b
}

// flashes are the fixed messages a redirect after a form may ask for.
var flashes = map[string]string{
	"cancelled":                 "The order was cancelled.",
	"checked":                   "The gateway was asked; see the result below.",
	"audit":                     "The audit ran; its result is below.",
	"audit-busy":                "An audit is already running; its result will show here.",
	"not-pending":               "The order is not PENDING any more: nothing was cancelled.",
	"extended":                  "The order's deadline moved; its timer follows.",
	"expired":                   "The order's payment window has closed: its deadline cannot move any more.",
	"not-pending-extend":        "The order is not PENDING any more: its deadline did not move.",
	"operator-cancelled":        "The order was cancelled as operator.",
	"order-service-owns-status": "The order service owns this order's status: cancel it there. Nothing was changed.",
	"not-open":                  "The order is neither PENDING nor PAYING any more: nothing was cancelled.",
	"no-gateway":                "No payment gateway is configured: lapse cannot close the trade. Close it by hand, then cancel with that acknowledgement.",
	"already-paid":              "Closing the trade found it paid: the payment is recorded and the order was not cancelled.",
	"close-failed":              "Closing the trade at the gateway failed: nothing was changed. Try again, or close it by hand and cancel with that acknowledgement.",
	"retried":                   "Sent again: the dead entries named are due now.",
	"retried-none":              "Nothing was sent again: none of those is DEAD any more.",
	"refunded":                  "The payment attempt was refunded at the gateway: it is REFUNDED, and order.refunded was written.",
	"marked-refunded":           "The refund made by hand was recorded, with your note: the attempt is REFUNDED, and order.refunded was written.",
	"refund-pending":            "The gateway accepted the refund and is processing it: the attempt stays REFUND_REQUIRED until it is done, and lapse asks again.",
	"not-refundable":            "The payment attempt owes no money back (it is not REFUND_REQUIRED any more): nothing was changed.",
	"no-refunder":               "The payment gateway cannot refund: give the money back by hand, then mark the attempt refunded with a note.",
	"refund-failed":             "The gateway did not refund: nothing was recorded. Try again, or give the money back by hand and mark it refunded.",
}

func (h *Handler) render(w http.ResponseWriter, name string, data any) error {
	return h.execute(w, name, "layout", data)
}

// renderFragment renders a page's content alone, without the layout: the
// part of the overview app.js swaps in.
func (h *Handler) renderFragment(w http.ResponseWriter, name string, data any) error {
	return h.execute(w, name, "content", data)
}

// execute renders the template part of page name, whole before a byte is
// written, so a template error is a clean 500.
func (h *Handler) execute(w http.ResponseWriter, name, part string, data any) error {
	t, ok := h.pages[name]
	if !ok {
		return fmt.Errorf("web: no page %q", name)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, part, data); err != nil {
		return fmt.Errorf("web: render %s (%s): %w", name, part, err)
	}
	_, err := w.Write([]byte(buf.String()))
	return err
}

var pageNames = []string{"overview", "orders", "order", "confirm", "retry", "skus", "events", "tasks", "hookfailures", "commands", "refunds", "login", "error"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("web: parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

var errNotFound = errors.New("not found")

// Mount serves the dashboard's paths (Paths) with dash and every other
// path with api, so the API's answers, its 404 and 405 included, stay as
// they are.
func Mount(api, dash http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Paths(r.URL.Path) {
			dash.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
