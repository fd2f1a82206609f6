package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse/internal/plaintext"
	"github.com/lapsehq/lapse/store"
)

// A browser lets any web page send requests to lapse: a form posted across
// sites, or a page whose host name the attacker re-points at 127.0.0.1 (DNS
// rebinding), which also lets it read the answers. With an API token that
// gets nowhere: no page can add the Authorization header. Without one,
// lapse refuses what only a browser led by another site would send
// (package internal/sameorigin, shared with the reference inventory): a
// body that is not declared JSON, a Host that is not the address lapse was
// reached at (a rebound name), and an Origin that is not lapse's own.

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
