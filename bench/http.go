package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

// HTTPConfig is a running `lapse serve` to drive through its public API.
type HTTPConfig struct {
	// URL is the server's base URL, http://host:port. Required.
	URL string
	// APIToken is sent as a bearer token on /v1 routes (lapse serve --api-token).
	APIToken string
	// CallbackSecret signs the payment callbacks (lapse serve
	// --callback-secret). Required to pay orders.
	CallbackSecret string
	// Store, when set, is the server's store, opened here only for the audit
	// at the end. Without it the audit is skipped.
	Store store.Store
	// Client sends the requests. Defaults to a client with a 30 s timeout
	// and enough idle connections for the workload.
	Client *http.Client
}

// HTTP drives a running `lapse serve` over its public HTTP API: orders are
// created with POST /v1/orders (timeout_seconds), paid with
// POST /v1/orders/{id}/pay and a signed POST /v1/payments/notify, progress is
// read from GET /metrics and the cancels from GET /v1/orders?status=CANCELLED.
// It cannot restart the server (no KillEvery).
func HTTP(cfg HTTPConfig) (Target, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench: target %q: want http://host:port", redact.URL(cfg.URL))
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: 256,
				IdleConnTimeout:     90 * time.Second,
			},
		}
	}
	return &httpTarget{cfg: cfg, base: strings.TrimRight(cfg.URL, "/")}, nil
}

type httpTarget struct {
	cfg  HTTPConfig
	base string
}

// apiError is an error answer of the API: {"error": {"code", "message"}}.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// call sends one request and decodes a 2xx answer into out. Transport errors
// and 5xx answers are retried a few times: every call the harness makes is
// safe to repeat (creates carry an Idempotency-Key).
func (t *httpTarget) call(ctx context.Context, method, path string, header http.Header, body []byte, out any) error {
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt*attempt) * 50 * time.Millisecond):
			}
		}
		var retry bool
		retry, err = t.once(ctx, method, path, header, body, out)
		if err == nil || !retry {
			return err
		}
	}
	return err
}

func (t *httpTarget) once(ctx context.Context, method, path string, header http.Header, body []byte, out any) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.cfg.APIToken != "" && strings.HasPrefix(path, "/v1/") {
		req.Header.Set("Authorization", "Bearer "+t.cfg.APIToken)
	}
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return true, fmt.Errorf("bench: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		ae := &apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
		if ae.Code == "" {
			ae.Message = snippet(b)
		}
		return resp.StatusCode >= 500, fmt.Errorf("bench: %s %s: %w", method, path, ae)
	}
	if out == nil {
		return false, nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err = w.Write(b)
		return false, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return false, fmt.Errorf("bench: %s %s: decoding the answer: %w", method, path, err)
	}
	return false, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (t *httpTarget) start(ctx context.Context) error {
	if err := t.call(ctx, http.MethodGet, "/readyz", nil, nil, nil); err != nil {
		return fmt.Errorf("bench: target %s not ready: %w", t.base, err)
	}
	return nil
}

func (t *httpTarget) stop() {}

func (t *httpTarget) restart(context.Context) error { return errNoRestart }

func (t *httpTarget) setStock(ctx context.Context, sku string, available int64) error {
	body, _ := json.Marshal(map[string]int64{"available": available})
	return t.call(ctx, http.MethodPut, "/v1/skus/"+url.PathEscape(sku), nil, body, nil)
}

func (t *httpTarget) create(ctx context.Context, id, sku string, amountCents int64, timeout time.Duration, idempotencyKey, reservationID string) (order.Order, error) {
	req := map[string]any{
		"id":              id,
		"items":           []map[string]any{{"sku": sku, "qty": 1}},
		"amount_cents":    amountCents,
		"timeout_seconds": timeout.Seconds(),
	}
	if reservationID != "" {
		req["reservation_id"] = reservationID
	}
	body, _ := json.Marshal(req)
	if idempotencyKey == "" {
		idempotencyKey = id // the retries of a 5xx in call need one
	}
	var o order.Order
	err := t.call(ctx, http.MethodPost, "/v1/orders", http.Header{"Idempotency-Key": {idempotencyKey}}, body, &o)
	return o, err
}

func (t *httpTarget) startPayment(ctx context.Context, id string) error {
	err := t.call(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(id)+"/pay", nil, nil, nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && (ae.Code == "order_expired" || ae.Code == "order_not_pending") {
		return errPayMissed
	}
	return err
}

func (t *httpTarget) completePayment(ctx context.Context, o order.Order) error {
	body, _ := json.Marshal(map[string]any{
		"order_id": o.ID, "payment_id": "bench-" + o.ID, "status": "SUCCEEDED", "amount_cents": o.AmountCents,
	})
	var res struct {
		Result string      `json:"result"`
		Order  order.Order `json:"order"`
	}
	// Signed per attempt: a retried callback is a new message, not a replay.
	var err error
	for attempt := 0; ; attempt++ {
		h := http.Header{payment.SignatureHeader: {payment.Sign([]byte(t.cfg.CallbackSecret), time.Now(), body)}}
		var retry bool
		retry, err = t.once(ctx, http.MethodPost, "/v1/payments/notify", h, body, &res)
		if err == nil || !retry || attempt == 3 {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	if res.Order.Status != order.Paid {
		return fmt.Errorf("bench: payment callback %s: result %q, order %s: %w", o.ID, res.Result, res.Order.Status, errNotPaid)
	}
	return nil
}

func (t *httpTarget) counts(ctx context.Context) (counts, error) {
	var b bytes.Buffer
	if err := t.call(ctx, http.MethodGet, "/metrics", nil, nil, &b); err != nil {
		return counts{}, err
	}
	return parseCounts(&b)
}

func (t *httpTarget) listCancelled(ctx context.Context, fn func([]order.Order) bool) error {
	cursor := ""
	for {
		q := url.Values{"status": {string(order.Cancelled)}, "limit": {"500"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Orders     []order.Order `json:"orders"`
			NextCursor string        `json:"next_cursor"`
		}
		if err := t.call(ctx, http.MethodGet, "/v1/orders?"+q.Encode(), nil, nil, &page); err != nil {
			return err
		}
		if !fn(page.Orders) || page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

func (t *httpTarget) audit(ctx context.Context, p store.AuditParams) (*store.AuditReport, string, error) {
	if t.cfg.Store == nil {
		return nil, "the server's store was not given (--store)", nil
	}
	rep, err := t.cfg.Store.Audit(ctx, p)
	if err != nil {
		return nil, "", err
	}
	return &rep, "", nil
}

func (t *httpTarget) statements() (int64, bool) { return 0, false }
