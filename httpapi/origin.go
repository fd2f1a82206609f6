package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse/internal/sameorigin"
)

// The checks of guard.go, shared with the reference inventory (package
// internal/sameorigin), answered in the API's error envelope.

// requireJSON refuses a body not declared application/json (a charset
// parameter other than UTF-8 included: JSON is UTF-8).
func requireJSON(r *http.Request) error {
	if e := sameorigin.RequireJSON(r); e != nil {
		return &apiError{Status: e.Status, Code: e.Code, Message: e.Message}
	}
	return nil
}

// originGuard is the guard of the API without a token: the address lapse
// was reached at, or localhost at that port when it is a loopback one.
var originGuard = sameorigin.Guard{Hint: "without an API token lapse answers only requests addressed to its listen address or localhost, from no other site's page; set --api-token to be reached otherwise"}

// checkOrigin accepts a Host that is the address the request arrived at
// (net/http's LocalAddrContextKey: the listen address, with the port the
// listener really has) or localhost at that port when that address is a
// loopback one, and an Origin, if any, of the same scheme, host and port.
func checkOrigin(r *http.Request) error {
	if e := originGuard.Check(r); e != nil {
		return &apiError{Status: e.Status, Code: e.Code, Message: e.Message}
	}
	return nil
}
