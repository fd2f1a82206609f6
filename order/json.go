package order

import (
	"encoding/json"
	"time"
)

// TimeFormat is how every time leaves lapse: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// orderJSON is the wire shape of an order, shared by the HTTP API and the
// outbox payloads so consumers see one representation.
type orderJSON struct {
	ID              string         `json:"id"`
	Status          Status         `json:"status"`
	Items           []Item         `json:"items"`
	AmountCents     int64          `json:"amount_cents"`
	Currency        string         `json:"currency"`
	CreatedAt       string         `json:"created_at"`
	ExpiresAt       string         `json:"expires_at"`
	CancelAfter     string         `json:"cancel_after"`
	PaidAt          string         `json:"paid_at,omitempty"`
	CancelledAt     string         `json:"cancelled_at,omitempty"`
	CancelReason    CancelReason   `json:"cancel_reason,omitempty"`
	PaymentID       string         `json:"payment_id,omitempty"`
	RefundRequired  bool           `json:"refund_required"`
	PaymentAttempts int            `json:"payment_attempts"`
	Version         int64          `json:"version"`
	Payments        *[]paymentJSON `json:"payments,omitempty"`
}

// paymentJSON is the wire shape of a payment attempt.
type paymentJSON struct {
	PaymentID   string        `json:"payment_id"`
	Status      PaymentStatus `json:"status"`
	AmountCents int64         `json:"amount_cents,omitempty"`
	CreatedAt   string        `json:"created_at"`
	UpdatedAt   string        `json:"updated_at"`
}

// MarshalJSON renders the API shape of an order.
func (o Order) MarshalJSON() ([]byte, error) {
	j := orderJSON{
		ID: o.ID, Status: o.Status, Items: o.Items, AmountCents: o.AmountCents, Currency: o.Currency,
		CreatedAt: FormatTime(o.CreatedAt), ExpiresAt: FormatTime(o.ExpiresAt), CancelAfter: FormatTime(o.CancelAfter),
		CancelReason: o.CancelReason, PaymentID: o.PaymentID, RefundRequired: o.RefundRequired,
		PaymentAttempts: o.PaymentAttempts, Version: o.Version,
	}
	if j.Items == nil {
		j.Items = []Item{}
	}
	if o.Payments != nil { // loaded (a read of one order): listed, [] when none
		ps := make([]paymentJSON, len(o.Payments))
		for i, p := range o.Payments {
			ps[i] = paymentJSON{PaymentID: p.PaymentID, Status: p.Status, AmountCents: p.AmountCents,
				CreatedAt: FormatTime(p.CreatedAt), UpdatedAt: FormatTime(p.UpdatedAt)}
		}
		j.Payments = &ps
	}
	if !o.PaidAt.IsZero() {
		j.PaidAt = FormatTime(o.PaidAt)
	}
	if !o.CancelledAt.IsZero() {
		j.CancelledAt = FormatTime(o.CancelledAt)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the API shape of an order (used by the Go client and tests).
func (o *Order) UnmarshalJSON(b []byte) error {
	var j orderJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	parse := func(s string) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		return time.Parse(time.RFC3339Nano, s)
	}
	var err error
	*o = Order{
		ID: j.ID, Status: j.Status, Items: j.Items, AmountCents: j.AmountCents, Currency: j.Currency,
		CancelReason: j.CancelReason, PaymentID: j.PaymentID, RefundRequired: j.RefundRequired,
		PaymentAttempts: j.PaymentAttempts, Version: j.Version,
	}
	type field struct {
		dst *time.Time
		src string
	}
	times := []field{{&o.CreatedAt, j.CreatedAt}, {&o.ExpiresAt, j.ExpiresAt}, {&o.CancelAfter, j.CancelAfter}, {&o.PaidAt, j.PaidAt}, {&o.CancelledAt, j.CancelledAt}}
	if j.Payments != nil {
		o.Payments = make([]Payment, len(*j.Payments))
		for i, p := range *j.Payments {
			o.Payments[i] = Payment{PaymentID: p.PaymentID, Status: p.Status, AmountCents: p.AmountCents}
			times = append(times, field{&o.Payments[i].CreatedAt, p.CreatedAt}, field{&o.Payments[i].UpdatedAt, p.UpdatedAt})
		}
	}
	for _, f := range times {
		if *f.dst, err = parse(f.src); err != nil {
			return err
		}
	}
	return nil
}
