package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
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

// HTTP drives a running `lapse serve` over its public HTTP API, through
// package client (which retries creates with an Idempotency-Key, and the
// calls safe to repeat, on a transport error or a 503): orders are
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
	opts := []client.Option{client.WithHTTPClient(cfg.Client)}
	if cfg.APIToken != "" {
		opts = append(opts, client.WithToken(cfg.APIToken))
	}
	c, err := client.New(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &httpTarget{cfg: cfg, c: c}, nil
}

type httpTarget struct {
	cfg HTTPConfig
	c   *client.Client
}

func (t *httpTarget) start(ctx context.Context) error {
	if err := t.c.Ready(ctx); err != nil {
		return fmt.Errorf("bench: target %s not ready: %w", t.c.URL(), err)
	}
	return nil
}

func (t *httpTarget) stop() {}

func (t *httpTarget) restart(context.Context) error { return errNoRestart }

func (t *httpTarget) setStock(ctx context.Context, sku string, available int64) error {
	_, err := t.c.SetStock(ctx, sku, available)
	return err
}

func (t *httpTarget) create(ctx context.Context, id, sku string, amountCents int64, timeout time.Duration, idempotencyKey, reservationID string) (order.Order, error) {
	if idempotencyKey == "" {
		idempotencyKey = id // the harness's own retries (retry.go) need the same key
	}
	return t.c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: sku, Qty: 1}}, AmountCents: amountCents,
		Timeout: timeout, IdempotencyKey: idempotencyKey, ReservationID: reservationID})
}

func (t *httpTarget) startPayment(ctx context.Context, id string) error {
	_, err := t.c.Pay(ctx, id, "")
	if errors.Is(err, client.ErrOrderExpired) || errors.Is(err, client.ErrOrderNotPending) {
		return errPayMissed
	}
	return err
}

func (t *httpTarget) completePayment(ctx context.Context, o order.Order) error {
	res, err := t.c.NotifyPayment(ctx, client.Notification{OrderID: o.ID, PaymentID: "bench-" + o.ID, Succeeded: true,
		AmountCents: o.AmountCents}, []byte(t.cfg.CallbackSecret))
	if err != nil {
		return err
	}
	if res.Order.Status != order.Paid {
		return fmt.Errorf("bench: payment callback %s: result %q, order %s: %w", o.ID, res.Result, res.Order.Status, errNotPaid)
	}
	return nil
}

func (t *httpTarget) counts(ctx context.Context) (counts, error) {
	b, err := t.c.Metrics(ctx)
	if err != nil {
		return counts{}, err
	}
	return parseCounts(bytes.NewReader(b))
}

func (t *httpTarget) listCancelled(ctx context.Context, fn func([]order.Order) bool) error {
	p := client.ListOrders{Status: order.Cancelled, Limit: 500}
	for {
		page, err := t.c.ListOrders(ctx, p)
		if err != nil {
			return err
		}
		if !fn(page.Orders) || page.NextCursor == "" {
			return nil
		}
		p.Cursor = page.NextCursor
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
