// Package redact hides the secrets a URL carries, so that URLs can be
// logged and put in error messages: lapse's store, timer and gateway URLs
// routinely hold a password (postgres://lapse:pw@db/lapse,
// redis://:pw@cache:6379/0, http://user:pw@gateway). Every place that shows
// a configured URL passes it through URL.
package redact

import (
	"net/url"
	"strings"
)

// mask replaces every secret URL hides. It is what (*url.URL).Redacted
// writes too, so a URL redacted here reads like one redacted by net/url.
const mask = "xxxxx"

// URL returns u with the password of its userinfo and the values of its
// secret-looking query parameters (password, token, secret, key, …)
// replaced by mask. Anything else is returned byte for byte, so a URL with
// no secret in it is shown as it was given.
//
// It works on the text, not on a parsed url.URL: the inputs are often not
// valid URLs (Redis Cluster's redis-cluster://h1:7000,h2:7001, a MySQL DSN
// without a scheme, a password with an unescaped '@' or '/'), and a parse
// error must not make a secret leak. Where it cannot tell the userinfo from
// the rest, it hides more rather than less: text up to the last '@' that has
// a ':' in it is always read as user and password, even an '@' in a path or
// query ("redis://h:6379/0?x=a@b" is shown as "redis://h:xxxxx@b").
func URL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if ok {
		scheme += "://"
	} else {
		scheme, rest = "", u
	}
	// The userinfo ends at the last '@' before the host. Passwords are
	// often written with a raw '@', '/', '?' or ':' in them, which a parser
	// would take for the end of the authority: the last '@' of all is taken
	// instead, so whatever precedes it past the first ':' is hidden.
	at := strings.LastIndexByte(rest, '@')
	var out strings.Builder
	out.WriteString(scheme)
	if at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			out.WriteString(user + ":" + mask)
			rest = rest[at:]
		}
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		out.WriteString(rest)
		return out.String()
	}
	out.WriteString(rest[:q+1])
	// Parameters are split at '&' and at any further '?', so that a
	// malformed query cannot hide a secret parameter inside another's value.
	params := rest[q+1:]
	for len(params) > 0 {
		end := strings.IndexAny(params, "&?")
		param, sep := params, ""
		if end >= 0 {
			param, sep, params = params[:end], params[end:end+1], params[end+1:]
		} else {
			params = ""
		}
		if key, _, hasValue := strings.Cut(param, "="); hasValue && secretKey(key) {
			param = key + "=" + mask
		}
		out.WriteString(param + sep)
	}
	return out.String()
}

// SecretParam reports whether a query parameter of this name (raw or
// percent-encoded) is one URL hides: its name says its value is a
// credential. Code that derives something shown from a URL's query (a sink's
// name) leaves these parameters out.
func SecretParam(name string) bool { return secretKey(name) }

// secretKey reports whether a query parameter's name says its value is a
// credential: pgx's password and sslpassword, a gateway's token or
// client_secret, an api_key.
func secretKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(key)
	for _, s := range []string{"pass", "pwd", "secret", "token", "key", "auth", "credential", "signature"} {
		if strings.Contains(key, s) {
			return true
		}
	}
	return false
}
