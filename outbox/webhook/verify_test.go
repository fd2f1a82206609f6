package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/outbox/webhook"
)

func newSigner(t *testing.T, secrets ...string) *webhook.Signer {
	t.Helper()
	k, err := webhook.NewSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signed(t *testing.T, k *webhook.Signer, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	h := http.Header{}
	if err := k.SetHeaders(h, id, ts, body); err != nil {
		t.Fatal(err)
	}
	return h
}

// What a Signer signs, the specification's own library verifies with each of
// the secrets: a receiver on any Standard Webhooks library accepts it.
func TestSignaturesVerifyWithTheSpecificationsLibrary(t *testing.T) {
	current, previous := newSecret(t), newSecret(t)
	body := []byte(`{"type":"order.cancel_if_pending"}`)
	h := signed(t, newSigner(t, current, previous), "cmd_x", time.Now(), body)
	if got := len(strings.Fields(h.Get("webhook-signature"))); got != 2 {
		t.Fatalf("webhook-signature has %d signatures, want one per secret (2)", got)
	}
	for _, secret := range []string{current, previous} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("the library does not verify the signature: %v", err)
		}
	}
}

func TestVerify(t *testing.T) {
	current, previous, other := newSecret(t), newSecret(t), newSecret(t)
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"order_id":"o-1"}`)
	receiver := newSigner(t, current, previous)

	cases := []struct {
		name   string
		header func() http.Header
		want   error // nil: verifies
	}{
		{"signed with the current secret", func() http.Header { return signed(t, newSigner(t, current), "m1", now, body) }, nil},
		{"signed with the previous secret", func() http.Header { return signed(t, newSigner(t, previous), "m1", now, body) }, nil},
		{"signed with both", func() http.Header { return signed(t, newSigner(t, previous, current), "m1", now, body) }, nil},
		{"signed with another and the current", func() http.Header { return signed(t, newSigner(t, other, current), "m1", now, body) }, nil},
		{"4 min 59 s old", func() http.Header { return signed(t, newSigner(t, current), "m1", now.Add(-299*time.Second), body) }, nil},
		{"signed with another secret", func() http.Header { return signed(t, newSigner(t, other), "m1", now, body) }, webhook.ErrNoMatch},
		{"another id", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-id", "m2")
			return h
		}, webhook.ErrNoMatch},
		{"another body", func() http.Header { return signed(t, newSigner(t, current), "m1", now, []byte(`{"order_id":"o-2"}`)) }, webhook.ErrNoMatch},
		{"a v2 signature only", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-signature", strings.Replace(h.Get("webhook-signature"), "v1,", "v2,", 1))
			return h
		}, webhook.ErrNoMatch},
		{"garbage signature", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-signature", "v1 ,,, v1,==")
			return h
		}, webhook.ErrNoMatch},
		{"6 min old", func() http.Header { return signed(t, newSigner(t, current), "m1", now.Add(-6*time.Minute), body) }, webhook.ErrStale},
		{"6 min ahead", func() http.Header { return signed(t, newSigner(t, current), "m1", now.Add(6*time.Minute), body) }, webhook.ErrStale},
		{"timestamp at the far end of int64", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-timestamp", "-9223372036854775808")
			return h
		}, webhook.ErrStale},
		{"timestamp in milliseconds", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-timestamp", strconv.FormatInt(now.UnixMilli(), 10))
			return h
		}, webhook.ErrStale},
		{"timestamp not a number", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Set("webhook-timestamp", "yesterday")
			return h
		}, webhook.ErrBadTimestamp},
		{"no signature", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Del("webhook-signature")
			return h
		}, webhook.ErrMissingHeaders},
		{"no id", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Del("webhook-id")
			return h
		}, webhook.ErrMissingHeaders},
		{"no timestamp", func() http.Header {
			h := signed(t, newSigner(t, current), "m1", now, body)
			h.Del("webhook-timestamp")
			return h
		}, webhook.ErrMissingHeaders},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := receiver.Verify(c.header(), body, now, 0)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Verify: %v, want %v", err, c.want)
			}
		})
	}

	t.Run("a tolerance of one minute", func(t *testing.T) {
		h := signed(t, newSigner(t, current), "m1", now.Add(-61*time.Second), body)
		if err := receiver.Verify(h, body, now, time.Minute); !errors.Is(err, webhook.ErrStale) {
			t.Errorf("61 s old with a tolerance of 1 min: %v, want ErrStale", err)
		}
		if err := receiver.Verify(h, body, now, 2*time.Minute); err != nil {
			t.Errorf("61 s old with a tolerance of 2 min: %v, want nil", err)
		}
	})
}
