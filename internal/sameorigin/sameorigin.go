// Package sameorigin refuses the requests a browser sends for another
// site's page, for servers that answer without authentication: lapse's API
// without --api-token (and its dashboard), and the reference inventory.
//
// A browser lets any web page send requests to such a server: a form
// posted across sites, or a page whose host name the attacker re-points at
// 127.0.0.1 (DNS rebinding), which also lets it read the answers. What only
// a browser led by another site sends is refused: a body that is not
// declared JSON (a cross-site form or fetch can only send text/plain, form
// and multipart bodies without asking first), a Host that is not the
// address the server was reached at (a rebound name), and an Origin that is
// not the server's own. Clients that are not browsers — curl, lapse, other
// services — send none of these.
package sameorigin

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The refusals' error codes.
const (
	CodeForeignOrigin        = "foreign_origin"
	CodeUnsupportedMediaType = "unsupported_media_type"
)

// Error is a refusal: the HTTP status to answer, a stable code and a
// message for the client.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// RequireJSON refuses (415) a request whose body is not declared
// application/json; a charset parameter other than UTF-8 is refused too
// (JSON is UTF-8). nil when it is.
func RequireJSON(r *http.Request) *Error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &Error{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
		Message: "want Content-Type: application/json, got " + quote(ct)}
}

// Guard checks a request's Host and Origin.
type Guard struct {
	// Hosts are names the server is also addressed by, beside the address
	// a request arrived at and localhost (when that address is loopback):
	// "name" at any port, "name:port" at that port only.
	Hosts []string
	// Hint ends each refusal's message: how a client that is not a browser
	// of another site gets answered.
	Hint string
}

// Check accepts a Host that is the address the request arrived at
// (net/http's LocalAddrContextKey: the listen address, with the port the
// listener really has), localhost at that port when that address is a
// loopback one, or one of g.Hosts, and an Origin, if any, of the same
// scheme naming one of those; else a 403 foreign_origin. nil when it
// passes.
func (g Guard) Check(r *http.Request) *Error {
	refuse := func(msg string) *Error {
		if g.Hint != "" {
			msg += "; " + g.Hint
		}
		return &Error{Status: http.StatusForbidden, Code: CodeForeignOrigin, Message: msg}
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return refuse("cannot tell the address this request arrived at, so its Host cannot be checked (serve it with net/http)")
	}
	ip, port, err := net.SplitHostPort(local.String())
	if err != nil {
		return refuse("cannot tell the address this request arrived at")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	defaultPort := map[string]string{"http": "80", "https": "443"}[scheme]
	own := func(hostport string) bool {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			h, p = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), defaultPort
		}
		for _, a := range g.Hosts {
			if ah, ap, err := net.SplitHostPort(a); err == nil {
				if strings.EqualFold(ah, h) && ap == p {
					return true
				}
			} else if strings.EqualFold(a, h) {
				return true
			}
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
	if !own(r.Host) {
		return refuse("Host " + quote(r.Host) + " is not this server's address (" + local.String() + " or localhost)")
	}
	for _, o := range r.Header.Values("Origin") {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != scheme || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" || !own(u.Host) {
			return refuse("Origin " + quote(o) + " is not this server: requests made by other sites' pages are refused")
		}
	}
	return nil
}

// maxQuote is the most bytes of a request's value a message quotes.
const maxQuote = 64

// quote is s quoted for a message, cut short at a character boundary when
// long: the values quoted come from the request.
func quote(s string) string {
	if len(s) <= maxQuote {
		return strconv.Quote(s)
	}
	cut := maxQuote
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
