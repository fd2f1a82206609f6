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

// One message has one spelling of its signature header. Each re-spelling
// below was accepted as the same signature by the old parser, and the API
// keyed replays on the header's text, so a captured callback re-sent with
// its hex upper-cased was taken for a new one.
func TestRespellingsAreMalformed(t *testing.T) {
	t.Parallel()
	good := payment.Sign(secret, now, body)
	ts, sig, _ := strings.Cut(strings.TrimPrefix(good, "t="), ",v1=")
	other := strings.TrimPrefix(payment.Sign([]byte("whsec_previous"), now, body), "t="+ts+",v1=")
	cases := map[string]string{
		"v1 upper-case":              "t=" + ts + ",v1=" + strings.ToUpper(sig),
		"v1 one letter upper-case":   "t=" + ts + ",v1=" + upperFirstLetter(sig),
		"the same v1 twice":          "t=" + ts + ",v1=" + sig + ",v1=" + sig,
		"an unknown pair":            "t=" + ts + ",v1=" + sig + ",x=1",
		"an unknown pair first":      "x=1,t=" + ts + ",v1=" + sig,
		"a v0 beside the v1":         "t=" + ts + ",v0=" + sig + ",v1=" + sig,
		"t twice":                    "t=" + ts + ",t=" + ts + ",v1=" + sig,
		"t again after v1":           "t=" + ts + ",v1=" + sig + ",t=" + ts,
		"v1 before t":                "v1=" + sig + ",t=" + ts,
		"a space after the comma":    "t=" + ts + ", v1=" + sig,
		"a space before the comma":   "t=" + ts + " ,v1=" + sig,
		"spaces around =":            "t = " + ts + ",v1=" + sig,
		"a tab":                      "t=" + ts + ",\tv1=" + sig,
		"a trailing comma":           "t=" + ts + ",v1=" + sig + ",",
		"t with a leading zero":      "t=0" + ts + ",v1=" + sig,
		"t with a plus sign":         "t=+" + ts + ",v1=" + sig,
		"T upper-case":               "T=" + ts + ",v1=" + sig,
		"V1 upper-case":              "t=" + ts + ",V1=" + sig,
		"a second valid v1 repeated": "t=" + ts + ",v1=" + other + ",v1=" + sig + ",v1=" + other,
		"nine v1":                    "t=" + ts + nineSigs(sig),
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

// upperFirstLetter upper-cases the first of a-f in a hex string.
func upperFirstLetter(h string) string {
	i := strings.IndexAny(h, "abcdef")
	return h[:i] + strings.ToUpper(h[i:i+1]) + h[i+1:]
}

// nineSigs is ",v1=<sig>" then eight distinct other well-formed v1 parts.
func nineSigs(sig string) string {
	s := ",v1=" + sig
	for i := range 8 {
		s += ",v1=" + strings.Repeat(strconv.Itoa(i), 64)
	}
	return s
}

// The ID a verified callback gets is the replay key: the same for every
// valid spelling of one message, different for another timestamp or body.
func TestVerifiedID(t *testing.T) {
	t.Parallel()
	current, previous := []byte("whsec_new"), []byte("whsec_old")
	both := [][]byte{current, previous}
	one := payment.Sign(current, now, body)
	_, prevSig, _ := strings.Cut(payment.Sign(previous, now, body), ",v1=")
	ts, curSig, _ := strings.Cut(one, ",v1=")

	first, err := payment.VerifyCallback(one, body, both, now, tol)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(strconv.FormatInt(now.Unix(), 10) + "." + string(body)))
	if first.ID != hex.EncodeToString(sum[:]) || !first.Timestamp.Equal(now) {
		t.Errorf("Verified = %+v, want ID sha256(\"<t>.\" + body) and Timestamp %v", first, now)
	}
	for name, h := range map[string]string{
		"signed with the previous secret": ts + ",v1=" + prevSig,
		"both v1":                         ts + ",v1=" + curSig + ",v1=" + prevSig,
		"both v1 the other way round":     ts + ",v1=" + prevSig + ",v1=" + curSig,
		"a stale v1 before the valid one": ts + ",v1=" + strings.Repeat("ab", 32) + ",v1=" + curSig,
	} {
		v, err := payment.VerifyCallback(h, body, both, now.Add(time.Minute), tol)
		if err != nil || v.ID != first.ID {
			t.Errorf("%s: ID %q, %v; want the first spelling's %q", name, v.ID, err, first.ID)
		}
	}
	if v, _ := payment.VerifyCallback(payment.Sign(current, now.Add(time.Second), body), body, both, now, tol); v.ID == first.ID {
		t.Errorf("another timestamp, the same ID")
	}
	other := append(append([]byte{}, body...), ' ')
	if v, _ := payment.VerifyCallback(payment.Sign(current, now, other), other, both, now, tol); v.ID == first.ID {
		t.Errorf("another body, the same ID")
	}
}
