package httpapi

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/lapsehq/lapse/internal/plaintext"
	"github.com/lapsehq/lapse/store"
)

// A browser lets any web page send requests to lapse: a form posted across
// sites, or a page whose host name the attacker re-points at 127.0.0.1 (DNS
// rebinding), which also lets it read the answers. With an API token that
// gets nowhere: no page can add the Authorization header. Without one,
// lapse refuses what only a browser led by another site would send: a body
// that is not declared JSON (a cross-site form or fetch can only send
// text/plain, form and multipart bodies without asking first), a Host that
// is not the address lapse was reached at (a rebound name), and an Origin
// that is not lapse's own. Clients that are not browsers — curl, the
// gateway, other services — send none of these.

// requireJSON refuses a body not declared application/json (a charset
// parameter other than UTF-8 included: JSON is UTF-8).
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
		Message: "want Content-Type: application/json, got " + echo(ct)}
}

// hasBody reports whether r carries a body (or may: -1 is a chunked one).
func hasBody(r *http.Request) bool { return r.ContentLength != 0 }

// sameOrigin refuses a request whose Host or Origin names another site; it
// wraps the whole API when no API token is set.
func (s *server) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkOrigin(r); err != nil {
			s.log.Warn("request from another origin refused", "host", r.Host, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOrigin accepts a Host that is the address the request arrived at
// (net/http's LocalAddrContextKey: the listen address, with the port the
// listener really has) or localhost at that port when that address is a
// loopback one, and an Origin, if any, of the same scheme, host and port.
func checkOrigin(r *http.Request) error {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return &apiError{Status: http.StatusForbidden, Code: "foreign_origin",
			Message: "cannot tell the address this request arrived at, so its Host cannot be checked; serve the API with net/http or set an API token"}
	}
	ip, port, err := net.SplitHostPort(local.String())
	if err != nil {
		return &apiError{Status: http.StatusForbidden, Code: "foreign_origin",
			Message: "cannot tell the address this request arrived at; set an API token"}
	}
	own := func(hostport string, defaultPort string) bool {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			h, p = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), defaultPort
		}
		if p != port {
			return false
		}
		if strings.EqualFold(h, "localhost") {
			addr := net.ParseIP(ip)
			return addr != nil && addr.IsLoopback()
		}
		a, b := net.ParseIP(h), net.ParseIP(ip)
		return a != nil && b != nil && a.Equal(b) && h == a.String()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	defaultPort := map[string]string{"http": "80", "https": "443"}[scheme]
	if !own(r.Host, defaultPort) {
		return &apiError{Status: http.StatusForbidden, Code: "foreign_origin",
			Message: "Host " + echo(r.Host) + " is not this server's address (" + local.String() + " or localhost); without an API token lapse answers only requests addressed to it"}
	}
	for _, o := range r.Header.Values("Origin") {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != scheme || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" || !own(u.Host, defaultPort) {
			return &apiError{Status: http.StatusForbidden, Code: "foreign_origin",
				Message: "Origin " + echo(o) + " is not this server; without an API token lapse refuses requests made by other sites' pages"}
		}
	}
	return nil
}

// Text that reaches the store must be UTF-8 without NUL: PostgreSQL refuses
// anything else in a text column or parameter, and an error there is a 500
// for what is the client's mistake. Path ids, the Idempotency-Key and list
// cursors are checked here, at the edge, with the check the dashboard runs
// too (internal/plaintext); JSON bodies in checkTokens.

// plainText refuses s with 400 invalid_field unless it is valid UTF-8
// without a NUL.
func plainText(field, s string) error {
	if err := plaintext.Check(field, s); err != nil {
		return badRequest("invalid_field", "%s", err.Error())
	}
	return nil
}

// pathText is r.PathValue(name), refused unless it is plain text.
func pathText(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	return v, plainText(name, v)
}

// maxCursorMillis is the end of year 9999, the last instant every store's
// time type holds: a cursor beyond it was not written by this API.
const maxCursorMillis = 253402300799999

// checkCursor refuses a cursor this API did not write, before any store
// sees it: one that does not decode, that is not in the one spelling
// store.EncodeCursor gives its contents, whose time is out of range, or
// whose id is not plain text.
func checkCursor(c string) error {
	if c == "" {
		return nil
	}
	refuse := &apiError{Status: http.StatusBadRequest, Code: "invalid_cursor", Message: "cursor is not one this API returned"}
	t, id, err := store.DecodeCursor(c)
	if err != nil || store.EncodeCursor(t, id) != c {
		return refuse
	}
	if ms := t.UnixMilli(); ms < 0 || ms > maxCursorMillis || plainText("cursor", id) != nil {
		return refuse
	}
	return nil
}

// CheckOrigin runs the guard the API runs without a token on r, for the
// handlers served beside the API (the dashboard, package web): nil when
// r's Host is the address it arrived at (or localhost at that port) and
// its Origin, if any, is that same server.
func CheckOrigin(r *http.Request) error { return checkOrigin(r) }
