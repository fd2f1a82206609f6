package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Reservation statuses, as an inventory reports them (GET /reservations/{id}).
const (
	StatusReserved  = "RESERVED"
	StatusReleased  = "RELEASED"
	StatusConfirmed = "CONFIRMED"
)

// Reservation is what an inventory reports of one reservation.
type Reservation struct {
	ReservationID string `json:"reservation_id"`
	// OrderID is the order the reserve named, "" when it named none.
	OrderID string `json:"order_id,omitempty"`
	// Status is RESERVED while the stock is held for it, then RELEASED
	// or CONFIRMED.
	Status string `json:"status"`
	Items  []Item `json:"items"`
	// Ledger holds the reservation's applied commands, in seq order.
	Ledger []LedgerRow `json:"ledger"`
}

// LedgerRow is one applied (reservation, action) of an inventory's ledger.
type LedgerRow struct {
	Seq    int64  `json:"seq"`
	Action Action `json:"action"`
	// TaskID is the sender's Idempotency-Key (lapse's stock task id).
	TaskID    string    `json:"task_id"`
	At        time.Time `json:"at"`
	Tombstone bool      `json:"tombstone,omitempty"`
}

// ErrUnknownReservation is an inventory's answer that it never saw a
// reservation (HTTP 404 unknown_reservation).
var ErrUnknownReservation = errors.New("inventory: unknown reservation")

// Inspector reads what an inventory holds under a reservation, so that lapse
// can check a reservation a caller made before an order takes it. It is
// optional: the HTTP client implements it (GET /reservations/{id}); the AMQP
// transport carries commands only and does not. An error other than
// ErrUnknownReservation means the inventory did not say.
type Inspector interface {
	Reservation(ctx context.Context, id string) (Reservation, error)
}

// maxReservationBody bounds a reservation's answer: 100 items and a few
// ledger rows of 200-character ids are far below it.
const maxReservationBody = 1 << 20

// Reservation implements Inspector: GET {baseURL}/reservations/{id}, under
// the client's timeout, no redirect followed.
func (c *httpClient) Reservation(ctx context.Context, id string) (Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + "/reservations/" + url.PathEscape(id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: %w", id, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: %w", id, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReservationBody+1))
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: reading the answer (status %d): %w", id, resp.StatusCode, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && errorCode(raw) == "unknown_reservation":
		return Reservation{}, fmt.Errorf("inventory: http: reservation %s: %w", id, ErrUnknownReservation)
	case resp.StatusCode != http.StatusOK:
		// A 404 without unknown_reservation is a route the server does
		// not have: a wrong URL must not pass for a reservation never made.
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: status %d %s", id, resp.StatusCode, errorCode(raw))
	case len(raw) > maxReservationBody:
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: answer over %d bytes", id, maxReservationBody)
	}
	var r Reservation
	if err := json.Unmarshal(raw, &r); err != nil {
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: not a reservation: %w", id, err)
	}
	if r.Status == "" {
		return Reservation{}, fmt.Errorf("inventory: http: read reservation %s: the answer has no status", id)
	}
	return r, nil
}

// ItemsDiff compares what an order holds with what a reservation holds, as
// units per SKU (lines of one SKU added up, so an inventory that splits a
// line holds the same stock), and describes every SKU whose units differ —
// "tee: order 2, reservation 1" — in SKU order; nil when they agree.
func ItemsDiff(order, reservation []Item) []string {
	units := func(items []Item) map[string]int64 {
		m := make(map[string]int64, len(items))
		for _, it := range items {
			m[it.SKU] += it.Qty
		}
		return m
	}
	o, r := units(order), units(reservation)
	var skus []string
	for sku, n := range o {
		if r[sku] != n {
			skus = append(skus, sku)
		}
	}
	for sku := range r {
		if _, ok := o[sku]; !ok && r[sku] != 0 {
			skus = append(skus, sku)
		}
	}
	slices.Sort(skus)
	var out []string
	for _, sku := range skus {
		out = append(out, fmt.Sprintf("%q: order %d, reservation %d", sku, o[sku], r[sku]))
	}
	return out
}

// DescribeDiff joins ItemsDiff's lines for a message, at most three named.
func DescribeDiff(diff []string) string {
	if len(diff) > 3 {
		return strings.Join(diff[:3], "; ") + fmt.Sprintf("; and %d more", len(diff)-3)
	}
	return strings.Join(diff, "; ")
}
