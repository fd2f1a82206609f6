package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"time"

	"github.com/lapsehq/lapse/client/internal/gen"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// CreateOrder is a new order (POST /v1/orders).
type CreateOrder struct {
	// ID is the order's id; "" lets lapse make one (a UUIDv7).
	ID    string
	Items []order.Item
	// AmountCents is what the order costs, in the currency's minor unit.
	AmountCents int64
	// Currency is an ISO 4217 code; "" is the server's --default-currency.
	Currency string
	// Timeout is the payment window, rounded to milliseconds by the
	// server; 0 is the server's --default-timeout.
	Timeout time.Duration
	// ReservationID is the inventory's reservation for the items, when
	// another service holds the stock (docs/sagas.md).
	ReservationID string
	// IdempotencyKey makes a repeat of the create (a retry after an
	// unknown outcome) return the same order. "" makes the client generate
	// one for this call, sent on each of its retries; give your own to
	// retry across calls or processes.
	IdempotencyKey string
}

// CreateOrder places an order, reserving every item or nothing. It is
// retried on a transport error and on 503 with the same Idempotency-Key, so
// one order is made whatever the network did.
func (c *Client) CreateOrder(ctx context.Context, r CreateOrder) (order.Order, error) {
	body := gen.CreateOrderJSONRequestBody{AmountCents: int(r.AmountCents), Items: genItems(r.Items),
		Id: optional(r.ID), Currency: optional(r.Currency), ReservationId: optional(r.ReservationID)}
	if r.Timeout != 0 {
		secs := r.Timeout.Seconds()
		body.TimeoutSeconds = &secs
	}
	key := r.IdempotencyKey
	if key == "" {
		key = newIdempotencyKey()
	}
	var o order.Order
	err := c.do(ctx, call{op: "POST /v1/orders", want: http.StatusCreated, out: &o, retry: true,
		send: func(ctx context.Context) (*http.Response, error) {
			return c.gen.CreateOrder(ctx, &gen.CreateOrderParams{IdempotencyKey: &key}, body)
		}})
	return o, err
}

// GetOrder returns one order with its payment attempts (and its stock
// tasks, for an order whose stock another service holds).
func (c *Client) GetOrder(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := c.do(ctx, call{op: "GET /v1/orders/" + url.PathEscape(id), want: http.StatusOK, out: &o, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.GetOrder(ctx, id) }})
	return o, err
}

// ListOrders selects orders (GET /v1/orders): newest first.
type ListOrders struct {
	// Status, when set, lists only orders in it.
	Status order.Status
	// Limit is the page size: 1-500, 0 for the server's (50).
	Limit int
	// Cursor is the NextCursor of the previous page; "" for the first.
	Cursor string
}

// OrderPage is a page of orders.
type OrderPage struct {
	Orders []order.Order `json:"orders"`
	// NextCursor is the Cursor of the next page; "" on the last page.
	NextCursor string `json:"next_cursor"`
}

// ListOrders returns one page of orders.
func (c *Client) ListOrders(ctx context.Context, p ListOrders) (OrderPage, error) {
	params := &gen.ListOrdersParams{Limit: optionalInt(p.Limit), Cursor: optional(p.Cursor)}
	if p.Status != "" {
		s := gen.Status(p.Status)
		params.Status = &s
	}
	var page OrderPage
	err := c.do(ctx, call{op: "GET /v1/orders", want: http.StatusOK, out: &page, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ListOrders(ctx, params) }})
	return page, err
}

// Orders iterates over every order p selects, from p.Cursor on, reading
// the pages as it goes. An error ends the iteration, yielded with a zero
// order.
//
//	for o, err := range c.Orders(ctx, client.ListOrders{Status: order.Pending}) {
//		if err != nil { return err }
//		…
//	}
func (c *Client) Orders(ctx context.Context, p ListOrders) iter.Seq2[order.Order, error] {
	return func(yield func(order.Order, error) bool) {
		for {
			page, err := c.ListOrders(ctx, p)
			if err != nil {
				yield(order.Order{}, err)
				return
			}
			for _, o := range page.Orders {
				if !yield(o, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			p.Cursor = page.NextCursor
		}
	}
}

// Pay starts a payment attempt: a PENDING order becomes PAYING. paymentID
// names the attempt (the id used at the gateway); "" lets lapse name it
// "<order id>-<attempt>". Paying again with the same id (or none) changes
// nothing, so Pay is retried like a read.
func (c *Client) Pay(ctx context.Context, id, paymentID string) (order.Order, error) {
	var o order.Order
	body := gen.PayOrderJSONRequestBody{PaymentId: optional(paymentID)}
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/pay", want: http.StatusOK, out: &o, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.PayOrder(ctx, id, body) }})
	return o, err
}

// Cancel is the buyer's cancel of a PENDING order: its stock is released at
// once. It is not retried (a repeat of a cancel that took effect answers
// order_not_pending).
func (c *Client) Cancel(ctx context.Context, id string) (order.Order, error) {
	var o order.Order
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/cancel", want: http.StatusOK, out: &o,
		send: func(ctx context.Context) (*http.Response, error) {
			// No body, as ever: the buyer's cancel.
			return c.gen.CancelOrderWithBody(ctx, id, "", nil, func(_ context.Context, r *http.Request) error {
				r.Header.Del("Content-Type")
				return nil
			})
		}})
	return o, err
}

// OperatorCancel is how an operator cancels an order (CancelAsOperator).
type OperatorCancel struct {
	// NoClose skips closing the trade at the gateway: the operator
	// acknowledges it was closed by hand.
	NoClose bool
}

// CancelAsOperator is an operator's cancel of a PENDING or PAYING order,
// past its deadline or not: POST /v1/orders/{id}/cancel with {"reason":
// "operator", "force": true}. The server closes the order's trades at the
// gateway first and cancels only if every close succeeded, unless
// NoClose. Errors (nothing changed): 409 order_not_open, already_paid (the
// close found the trade paid: the payment is recorded), no_gateway,
// order_service_owns_status; 502 close_failed. Not retried.
func (c *Client) CancelAsOperator(ctx context.Context, id string, oc OperatorCancel) (order.Order, error) {
	var o order.Order
	reason, force := gen.CancelOrderJSONBodyReasonOperator, true
	body := gen.CancelOrderJSONRequestBody{Reason: &reason, Force: &force}
	if oc.NoClose {
		body.NoClose = &oc.NoClose
	}
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/cancel", want: http.StatusOK, out: &o,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.CancelOrder(ctx, id, body) }})
	return o, err
}

// GatewayAnswer is what a payment gateway said about an order.
type GatewayAnswer struct {
	State       string `json:"state"` // PAID, NOT_PAID, PENDING, CLOSED
	PaymentID   string `json:"payment_id,omitempty"`
	AmountCents int64  `json:"amount_cents,omitempty"`
	Currency    string `json:"currency,omitempty"`
}

// PaymentCheck is the answer of Check.
type PaymentCheck struct {
	Gateway GatewayAnswer `json:"gateway"`
	Order   order.Order   `json:"order"`
}

// Check runs the gateway check of a PAYING order (or a PENDING one with a
// payment attempt) now: POST /v1/orders/{id}/check. Past its deadline the
// check's rules apply (PAID recorded, NOT_PAID closed and cancelled);
// before it the gateway is only asked. Errors: 409 order_not_checkable,
// no_gateway; 502 gateway_unavailable. Not retried.
func (c *Client) Check(ctx context.Context, id string) (PaymentCheck, error) {
	var pc PaymentCheck
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/check", want: http.StatusOK, out: &pc,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.CheckOrder(ctx, id) }})
	return pc, err
}

// Extend moves the deadline of a PENDING order to expiresAt, later or
// earlier (at most the server's --max-timeout from now): cancel_after moves
// with it, the order's grace kept, and the order's timer follows. Errors:
// 409 order_expired once expires_at has passed, order_not_pending for a
// PAYING, PAID or CANCELLED order. It is retried like a read: the same
// deadline again is the same deadline.
func (c *Client) Extend(ctx context.Context, id string, expiresAt time.Time) (order.Order, error) {
	var o order.Order
	at := expiresAt.UTC()
	body := gen.ExtendOrderJSONRequestBody{ExpiresAt: &at}
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/extend", want: http.StatusOK, out: &o, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ExtendOrder(ctx, id, body) }})
	return o, err
}

// ExtendFor is Extend to timeout from the server's now (rounded to
// milliseconds). It is not retried: a retry would count from a later now.
func (c *Client) ExtendFor(ctx context.Context, id string, timeout time.Duration) (order.Order, error) {
	var o order.Order
	secs := timeout.Seconds()
	body := gen.ExtendOrderJSONRequestBody{TimeoutSeconds: &secs}
	err := c.do(ctx, call{op: "POST /v1/orders/" + url.PathEscape(id) + "/extend", want: http.StatusOK, out: &o,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ExtendOrder(ctx, id, body) }})
	return o, err
}

// SKU is a SKU's stock counters.
type SKU struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Locked    int64  `json:"locked"`
	Sold      int64  `json:"sold"`
}

// SetStock sets a SKU's available quantity, creating the SKU.
func (c *Client) SetStock(ctx context.Context, sku string, available int64) (SKU, error) {
	var s SKU
	body := gen.SetStockJSONRequestBody{Available: int(available)}
	err := c.do(ctx, call{op: "PUT /v1/skus/" + url.PathEscape(sku), want: http.StatusOK, out: &s, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.SetStock(ctx, sku, body) }})
	return s, err
}

// GetSKU returns a SKU's counters.
func (c *Client) GetSKU(ctx context.Context, sku string) (SKU, error) {
	var s SKU
	err := c.do(ctx, call{op: "GET /v1/skus/" + url.PathEscape(sku), want: http.StatusOK, out: &s, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.GetSKU(ctx, sku) }})
	return s, err
}

// Event is one outbox event not yet taken by one sink (GET /v1/events).
// Its JSON is the API's.
type Event struct {
	// Seq is the event's place in the outbox, increasing.
	Seq int64 `json:"seq"`
	// ID is the event's id: consumers dedupe by it, RetryEvents names it.
	ID      string `json:"id"`
	Type    string `json:"type"`
	OrderID string `json:"order_id"`
	Sink    string `json:"sink"`
	// Dead: the sink refused it for good; it waits for a retry.
	Dead bool `json:"dead"`
	// Attempts and Refusals count the sink's claims and refusals since the
	// event was made or retried.
	Attempts int `json:"attempts"`
	Refusals int `json:"refusals"`
	// NextAttemptAt is when it is next due (for a dead one: would have been).
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// DeadAt is when it died (zero unless dead).
	DeadAt    time.Time `json:"dead_at,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Payload is the event's JSON, as sinks get it.
	Payload json.RawMessage `json:"payload"`
}

// ListEvents selects pending deliveries (GET /v1/events), in seq order.
type ListEvents struct {
	Dead  bool   // only the dead ones
	Sink  string // only this sink's
	Limit int    // 1-500; 0 for the server's (100)
	After int64  // the NextAfter of the previous page
}

// EventPage is a page of deliveries.
type EventPage struct {
	Events []Event `json:"events"`
	// NextAfter is the After of the next page; 0 on the last page.
	NextAfter int64 `json:"next_after,omitempty"`
}

// ListEvents returns one page of the outbox's pending deliveries.
func (c *Client) ListEvents(ctx context.Context, p ListEvents) (EventPage, error) {
	params := &gen.ListEventsParams{Sink: optional(p.Sink), Limit: optionalInt(p.Limit)}
	if p.Dead {
		params.Dead = &p.Dead
	}
	if p.After != 0 {
		a := int(p.After)
		params.After = &a
	}
	var page EventPage
	err := c.do(ctx, call{op: "GET /v1/events", want: http.StatusOK, out: &page, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ListEvents(ctx, params) }})
	return page, err
}

// RetryEvents names the dead deliveries to make due again: the events IDs
// names, or with AllDead every dead one (exactly one of the two); Sink
// narrows either to one sink.
type RetryEvents struct {
	IDs     []string
	AllDead bool
	Sink    string
}

// RetryEvents makes dead deliveries due again at once and returns how many.
func (c *Client) RetryEvents(ctx context.Context, r RetryEvents) (int64, error) {
	body := gen.RetryEventsJSONRequestBody{Sink: optional(r.Sink)}
	if len(r.IDs) > 0 { // an empty list names nothing: not sent beside AllDead
		body.Ids = &r.IDs
	}
	if r.AllDead {
		d := gen.RetryEventsJSONBodyDead(true)
		body.Dead = &d
	}
	var out struct {
		Retried int64 `json:"retried"`
	}
	err := c.do(ctx, call{op: "POST /v1/events/retry", want: http.StatusOK, out: &out,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.RetryEvents(ctx, body) }})
	return out.Retried, err
}

// ListTasks selects stock tasks (GET /v1/tasks), in id order.
type ListTasks struct {
	Dead    bool   // only the DEAD ones
	OrderID string // every task of this order, DONE ones too
	Limit   int    // 1-500; 0 for the server's (100)
	After   string // the NextAfter of the previous page
}

// TaskPage is a page of stock tasks.
type TaskPage struct {
	Tasks []order.StockTask `json:"tasks"`
	// NextAfter is the After of the next page; "" on the last page.
	NextAfter string `json:"next_after,omitempty"`
}

// ListTasks returns one page of the stock tasks the inventory has not applied.
func (c *Client) ListTasks(ctx context.Context, p ListTasks) (TaskPage, error) {
	params := &gen.ListTasksParams{OrderId: optional(p.OrderID), Limit: optionalInt(p.Limit), After: optional(p.After)}
	if p.Dead {
		params.Dead = &p.Dead
	}
	var page TaskPage
	err := c.do(ctx, call{op: "GET /v1/tasks", want: http.StatusOK, out: &page, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ListTasks(ctx, params) }})
	return page, err
}

// RetryTasks names the DEAD stock tasks to send again: IDs, or with AllDead
// every DEAD one (exactly one of the two).
type RetryTasks struct {
	IDs     []string
	AllDead bool
}

// RetryTasks makes DEAD stock tasks due again at once and returns how many.
func (c *Client) RetryTasks(ctx context.Context, r RetryTasks) (int64, error) {
	var body gen.RetryTasksJSONRequestBody
	if len(r.IDs) > 0 { // an empty list names nothing: not sent beside AllDead
		body.Ids = &r.IDs
	}
	if r.AllDead {
		d := gen.RetryTasksJSONBodyDead(true)
		body.Dead = &d
	}
	var out struct {
		Retried int64 `json:"retried"`
	}
	err := c.do(ctx, call{op: "POST /v1/tasks/retry", want: http.StatusOK, out: &out,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.RetryTasks(ctx, body) }})
	return out.Retried, err
}

// ListCommands selects the cancel commands of order-service mode (GET
// /v1/commands), in id order.
type ListCommands struct {
	Dead    bool   // only the DEAD ones
	OrderID string // every command of this order, DONE ones too
	Limit   int    // 1-500; 0 for the server's (100)
	After   string // the NextAfter of the previous page
}

// CommandPage is a page of cancel commands.
type CommandPage struct {
	Commands []order.Command `json:"commands"`
	// NextAfter is the After of the next page; "" on the last page.
	NextAfter string `json:"next_after,omitempty"`
}

// ListCommands returns one page of the cancel commands the order service
// has not answered for good.
func (c *Client) ListCommands(ctx context.Context, p ListCommands) (CommandPage, error) {
	params := &gen.ListCommandsParams{OrderId: optional(p.OrderID), Limit: optionalInt(p.Limit), After: optional(p.After)}
	if p.Dead {
		params.Dead = &p.Dead
	}
	var page CommandPage
	err := c.do(ctx, call{op: "GET /v1/commands", want: http.StatusOK, out: &page, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ListCommands(ctx, params) }})
	return page, err
}

// DeadCommands names DEAD cancel commands to retry or purge: IDs, or with
// AllDead every DEAD one (exactly one of the two).
type DeadCommands struct {
	IDs     []string
	AllDead bool
}

func (d DeadCommands) body() gen.DeadCommands {
	var body gen.DeadCommands
	if len(d.IDs) > 0 { // an empty list names nothing: not sent beside AllDead
		body.Ids = &d.IDs
	}
	if d.AllDead {
		dead := gen.DeadCommandsDead(true)
		body.Dead = &dead
	}
	return body
}

// RetryCommands makes DEAD cancel commands due again at once, each with its
// own id, and returns how many.
func (c *Client) RetryCommands(ctx context.Context, d DeadCommands) (int64, error) {
	body := d.body()
	var out struct {
		Retried int64 `json:"retried"`
	}
	err := c.do(ctx, call{op: "POST /v1/commands/retry", want: http.StatusOK, out: &out,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.RetryCommands(ctx, body) }})
	return out.Retried, err
}

// PurgeCommands deletes DEAD cancel commands and returns how many. Their
// orders stay CANCELLING, and the audit goes on reporting them.
func (c *Client) PurgeCommands(ctx context.Context, d DeadCommands) (int64, error) {
	body := d.body()
	var out struct {
		Purged int64 `json:"purged"`
	}
	err := c.do(ctx, call{op: "POST /v1/commands/purge", want: http.StatusOK, out: &out,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.PurgeCommands(ctx, body) }})
	return out.Purged, err
}

// ListRefunds selects the refunds of payment attempts that owe money back
// (GET /v1/refunds), in payment id order.
type ListRefunds struct {
	Dead    bool   // only the DEAD ones
	OrderID string // every refund of this order, DONE ones too
	Limit   int    // 1-500; 0 for the server's (100)
	After   string // the NextAfter of the previous page
}

// RefundPage is a page of refunds.
type RefundPage struct {
	Refunds []order.Refund `json:"refunds"`
	// NextAfter is the After of the next page; "" on the last page.
	NextAfter string `json:"next_after,omitempty"`
}

// ListRefunds returns one page of the refunds not given back yet (with
// Dead, the ones waiting for an operator).
func (c *Client) ListRefunds(ctx context.Context, p ListRefunds) (RefundPage, error) {
	params := &gen.ListRefundsParams{OrderId: optional(p.OrderID), Limit: optionalInt(p.Limit), After: optional(p.After)}
	if p.Dead {
		params.Dead = &p.Dead
	}
	var page RefundPage
	err := c.do(ctx, call{op: "GET /v1/refunds", want: http.StatusOK, out: &page, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.ListRefunds(ctx, params) }})
	return page, err
}

// DeadRefunds names DEAD refunds to retry: IDs (payment ids), or with
// AllDead every DEAD one (exactly one of the two).
type DeadRefunds struct {
	IDs     []string
	AllDead bool
}

// RetryRefunds makes DEAD refunds due again at once and returns how many;
// the gateway is asked with each attempt's key again, so a refund it made
// after all is not made twice.
func (c *Client) RetryRefunds(ctx context.Context, d DeadRefunds) (int64, error) {
	var body gen.DeadRefunds
	if len(d.IDs) > 0 { // an empty list names nothing: not sent beside AllDead
		body.Ids = &d.IDs
	}
	if d.AllDead {
		dead := gen.DeadRefundsDead(true)
		body.Dead = &dead
	}
	var out struct {
		Retried int64 `json:"retried"`
	}
	err := c.do(ctx, call{op: "POST /v1/refunds/retry", want: http.StatusOK, out: &out,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.RetryRefunds(ctx, body) }})
	return out.Retried, err
}

// Refund is an operator's refund of one REFUND_REQUIRED payment attempt.
type Refund struct {
	// Manual records a refund made outside lapse (the gateway's console):
	// the gateway is not asked. Note, required then, says how; RefundID
	// names the gateway's refund when known.
	Manual   bool
	Note     string
	RefundID string
}

// RefundAnswer is what became of a refund.
type RefundAnswer struct {
	// Order is the order after it, with its attempts.
	Order order.Order `json:"order"`
	// Pending: the gateway accepted the refund and is still processing it
	// (the server answered 202); the attempt stays REFUND_REQUIRED.
	Pending bool `json:"pending"`
	// RefundID is the gateway's id of the refund.
	RefundID string `json:"refund_id,omitempty"`
}

// RefundPayment gives back the money of the payment attempt paymentID now,
// through the gateway, or with r.Manual records a refund made by hand: POST
// /v1/payments/{payment_id}/refund. The gateway is asked under the
// attempt's own key, so asking again (retried on a 503) makes no second
// refund. Errors: 404 payment_not_found; 409 not_refundable (the attempt
// owes nothing), no_refunder (the gateway cannot refund: record one made
// by hand); 502 gateway_unavailable (nothing recorded: ask again); 400
// invalid_field (a manual refund without a note).
func (c *Client) RefundPayment(ctx context.Context, paymentID string, r Refund) (RefundAnswer, error) {
	var body gen.RefundPaymentJSONRequestBody
	if r.Manual {
		body.Manual = &r.Manual
	}
	if r.Note != "" {
		body.Note = &r.Note
	}
	if r.RefundID != "" {
		body.RefundId = &r.RefundID
	}
	var a RefundAnswer
	err := c.do(ctx, call{op: "POST /v1/payments/" + url.PathEscape(paymentID) + "/refund", want: http.StatusOK, also: http.StatusAccepted,
		out: &a, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.RefundPayment(ctx, paymentID, body) }})
	return a, err
}

// Healthz checks that the server answers (GET /healthz).
func (c *Client) Healthz(ctx context.Context) error {
	return c.do(ctx, call{op: "GET /healthz", want: http.StatusOK, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.Healthz(ctx) }})
}

// Ready checks that the server and its store answer (GET /readyz); a
// server that is not ready is a *Error with Code CodeNotReady (after the
// retries).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, call{op: "GET /readyz", want: http.StatusOK, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.Readyz(ctx) }})
}

// Metrics returns the server's Prometheus metrics, in the text exposition
// format (GET /metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.do(ctx, call{op: "GET /metrics", want: http.StatusOK, out: &b, retry: true,
		send: func(ctx context.Context) (*http.Response, error) { return c.gen.Metrics(ctx) }})
	return b, err
}

// Notification is a payment gateway's report of one payment attempt (POST
// /v1/payments/notify): what a gateway adapter, a test or a benchmark
// sends in the gateway's place.
type Notification struct {
	OrderID   string
	PaymentID string
	// Succeeded: the payment succeeded; else it failed.
	Succeeded   bool
	AmountCents int64
	// Currency is the ISO 4217 code of AmountCents; "" for the order's.
	Currency string
}

// NotifyResult is what lapse made of a notification.
type NotifyResult struct {
	// Result is paid, failed, refund_required, no_change, replayed or
	// conflict (a report of an attempt that had ended otherwise: nothing
	// changed).
	Result string      `json:"result"`
	Order  order.Order `json:"order"`
}

// NotifyPayment sends n signed with secret (lapse serve --callback-secret).
// Each send is signed afresh, so a retry (on a transport error or a 503) is
// a new message, not a replay; lapse applies a payment's outcome once.
func (c *Client) NotifyPayment(ctx context.Context, n Notification, secret []byte) (NotifyResult, error) {
	status := gen.NotifyPaymentJSONBodyStatusFAILED
	if n.Succeeded {
		status = gen.NotifyPaymentJSONBodyStatusSUCCEEDED
	}
	body, err := json.Marshal(gen.NotifyPaymentJSONRequestBody{OrderId: n.OrderID, PaymentId: n.PaymentID, Status: status,
		AmountCents: int(n.AmountCents), Currency: optional(n.Currency)})
	if err != nil {
		return NotifyResult{}, fmt.Errorf("lapse client: encoding the notification: %w", err)
	}
	var res NotifyResult
	err = c.do(ctx, call{op: "POST /v1/payments/notify", want: http.StatusOK, out: &res, retry: true,
		send: func(ctx context.Context) (*http.Response, error) {
			sig := &gen.NotifyPaymentParams{LapseSignature: payment.Sign(secret, time.Now(), body)}
			return c.gen.NotifyPaymentWithBody(ctx, sig, "application/json", bytes.NewReader(body))
		}})
	return res, err
}

func genItems(items []order.Item) []gen.Item {
	out := make([]gen.Item, len(items))
	for i, it := range items {
		out[i] = gen.Item{Sku: it.SKU, Qty: int(it.Qty)}
	}
	return out
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
