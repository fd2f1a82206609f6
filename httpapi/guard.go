package httpapi

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
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
