package ordersvc

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lapsehq/lapse/outbox/webhook"
)

// Sign returns the webhook-signature header of a request lapse sends an
// order service — the webhook-id id (a command's CommandID, or a StatusID),
// the webhook-timestamp ts and body — signed with every secret: a
// "v1,<base64>" signature per secret, space-separated, so a receiver holding
// any one of them verifies it. It is webhook.Signer's Sign, which lapse's
// sender makes once at start; this form is for a test of a receiver.
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	s, err := webhook.NewSigner(secrets)
	if err != nil {
		return "", fmt.Errorf("ordersvc: %w", err)
	}
	return s.Sign(id, ts, body)
}

// StatusID is the webhook-id of a status request for orderID sent at t:
// "status_", the order id, "_" and t in unix milliseconds. The order id is
// in the id, which the signature covers, because the query string is not
// signed: a receiver checks that the id names the order the query asks
// about (Receiver does), so a captured request cannot be turned into a
// question about another order. The milliseconds make every request's id
// new, so nothing that dedupes by webhook-id (a proxy, a receiver's
// library) answers a later question with an earlier answer.
func StatusID(orderID string, t time.Time) string {
	return "status_" + orderID + "_" + strconv.FormatInt(t.UnixMilli(), 10)
}

// NewStatusRequest returns the signed status request for orderID to the
// order service at rawURL (the --order-service URL): GET rawURL with
// order_id=<orderID> added to its query, webhook-id StatusID(orderID, now),
// webhook-timestamp now, and the signature over an empty body. The answer
// is a StatusAnswer.
func NewStatusRequest(ctx context.Context, rawURL string, s *webhook.Signer, orderID string, now time.Time) (*http.Request, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("ordersvc: status request: %w", err)
	}
	q := u.Query()
	q.Set(QueryOrderID, orderID)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("ordersvc: status request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "lapse")
	if err := s.SetHeaders(req.Header, StatusID(orderID, now), now, nil); err != nil {
		return nil, fmt.Errorf("ordersvc: sign status request for %s: %w", orderID, err)
	}
	return req, nil
}
