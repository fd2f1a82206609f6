// Package endpoint holds what lapse's HTTP senders share about the URL they
// send to and the answers they get: the webhook sink (outbox/webhook) and
// the order-service commands (ordersvc). An endpoint's URL may hold a token,
// so nothing here quotes one whole.
package endpoint

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Parse checks an endpoint URL and returns it with the form errors and logs
// show: scheme://host/path, without user info, query or fragment. what names
// the URL in errors ("webhook URL"); insecureFlag is the flag that allows
// http:// to a host other than loopback (a clear-text URL is refused
// without it, as is user info: the signature authenticates lapse).
func Parse(raw, what string, insecure bool, insecureFlag string) (*url.URL, string, error) {
	if raw == "" {
		return nil, "", fmt.Errorf("%s: no URL", what)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, Cause(err))
	}
	// Hosts are case-insensitive: the name is the same however the flag
	// spells it.
	display := u.Scheme + "://" + strings.ToLower(u.Host) + u.EscapedPath()
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, "", fmt.Errorf("%s %s: want https:// (or http:// to a loopback address)", what, display)
	case u.Host == "" || u.Opaque != "":
		return nil, "", fmt.Errorf("%s %s: no host", what, display)
	case u.User != nil:
		return nil, "", fmt.Errorf("%s %s: user info (user:password@) is not supported; the signature authenticates lapse to the endpoint", what, display)
	case u.Scheme == "http" && !insecure && !IsLoopback(u.Hostname()):
		return nil, "", fmt.Errorf("%s %s: http:// sends order data in clear text; use https://, or %s to allow it", what, display, insecureFlag)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, display, nil
}

// IsLoopback reports whether host is localhost or a loopback address
// (127.0.0.0/8, ::1).
func IsLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// Cause strips the *url.Error of net/url and net/http, whose message quotes
// the URL.
func Cause(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// RetryAfter reads a Retry-After header, delay-seconds or an HTTP-date,
// capped at limit (waiting longer than the sender's maximum age is
// pointless, and the cap keeps a huge value from overflowing a Duration).
// Zero means absent, unreadable or already past.
func RetryAfter(v string, now time.Time, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs >= uint64(limit/time.Second) {
			return limit
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), limit)
	}
	return 0
}

// Retryable reports whether an HTTP status may succeed if sent again: 408,
// 409, 429 and every status outside 4xx (5xx, and a redirect that is not
// followed). Any other 4xx is a refusal for good.
func Retryable(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooManyRequests:
		return true
	case code >= 400 && code <= 499:
		return false
	}
	return true
}
