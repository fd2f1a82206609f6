package payment_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

var (
	secret = []byte("whsec_current")
	body   = []byte(`{"order_id":"o-1","payment_id":"p-1","status":"SUCCEEDED","amount_cents":1299}`)
	now    = time.Unix(1_900_000_000, 0)
)

const tol = payment.DefaultTolerance

func TestDefaultTolerance(t *testing.T) {
	t.Parallel()
	if payment.DefaultTolerance != 5*time.Minute {
		t.Errorf("DefaultTolerance = %s, want 5m", payment.DefaultTolerance)
	}
	if payment.SignatureHeader != "Lapse-Signature" {
		t.Errorf("SignatureHeader = %q, want Lapse-Signature", payment.SignatureHeader)
	}
}

func TestSignFormat(t *testing.T) {
	t.Parallel()
	// t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + raw body)>
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("1900000000." + string(body)))
	want := "t=1900000000,v1=" + hex.EncodeToString(m.Sum(nil))
	if got := payment.Sign(secret, now, body); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
	// Sub-second parts of the time are dropped, not rounded.
	if got := payment.Sign(secret, now.Add(999*time.Millisecond), body); got != want {
		t.Errorf("Sign with 999ms = %q, want %q", got, want)
	}
	if err := payment.Verify(want, body, [][]byte{secret}, now, tol); err != nil {
		t.Errorf("Verify of a hand-built signature: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{body, {}, []byte("not json at all"), []byte("\x00\xff binary")} {
		h := payment.Sign(secret, now, b)
		if err := payment.Verify(h, b, [][]byte{secret}, now, tol); err != nil {
			t.Errorf("Verify(Sign(%q)) = %v", b, err)
		}
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	good := payment.Sign(secret, now, body)
	_, sig, _ := strings.Cut(good, ",v1=")
	cases := []struct {
		name    string
		header  string
		body    []byte
		secrets [][]byte
		want    error
	}{
		{"tampered body", good, []byte(strings.Replace(string(body), "1299", "1", 1)), nil, payment.ErrMismatch},
		{"body with a trailing newline", good, append(append([]byte{}, body...), '\n'), nil, payment.ErrMismatch},
		{"wrong secret", payment.Sign([]byte("other"), now, body), body, nil, payment.ErrMismatch},
		{"secret differing in the last byte", payment.Sign([]byte("whsec_currenT"), now, body), body, nil, payment.ErrMismatch},
		{"timestamp swapped for another", "t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + sig, body, nil, payment.ErrMismatch},
		{"stale", payment.Sign(secret, now.Add(-tol-time.Second), body), body, nil, payment.ErrStale},
		{"very stale", payment.Sign(secret, now.Add(-24*time.Hour), body), body, nil, payment.ErrStale},
		{"from the future", payment.Sign(secret, now.Add(tol+time.Second), body), body, nil, payment.ErrStale},
		{"epoch zero", payment.Sign(secret, time.Unix(0, 0), body), body, nil, payment.ErrStale},
		{"no secrets", good, body, [][]byte{}, payment.ErrNoSecret},
		{"nil secrets", good, body, nil, payment.ErrNoSecret},
		{"only empty secrets", payment.Sign(nil, now, body), body, [][]byte{{}, nil}, payment.ErrNoSecret},
		{"missing", "", body, nil, payment.ErrMissingSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			secrets := c.secrets
			if c.name != "no secrets" && c.name != "nil secrets" && secrets == nil {
				secrets = [][]byte{secret}
			}
			err := payment.Verify(c.header, c.body, secrets, now, tol)
			if !errors.Is(err, c.want) {
				t.Errorf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	good := payment.Sign(secret, now, body)
	ts, sig, _ := strings.Cut(strings.TrimPrefix(good, "t="), ",v1=")
	cases := map[string]string{
		"garbage":             "garbage",
		"only the hex":        sig,
		"no v1":               "t=" + ts,
		"no t":                "v1=" + sig,
		"empty t":             "t=,v1=" + sig,
		"t not a number":      "t=yesterday,v1=" + sig,
		"t fractional":        "t=" + ts + ".5,v1=" + sig,
		"t overflowing int64": "t=99999999999999999999,v1=" + sig,
		"v1 not hex":          "t=" + ts + ",v1=" + strings.Repeat("zz", sha256.Size),
		"v1 odd length":       "t=" + ts + ",v1=" + sig[:63],
		"v1 truncated":        "t=" + ts + ",v1=" + sig[:62],
		"v1 too long":         "t=" + ts + ",v1=" + sig + "00",
		"v1 empty":            "t=" + ts + ",v1=",
		"a part without =":    "t=" + ts + ",v1=" + sig + ",junk",
		"empty part":          "t=" + ts + ",,v1=" + sig,
		"only another scheme": "t=" + ts + ",v0=" + sig,
		"semicolons":          "t=" + ts + ";v1=" + sig,
		"comma":               ",",
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := payment.Verify(h, body, [][]byte{secret}, now, tol)
			if !errors.Is(err, payment.ErrMalformed) {
				t.Errorf("Verify(%q) = %v, want ErrMalformed", h, err)
			}
		})
	}
}

func TestTolerance(t *testing.T) {
	t.Parallel()
	h := payment.Sign(secret, now, body)
	for _, d := range []time.Duration{0, time.Second, tol - time.Second, tol, -time.Second, -tol} {
		if err := payment.Verify(h, body, [][]byte{secret}, now.Add(d), tol); err != nil {
			t.Errorf("verified %s after signing: %v, want accepted", d, err)
		}
	}
	for _, d := range []time.Duration{tol + time.Second, -tol - time.Second} {
		if err := payment.Verify(h, body, [][]byte{secret}, now.Add(d), tol); !errors.Is(err, payment.ErrStale) {
			t.Errorf("verified %s after signing: %v, want ErrStale", d, err)
		}
	}
	// A custom tolerance is honoured.
	if err := payment.Verify(h, body, [][]byte{secret}, now.Add(11*time.Second), 10*time.Second); !errors.Is(err, payment.ErrStale) {
		t.Errorf("10s tolerance, 11s old: %v, want ErrStale", err)
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	current, previous := []byte("whsec_new"), []byte("whsec_old")
	both := [][]byte{current, previous}
	for _, s := range both {
		if err := payment.Verify(payment.Sign(s, now, body), body, both, now, tol); err != nil {
			t.Errorf("signed with %s: %v", s, err)
		}
	}
	if err := payment.Verify(payment.Sign([]byte("whsec_older"), now, body), body, both, now, tol); !errors.Is(err, payment.ErrMismatch) {
		t.Errorf("signed with a retired secret: %v, want ErrMismatch", err)
	}
	// After the rotation ends, the previous secret is refused.
	if err := payment.Verify(payment.Sign(previous, now, body), body, [][]byte{current}, now, tol); !errors.Is(err, payment.ErrMismatch) {
		t.Errorf("previous secret after rotation: %v, want ErrMismatch", err)
	}
	// An empty secret in the list is ignored, never a key anyone can sign with.
	withEmpty := [][]byte{current, {}}
	if err := payment.Verify(payment.Sign(nil, now, body), body, withEmpty, now, tol); !errors.Is(err, payment.ErrMismatch) {
		t.Errorf("signed with the empty key: %v, want ErrMismatch", err)
	}
	if err := payment.Verify(payment.Sign(current, now, body), body, withEmpty, now, tol); err != nil {
		t.Errorf("current secret beside an empty one: %v", err)
	}
	// A sender may send several v1 signatures (one per secret it holds).
	h := payment.Sign([]byte("whsec_older"), now, body) + ",v1=" + strings.SplitN(payment.Sign(previous, now, body), "v1=", 2)[1]
	if err := payment.Verify(h, body, both, now, tol); err != nil {
		t.Errorf("two v1 signatures, the second valid: %v", err)
	}
}

func TestNoSecretComesFirst(t *testing.T) {
	t.Parallel()
	// With no secret, every callback is refused the same way, however it is signed.
	for _, h := range []string{"", "garbage", payment.Sign(secret, now, body)} {
		if err := payment.Verify(h, body, nil, now, tol); !errors.Is(err, payment.ErrNoSecret) {
			t.Errorf("Verify(%q) with no secret = %v, want ErrNoSecret", h, err)
		}
	}
}
