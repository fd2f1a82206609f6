package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// The statuses of the shop's own order row. lapse's hooks move a row from
// pending to paid or cancelled, in the same commit as lapse's own order.
const (
	statusPending   = "pending"
	statusPaid      = "paid"
	statusCancelled = "cancelled"
)

// shopOrder is the shop's own row in its orders table: what the shop shows
// the buyer. lapse keeps its own copy (lapse_orders) with the stock and the
// timer; the two always move in one transaction.
type shopOrder struct {
	ID          string    `json:"id"`
	Status      string    `json:"status"`
	AmountCents int64     `json:"amount_cents"`
	PayBy       time.Time `json:"pay_by"` // lapse's deadline: unpaid by then, the order is cancelled
}

// errDuplicate is the shop's insert refused on its primary key.
var errDuplicate = errors.New("shop: an order with this id exists")

// errNoOrder is a read of an order the shop does not have.
var errNoOrder = errors.New("shop: no such order")

// database is the shop's own database, PostgreSQL (postgres.go) or MySQL
// (mysql.go): lapse's tables and the shop's orders table side by side, and
// the shop's transactions, which lapse joins.
type database interface {
	// inTx runs fn in a new transaction of the shop's, and commits it if
	// fn returns nil; otherwise it rolls back and returns fn's error.
	inTx(ctx context.Context, fn func(tx shopTx) error) error
	// order reads the shop's row of order id (errNoOrder if none).
	order(ctx context.Context, id string) (shopOrder, error)
	// lapseStore is lapse's store on the shop's pool, with the shop's hooks.
	lapseStore() store.Store
	close()
}

// shopTx is one open transaction of the shop's.
type shopTx interface {
	// lapse binds lapse to the transaction: pass it to the …Tx methods.
	lapse() store.Tx
	// insertOrder adds the shop's row (errDuplicate on a taken id).
	insertOrder(ctx context.Context, o shopOrder) error
}

// shop is a small order service that embeds lapse: lapse cancels the orders
// not paid in time and releases their stock, and the shop's hooks keep the
// shop's own orders table in step, in lapse's transactions.
type shop struct {
	db    database
	lapse *lapse.Service
	// prices is the catalogue, in cents per unit: the shop prices an order
	// itself, never from what the client says.
	prices map[string]int64
	// payWindow is how long a buyer has to pay an order.
	payWindow time.Duration
	// webhookSecrets sign the payment provider's callbacks (two while one is
	// rotated): an unsigned "paid" would hand out goods for free.
	webhookSecrets [][]byte
	log            *slog.Logger
}

// maxTxAttempts bounds the runs of one transaction that lost a conflict
// (lapse.IsRetryable): a deadlock or serialization failure is won on the
// next run almost always, and a client is better told to come back than
// kept waiting.
const maxTxAttempts = 3

// errBusy is a transaction that lost its conflicts maxTxAttempts times.
var errBusy = errors.New("shop: the transaction kept losing conflicts")

// inTx runs fn in a transaction, and runs the whole transaction again when
// lapse reports that it lost a conflict: lapse never retries a transaction
// it does not own, and only a run from the start sees the rows as they are.
func (s *shop) inTx(ctx context.Context, fn func(tx shopTx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.db.inTx(ctx, fn)
		if !lapse.IsRetryable(err) {
			return err
		}
		if attempt == maxTxAttempts {
			return fmt.Errorf("%w: %w", errBusy, err)
		}
		s.log.InfoContext(ctx, "transaction lost a conflict, running it again", "attempt", attempt, "err", err)
	}
}

// routes is the shop's HTTP API.
func (s *shop) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /checkout", s.checkout)
	mux.HandleFunc("POST /webhook/payment", s.paymentWebhook)
	mux.HandleFunc("POST /orders/{id}/cancel", s.cancel)
	mux.HandleFunc("GET /orders/{id}", s.get)
	return mux
}

// checkoutRequest is the body of POST /checkout.
type checkoutRequest struct {
	// ID is the client's id for this checkout, so that a retried request
	// cannot order twice (the retry gets 409 order_exists); empty, lapse
	// makes one (a time-ordered UUID).
	ID    string       `json:"id"`
	Items []order.Item `json:"items"`
}

// maxQty bounds one line of an order (and so its price).
const maxQty = 100

// checkout places an order: lapse's order (stock reserved, timer set) and
// the shop's row commit in one transaction, or neither does.
func (s *shop) checkout(w http.ResponseWriter, r *http.Request) {
	var req checkoutRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Items) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_field", "items: an order needs at least one item")
		return
	}
	var amount int64
	for _, it := range req.Items {
		price, ok := s.prices[it.SKU]
		if !ok {
			writeError(w, http.StatusBadRequest, "unknown_sku", fmt.Sprintf("items: the shop does not sell %q", it.SKU))
			return
		}
		if it.Qty < 1 || it.Qty > maxQty {
			writeError(w, http.StatusBadRequest, "invalid_field", fmt.Sprintf("items: qty must be 1-%d", maxQty))
			return
		}
		amount += price * it.Qty
	}
	var row shopOrder
	err := s.inTx(r.Context(), func(tx shopTx) error {
		res, err := s.lapse.CreateOrderTx(r.Context(), tx.lapse(), lapse.CreateOrderRequest{
			ID: req.ID, Items: req.Items, AmountCents: amount, Timeout: s.payWindow})
		if err != nil {
			return fmt.Errorf("create lapse's order: %w", err)
		}
		// The shop's row after lapse's: it shows the buyer lapse's deadline.
		row = shopOrder{ID: res.Order.ID, Status: statusPending, AmountCents: amount, PayBy: res.Order.ExpiresAt}
		return tx.insertOrder(r.Context(), row)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, row)
}

// paymentEvent is the payment provider's callback body.
type paymentEvent struct {
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	Status      string `json:"status"` // SUCCEEDED or FAILED
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// maxWebhookBody bounds a callback body: the provider's are small.
const maxWebhookBody = 64 << 10

// paymentWebhook takes the provider's word on a payment, signed as
// payment.Sign does (header Lapse-Signature). lapse records it in the
// shop's transaction and its OnPaid hook marks the shop's row paid in it.
// A 2xx tells the provider to stop sending; anything else, to send again.
func (s *shop) paymentWebhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", "the callback body is too large")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", "the callback body could not be read")
		return
	}
	signed, err := payment.VerifyCallback(r.Header.Get(payment.SignatureHeader), body, s.webhookSecrets, time.Now(), payment.DefaultTolerance)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "bad_signature", "the callback's signature does not verify")
		return
	}
	var ev paymentEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", "the callback body is not the expected JSON")
		return
	}
	var res store.PaymentResult
	err = s.inTx(r.Context(), func(tx shopTx) error {
		var err error
		res, err = s.lapse.NotifyTx(r.Context(), tx.lapse(), lapse.Notification{
			OrderID: ev.OrderID, PaymentID: ev.PaymentID, Status: lapse.PaymentStatus(ev.Status),
			AmountCents: ev.AmountCents, Currency: ev.Currency,
			CallbackID: signed.ID, // the same signed message again changes nothing
		})
		if err != nil {
			return fmt.Errorf("record the payment of order %s: %w", ev.OrderID, err)
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Outcome == store.OutcomeRefundRequired {
		// Money for an order that cannot take it (cancelled, say): lapse
		// flagged it and wrote order.refund_required to its outbox.
		s.log.WarnContext(r.Context(), "a payment arrived that cannot pay its order: refund it", "order_id", ev.OrderID)
	}
	writeJSON(w, http.StatusOK, map[string]string{"order_status": string(res.Order.Status)})
}

// cancel is the buyer's cancel of an unpaid order: lapse releases the stock
// and its OnCancelled hook marks the shop's row, in the shop's transaction.
// (A real shop checks first that the caller is the order's buyer.)
func (s *shop) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.inTx(r.Context(), func(tx shopTx) error {
		if _, err := s.lapse.CancelTx(r.Context(), tx.lapse(), id); err != nil {
			return fmt.Errorf("cancel order %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.get(w, r)
}

// get answers the shop's row of an order.
func (s *shop) get(w http.ResponseWriter, r *http.Request) {
	o, err := s.db.order(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// fail answers err: a stable code for what the client can act on, and a
// bare 500 for the rest (logged, never shown: it may name the shop's SQL).
func (s *shop) fail(w http.ResponseWriter, r *http.Request, err error) {
	var invalid *lapse.InvalidError
	switch {
	case errors.As(err, &invalid):
		writeError(w, http.StatusBadRequest, invalid.Code, invalid.Error())
	case errors.Is(err, lapse.ErrNotFound), errors.Is(err, errNoOrder):
		writeError(w, http.StatusNotFound, "not_found", "no such order")
	case errors.Is(err, lapse.ErrOrderExists), errors.Is(err, errDuplicate):
		writeError(w, http.StatusConflict, "order_exists", "an order with this id exists")
	case errors.Is(err, lapse.ErrInsufficientStock):
		writeError(w, http.StatusConflict, "insufficient_stock", "not enough stock for the order")
	case errors.Is(err, lapse.ErrNotPending):
		writeError(w, http.StatusConflict, "not_pending", "the order is paid, being paid or cancelled")
	case errors.Is(err, lapse.ErrOrderExpired):
		writeError(w, http.StatusConflict, "order_expired", "the order's payment window has closed")
	case errors.Is(err, errBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", "try again")
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
	}
}

// maxBody bounds a client's request body.
const maxBody = 64 << 10

// decode reads a JSON body into v, or answers 400 and returns false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", "the body is not the expected JSON: "+err.Error())
		return false
	}
	return true
}

// apiError is the body of every error answer.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]apiError{"error": {Code: code, Message: message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone: nothing to do
}
