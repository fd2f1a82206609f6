package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lapsehq/lapse/httpapi"
)

// Sessions. A session is a signed cookie, not a row anywhere: its value is
// a random id, its expiry and an HMAC-SHA256 of both under a key derived from
// the API token, so any instance sharing the token accepts it and rotating
// the token ends every session. Without a token (loopback only) the key is
// random per process and every visitor gets a session at once, which the
// CSRF token of its forms is bound to.
//
// A form's CSRF token is HMAC(key, "csrf" + session id): checked on every
// POST in constant time, beside the Origin check (httpapi.CheckOrigin
// without a token; with one, an Origin, when sent, must be this Host) and
// SameSite=Strict on the cookie. Logging out clears the cookie in this
// browser; a copied cookie stays valid until it expires (Options.SessionTTL).

const (
	sessionCookie = "lapse_session"
	idLen         = 16
	macLen        = sha256.Size
)

type session struct {
	id     []byte
	authed bool // a token was given (or none is configured)
}

type keys struct {
	mac   []byte // signs session cookies and CSRF tokens
	token [sha256.Size]byte
	has   bool // an API token is configured
}

func newKeys(token string) (keys, error) {
	k := keys{has: token != ""}
	if k.has {
		k.token = sha256.Sum256([]byte(token))
		m := hmac.New(sha256.New, []byte("lapse dashboard session key v1"))
		m.Write([]byte(token))
		k.mac = m.Sum(nil)
		return k, nil
	}
	k.mac = make([]byte, 32)
	if _, err := rand.Read(k.mac); err != nil {
		return keys{}, err
	}
	return k, nil
}

func (k keys) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, k.mac)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// tokenOK compares a token given at login with the configured one, in
// constant time (as digests, so their lengths leak nothing either).
func (k keys) tokenOK(given string) bool {
	d := sha256.Sum256([]byte(given))
	return k.has && subtle.ConstantTimeCompare(d[:], k.token[:]) == 1
}

// cookieValue is id | authed | expiry | mac, base64url.
func (k keys) cookieValue(s session, exp time.Time) string {
	b := make([]byte, 0, idLen+1+8+macLen)
	b = append(b, s.id...)
	if s.authed {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(exp.Unix()))
	b = append(b, k.sign([]byte("session"), b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// session reads r's session cookie: ok=false when there is none, or it is
// forged, malformed or expired.
func (k keys) session(r *http.Request, now time.Time) (session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != idLen+1+8+macLen {
		return session{}, false
	}
	body, mac := b[:idLen+1+8], b[idLen+1+8:]
	if !hmac.Equal(mac, k.sign([]byte("session"), body)) {
		return session{}, false
	}
	if exp := time.Unix(int64(binary.BigEndian.Uint64(body[idLen+1:])), 0); !now.Before(exp) {
		return session{}, false
	}
	return session{id: body[:idLen], authed: body[idLen] == 1}, true
}

// csrf is the CSRF token of a session's forms.
func (k keys) csrf(s session) string {
	return base64.RawURLEncoding.EncodeToString(k.sign([]byte("csrf"), s.id))
}

func (k keys) csrfOK(s session, given string) bool {
	return subtle.ConstantTimeCompare([]byte(given), []byte(k.csrf(s))) == 1
}

func newSession(authed bool) (session, error) {
	id := make([]byte, idLen)
	if _, err := rand.Read(id); err != nil {
		return session{}, err
	}
	return session{id: id, authed: authed}, nil
}

// setSession writes the session cookie: HttpOnly, SameSite=Strict, Secure
// when the request came over TLS, for the whole site (the dashboard's pages
// are / and /ui/…).
func (h *Handler) setSession(w http.ResponseWriter, r *http.Request, s session) {
	exp := h.now().Add(h.opts.SessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.keys.cookieValue(s, exp), Path: "/",
		Expires: exp, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

var errForeign = errors.New("this request comes from another site")

// checkOrigin refuses what a page of another site could send: without a
// token, the API's own guard (Host and Origin); with one, an Origin other
// than this Host, or a fetch the browser marks cross-site.
func (h *Handler) checkOrigin(r *http.Request) error {
	if !h.keys.has {
		return httpapi.CheckOrigin(r)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil // a link from elsewhere; SameSite=Strict keeps the session out of it
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errForeign
	}
	for _, o := range r.Header.Values("Origin") {
		u, err := url.Parse(o)
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if err != nil || u.Scheme != scheme || !strings.EqualFold(u.Host, r.Host) {
			return errForeign
		}
	}
	return nil
}
