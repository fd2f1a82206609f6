package payment

import (
	"bytes"
	"fmt"
	"net/http"
)

// NewHTTPClient is the HTTP client an adapter sends its requests with when
// it is given none: a transport of its own (a clone of the default one), and
// no redirect followed — a redirect is an unexpected answer from a gateway,
// not something to follow (a POST would be replayed as a GET, a signed
// request sent to another host).
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport:     http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Snippet is the start of a gateway's answer, quoted, for an error message.
func Snippet(body []byte) string {
	const max = 200
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return "(empty body)"
	}
	if len(b) > max {
		return fmt.Sprintf("%q…", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
