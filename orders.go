package lapse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Limits on what an order may hold, so one request cannot make a huge transaction.
const (
	MaxItems = 100
	MaxQty   = 1_000_000
	// MaxAvailable bounds a SKU's available units: far from int64's end, so
	// no sum of counters can overflow (SQLite would turn it into a REAL).
	MaxAvailable = 1_000_000_000_000
	maxIDLen     = 64
	maxKeyLen    = 255
	// maxReservationLen bounds a reservation id: the inventory's own, so
	// lapse asks only that it be text.
	maxReservationLen = 255
	minTimeout        = time.Millisecond
	maxAmountCts      = 1 << 53 // exact in a JSON number
)

var (
	idRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)
	currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)
)

// CreateOrderRequest is an order to place.
type CreateOrderRequest struct {
	// ID is the order id; empty makes a time-ordered UUID (with
	// Config.InventoryReserve and an IdempotencyKey, a UUID derived from the
	// key and the request, so that its retries reserve the stock once).
	ID    string
	Items []order.Item
	// AmountCents is what the buyer pays, in the currency's minor unit.
	AmountCents int64
	// Currency is ISO 4217; empty means Config.DefaultCurrency.
	Currency string
	// Timeout is the payment window; zero means Config.DefaultTimeout.
	Timeout time.Duration
	// ExpiresAt, instead of Timeout, is when the window closes: the
	// timeout is the time from now (the service's clock) to it.
	ExpiresAt time.Time
	// IdempotencyKey makes a retried request return the order the first one
	// made, with stock reserved once.
	IdempotencyKey string
	// ReservationID names the stock the caller reserved at the remote
	// inventory for this order: required when Config.Inventory is set, and
	// refused when lapse holds the stock itself.
	ReservationID string
}

// CreateOrderResult is the order and whether it was made by an earlier
// request with the same idempotency key.
type CreateOrderResult struct {
	Order    order.Order
	Replayed bool
}

// CreateOrder reserves the items' stock and places a PENDING order whose
// cancel timer fires at cancel_after, all or nothing.
func (s *Service) CreateOrder(ctx context.Context, r CreateOrderRequest) (CreateOrderResult, error) {
	return s.create(ctx, s.own(), r)
}

// create is CreateOrder and CreateOrderTx.
func (s *Service) create(ctx context.Context, ops ops, r CreateOrderRequest) (CreateOrderResult, error) {
	p, err := s.validateCreate(r)
	if err != nil {
		return CreateOrderResult{}, err
	}
	var res store.CreateOrderResult
	switch {
	case s.cfg.InventoryReserve && ops.joined:
		return CreateOrderResult{}, ErrReserveInTx
	case s.cfg.InventoryReserve:
		res, err = s.createReserving(ctx, p, r.ID == "" && r.IdempotencyKey != "")
	default:
		if p.ReservationID != "" && !ops.joined {
			// Read before the store's transaction: no network call runs
			// inside one (so not in a caller's transaction either: there the
			// reservation is taken as sent, and reconcile --check-items
			// finds a difference later).
			p.ReplayOnly = s.checkReservation(ctx, p, r.ID != "")
			if p.ReplayOnly != nil && p.IdempotencyKey == "" {
				return CreateOrderResult{}, p.ReplayOnly // nothing to replay
			}
		}
		res, err = ops.create(ctx, p)
	}
	if err != nil {
		return CreateOrderResult{}, err
	}
	if !res.Replayed {
		if !ops.joined {
			s.metrics.created.Inc()
		}
		s.schedule(ctx, res.Order.ID, res.Order.CancelAfter)
		s.scheduleReminder(ctx, res.Order)
	} else if res.Order.Status == order.Pending {
		// The first request may have committed without reaching its
		// schedule (its answer was lost: that is why the client retries).
		// Setting the timer again is harmless: Schedule is an upsert.
		s.schedule(ctx, res.Order.ID, res.Order.CancelAfter)
	}
	return CreateOrderResult{Order: res.Order, Replayed: res.Replayed}, nil
}

func (s *Service) validateCreate(r CreateOrderRequest) (store.CreateOrderParams, error) {
	p := store.CreateOrderParams{
		ID: r.ID, AmountCents: r.AmountCents, Currency: r.Currency, Timeout: r.Timeout,
		Grace: s.cfg.Grace, IdempotencyKey: r.IdempotencyKey,
	}
	if p.ID != "" && (len(p.ID) > maxIDLen || !idRE.MatchString(p.ID)) {
		return p, invalid("id", "want 1-%d characters of A-Z a-z 0-9 _ . : - starting with a letter or digit", maxIDLen)
	}
	commanded := s.cfg.OrderService != nil
	switch {
	case commanded && p.ID == "":
		return p, invalid("id", "required: the order service's own order id")
	case commanded && r.ReservationID != "":
		return p, invalid("reservation_id", "the order service owns the order and its stock: lapse holds no reservation")
	case len(r.Items) == 0 && !commanded:
		return p, invalid("items", "an order needs at least one item")
	}
	if len(r.Items) > MaxItems {
		return p, invalid("items", "at most %d items per order", MaxItems)
	}
	seen := make(map[string]bool, len(r.Items))
	for i, it := range r.Items {
		field := "items[" + strconv.Itoa(i) + "]"
		if err := validSKU(field+".sku", it.SKU); err != nil {
			return p, err
		}
		if seen[it.SKU] {
			return p, invalid(field+".sku", "sku %q appears twice; send one line per sku", it.SKU)
		}
		seen[it.SKU] = true
		if it.Qty <= 0 || it.Qty > MaxQty {
			return p, invalid(field+".qty", "must be between 1 and %d", MaxQty)
		}
	}
	if !commanded {
		// With an order service the items are informational: checked,
		// never held, never stored.
		p.Items = append([]order.Item(nil), r.Items...)
	}
	if p.AmountCents < 0 || p.AmountCents > maxAmountCts {
		return p, invalid("amount_cents", "must be between 0 and %d", int64(maxAmountCts))
	}
	if p.Currency == "" {
		p.Currency = s.cfg.DefaultCurrency
	} else if !currencyRE.MatchString(p.Currency) {
		return p, invalid("currency", "want three capital letters (ISO 4217), got %q", p.Currency)
	}
	if cg, ok := s.cfg.Gateway.(payment.CurrencyGateway); ok && !cg.AcceptsCurrency(p.Currency) {
		// Refused now, not found out at the deadline: the gateway could
		// never take this order's money.
		return p, &InvalidError{Code: "currency_unsupported", Field: "currency",
			Message: fmt.Sprintf("the payment gateway cannot take %s", p.Currency)}
	}
	if !r.ExpiresAt.IsZero() {
		if p.Timeout != 0 {
			return p, invalid("expires_at", "send expires_at or a timeout, not both")
		}
		if p.Timeout = time.Until(r.ExpiresAt); p.Timeout <= 0 {
			return p, invalid("expires_at", "must be in the future")
		}
	}
	if p.Timeout == 0 {
		p.Timeout = s.cfg.DefaultTimeout
	}
	if p.Timeout < minTimeout || p.Timeout > s.cfg.MaxTimeout {
		return p, invalid("timeout_seconds", "must be between 0.001 and %g", s.cfg.MaxTimeout.Seconds())
	}
	if len(p.IdempotencyKey) > maxKeyLen {
		return p, invalid("Idempotency-Key", "at most %d characters", maxKeyLen)
	}
	switch {
	case s.cfg.InventoryReserve && r.ReservationID != "":
		return p, invalid("reservation_id", "lapse reserves the stock at the inventory itself here (--inventory-reserve): send no reservation_id")
	case s.cfg.InventoryReserve:
	case s.dispatch == nil && r.ReservationID != "":
		return p, invalid("reservation_id", "lapse holds the stock itself here (--inventory local): send no reservation_id")
	case s.dispatch != nil && r.ReservationID == "":
		return p, &InvalidError{Code: "reservation_required", Field: "reservation_id",
			Message: "the stock is held by the inventory service: reserve it there and send its reservation_id"}
	case len(r.ReservationID) > maxReservationLen || (r.ReservationID != "" && !plainText(r.ReservationID)):
		return p, invalid("reservation_id", "want 1-%d characters of UTF-8 text", maxReservationLen)
	}
	p.ReservationID = r.ReservationID
	// The hash covers the request as the client sent it (ID too), so a key
	// reused for a different order is refused rather than replayed.
	// (Reservation is left out when empty: keys taken before it existed
	// still replay.)
	b, _ := json.Marshal(struct {
		ID          string
		Items       []order.Item
		Amount      int64
		Currency    string
		Timeout     time.Duration
		Reservation string `json:",omitempty"`
	}{r.ID, r.Items, p.AmountCents, p.Currency, p.Timeout, r.ReservationID})
	sum := sha256.Sum256(b)
	p.RequestHash = hex.EncodeToString(sum[:])
	switch {
	case p.ID == "" && s.cfg.InventoryReserve && p.IdempotencyKey != "":
		// The reservation is named by the order id: a retry of this
		// request must find the reserve of the first try, not make another.
		p.ID = keyedOrderID(p.IdempotencyKey, p.RequestHash)
	case p.ID == "":
		p.ID = uuid.Must(uuid.NewV7()).String()
	}
	if s.cfg.InventoryReserve {
		p.ReservationID = p.ID // the reserve's idempotency at the inventory
	}
	return p, nil
}

// keyedNamespace is the UUID namespace of keyedOrderID.
var keyedNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lapsehq/lapse#idempotency-key"))

// keyedOrderID is the id of an order created without one under an
// idempotency key when lapse reserves its stock (--inventory-reserve): a
// name-based UUID of the key and the request, so that every try of one
// request — concurrent ones, and retries after an answer was lost — names
// the same reservation, and a different request under the same key does not.
func keyedOrderID(key, requestHash string) string {
	return uuid.NewSHA1(keyedNamespace, []byte(key+"\n"+requestHash)).String()
}

func validSKU(field, sku string) error {
	if sku == "" || len(sku) > maxIDLen || !idRE.MatchString(sku) {
		return invalid(field, "want 1-%d characters of A-Z a-z 0-9 _ . : - starting with a letter or digit", maxIDLen)
	}
	return nil
}

// Cancel is the buyer's cancel of a PENDING order: stock goes back at once.
// ErrNotPending for any other status.
func (s *Service) Cancel(ctx context.Context, id string) (order.Order, error) {
	return s.cancelOrder(ctx, s.own(), id)
}

// cancelOrder is Cancel and CancelTx.
func (s *Service) cancelOrder(ctx context.Context, ops ops, id string) (order.Order, error) {
	o, err := ops.cancel(ctx, id)
	if err != nil || ops.joined {
		return o, err // the caller may roll back: the timer stays, harmless
	}
	s.metrics.cancelled.WithLabelValues(string(order.ReasonBuyer)).Inc()
	s.unschedule(ctx, id)
	return o, nil
}

// Extend moves the deadline of a PENDING order whose payment window is
// still open to expiresAt — later or earlier, at most MaxTimeout from now —
// keeping its grace, and sets its timer for the new cancel_after. A timer
// set earlier that a backend cannot take back (amqp) fires harmlessly: the
// store's guard (cancel_after <= now) skips the order and the cancel
// pipeline sets it again for the new deadline. Errors: an InvalidError
// (expires_at), ErrNotFound, ErrOrderExpired (the window has closed: the
// timer may be cancelling the order), ErrNotPending.
func (s *Service) Extend(ctx context.Context, id string, expiresAt time.Time) (order.Order, error) {
	return s.extend(ctx, s.own(), id, expiresAt)
}

// extend is Extend and ExtendTx.
func (s *Service) extend(ctx context.Context, ops ops, id string, expiresAt time.Time) (order.Order, error) {
	now := time.Now()
	switch {
	case !expiresAt.After(now):
		return order.Order{}, invalid("expires_at", "must be in the future")
	case expiresAt.Sub(now) > s.cfg.MaxTimeout:
		return order.Order{}, invalid("expires_at", "must be at most %g seconds from now", s.cfg.MaxTimeout.Seconds())
	}
	o, err := ops.extend(ctx, store.ExtendParams{OrderID: id, ExpiresAt: expiresAt})
	if errors.Is(err, store.ErrInvalid) {
		// In the future by this clock, not by the store's.
		return order.Order{}, invalid("expires_at", "must be in the future (by the store's clock)")
	}
	if err != nil {
		return o, err
	}
	s.schedule(ctx, o.ID, o.CancelAfter)
	s.scheduleReminder(ctx, o)
	return o, nil
}
