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
// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + raw body)>`.
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

// Verify checks header against body. Any of secrets may have signed it (two
// are accepted while a secret is rotated). The timestamp must be within
// tolerance of now, in either direction. Comparison is constant-time. Empty
// secrets are ignored (anyone can sign with an empty key): with no non-empty
// secret, Verify returns ErrNoSecret.
func Verify(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) error {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s []byte) bool { return len(s) == 0 })
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	if header == "" {
		return ErrMissingSignature
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return ErrMalformed
			}
			sigs = append(sigs, b)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformed
	}
	age := now.Sub(time.Unix(sec, 0))
	if age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %s ago", ErrStale, age.Round(time.Second))
	}
	for _, secret := range secrets {
		want := mac(secret, ts, body)
		for _, got := range sigs {
			if hmac.Equal(want, got) {
				return nil
			}
		}
	}
	return ErrMismatch
}
