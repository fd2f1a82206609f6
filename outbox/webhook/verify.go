package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// DefaultTolerance is how far a message's webhook-timestamp may be from the
// receiver's clock, either way: the Standard Webhooks specification's five
// minutes.
const DefaultTolerance = 5 * time.Minute

// Verify's errors, for a receiver to tell an operator why it refused.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or
	// webhook-signature is absent or empty.
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrBadTimestamp: webhook-timestamp is not unix seconds.
	ErrBadTimestamp = errors.New("webhook: webhook-timestamp is not unix seconds")
	// ErrStale: webhook-timestamp is further from now than the tolerance
	// (a replay, or a clock that is off).
	ErrStale = errors.New("webhook: webhook-timestamp outside the tolerance")
	// ErrNoMatch: no v1 signature in webhook-signature is one of the
	// secrets' signature of this id, timestamp and body.
	ErrNoMatch = errors.New("webhook: no signature matches")
)

// SetHeaders signs a message and sets its webhook-id, webhook-timestamp and
// webhook-signature on h, the timestamp and the signature from the same ts.
func (s *Signer) SetHeaders(h http.Header, id string, ts time.Time, body []byte) error {
	sig, err := s.Sign(id, ts, body)
	if err != nil {
		return err
	}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return nil
}

// Verify is the receiving side of Sign: nil when body with the headers h is
// a message signed with any one of the secrets (a rotation's old or new
// one), stamped within tolerance of now either way; else an error wrapping
// ErrMissingHeaders, ErrBadTimestamp, ErrStale or ErrNoMatch. A tolerance
// of zero or less means DefaultTolerance.
//
// The timestamp is checked here rather than by the library, whose
// tolerance is fixed and whose clock cannot be set; the signatures are
// compared by the library.
func (s *Signer) Verify(h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id := h.Get(standardwebhooks.HeaderWebhookID)
	sig := h.Get(standardwebhooks.HeaderWebhookSignature)
	raw := h.Get(standardwebhooks.HeaderWebhookTimestamp)
	if id == "" || sig == "" || raw == "" {
		return ErrMissingHeaders
	}
	secs, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	// Compared in seconds, as bounds, so that no timestamp however far off
	// overflows a Duration or a subtraction.
	tol := int64(tolerance / time.Second)
	if secs < now.Unix()-tol || secs > now.Unix()+tol {
		return fmt.Errorf("%w: %d, now %d (tolerance %s)", ErrStale, secs, now.Unix(), tolerance)
	}
	for _, w := range s.ws {
		err := w.VerifyIgnoringTimestamp(body, h)
		if err == nil {
			return nil
		}
		if !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			return fmt.Errorf("%w: %w", ErrNoMatch, err)
		}
	}
	return ErrNoMatch
}
