// Package payment holds what lapse shares with payment gateways: the
// signature on their callbacks (and, later, the gateway client that queries
// and closes trades).
package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries the callback signature:
// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + raw body)>`, with
// further `,v1=…` parts when the sender signs with more than one secret.
//
// The header has exactly one spelling per message and signature set: t
// first, in decimal without sign or leading zeros; then one or more distinct
// v1 of exactly 64 lower-case hex digits; nothing else, no spaces. A looser
// parser would accept many spellings of one signature (upper-case hex, a
// repeated part, an unknown pair, a space after a comma), and anything keyed
// on the header's text would take each spelling for a new message.
const SignatureHeader = "Lapse-Signature"

// DefaultTolerance is how far a signature's timestamp may be from now (a
// replay window): older callbacks are refused.
const DefaultTolerance = 5 * time.Minute

// Signature errors; all of them mean "refuse the callback, change nothing".
var (
	ErrNoSecret         = errors.New("payment: no callback secret configured")
	ErrMissingSignature = errors.New("payment: missing signature")
	ErrMalformed        = errors.New("payment: malformed signature header")
	ErrStale            = errors.New("payment: signature timestamp outside the tolerance")
	ErrMismatch         = errors.New("payment: signature does not match")
)

// Sign returns the header value for body signed with secret at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verified is what a valid signature vouches for.
type Verified struct {
	// Timestamp is the signed time (whole seconds).
	Timestamp time.Time
	// ID identifies the signed message: the hex SHA-256 of "<t>." + body, the
	// very bytes the HMAC covers. It depends on nothing else in the header, so
	// the same message sent again under another valid spelling of its
	// signature (one more v1 from a second secret, the v1s in another order)
	// has the same ID. It is the key a replay is recognised by.
	ID string
}

// Verify checks header against body; see VerifyCallback.
func Verify(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) error {
	_, err := VerifyCallback(header, body, secrets, now, tolerance)
	return err
}

// VerifyCallback checks header against body and returns what it vouches for.
// Any of secrets may have signed it (two are accepted while a secret is
// rotated). The header must be in the one spelling SignatureHeader describes,
// else ErrMalformed. The timestamp must be within tolerance of now, in either
// direction. Comparison is constant-time. Empty secrets are ignored (anyone
// can sign with an empty key): with no non-empty secret, VerifyCallback
// returns ErrNoSecret.
func VerifyCallback(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verified, error) {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s []byte) bool { return len(s) == 0 })
	if len(secrets) == 0 {
		return Verified{}, ErrNoSecret
	}
	if header == "" {
		return Verified{}, ErrMissingSignature
	}
	ts, sec, sigs, err := parseHeader(header)
	if err != nil {
		return Verified{}, err
	}
	age := now.Sub(time.Unix(sec, 0))
	if age > tolerance || age < -tolerance {
		return Verified{}, fmt.Errorf("%w: signed %s ago", ErrStale, age.Round(time.Second))
	}
	for _, secret := range secrets {
		want := mac(secret, ts, body)
		for _, got := range sigs {
			if hmac.Equal(want, got) {
				id := sha256.New()
				id.Write([]byte(ts))
				id.Write([]byte{'.'})
				id.Write(body)
				return Verified{Timestamp: time.Unix(sec, 0), ID: hex.EncodeToString(id.Sum(nil))}, nil
			}
		}
	}
	return Verified{}, ErrMismatch
}

// maxSignatures bounds the v1 parts of one header: a sender holds a secret
// or two, and each part costs a comparison per configured secret.
const maxSignatures = 8

// parseHeader reads t=<ts>,v1=<hex>[,v1=<hex>…] strictly: see SignatureHeader.
func parseHeader(header string) (ts string, sec int64, sigs [][]byte, err error) {
	parts := strings.Split(header, ",")
	ts, ok := strings.CutPrefix(parts[0], "t=")
	if !ok {
		return "", 0, nil, fmt.Errorf("%w: want t=<unix seconds> first", ErrMalformed)
	}
	if !canonicalSeconds(ts) {
		return "", 0, nil, fmt.Errorf("%w: t is not unix seconds in decimal without sign or leading zeros", ErrMalformed)
	}
	sec, err = strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", 0, nil, fmt.Errorf("%w: t out of range", ErrMalformed)
	}
	if len(parts) == 1 {
		return "", 0, nil, fmt.Errorf("%w: no v1 signature", ErrMalformed)
	}
	if len(parts)-1 > maxSignatures {
		return "", 0, nil, fmt.Errorf("%w: more than %d v1 signatures", ErrMalformed, maxSignatures)
	}
	for i, part := range parts[1:] {
		v, ok := strings.CutPrefix(part, "v1=")
		if !ok {
			return "", 0, nil, fmt.Errorf("%w: part %d is not v1=<hex> (only t and v1 are allowed, without spaces)", ErrMalformed, i+2)
		}
		if len(v) != 2*sha256.Size || !lowerHex(v) {
			return "", 0, nil, fmt.Errorf("%w: v1 is not %d lower-case hex digits", ErrMalformed, 2*sha256.Size)
		}
		if slices.Contains(parts[1:i+1], part) {
			return "", 0, nil, fmt.Errorf("%w: the same v1 twice", ErrMalformed)
		}
		b, _ := hex.DecodeString(v) // lowerHex checked every digit
		sigs = append(sigs, b)
	}
	return ts, sec, sigs, nil
}

// canonicalSeconds reports whether s is a decimal number as
// strconv.FormatInt writes one for a time after 1970: digits only, no
// leading zero (bar "0" itself).
func canonicalSeconds(s string) bool {
	if s == "" || (s[0] == '0' && s != "0") {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
