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
	ReservationID   string         `json:"reservation_id,omitempty"`
	Tasks           *[]taskJSON    `json:"tasks,omitempty"`
	Commands        []commandJSON  `json:"commands,omitempty"`
}

// taskJSON is the wire shape of a stock task.
type taskJSON struct {
	ID            string     `json:"id"`
	OrderID       string     `json:"order_id"`
	Action        TaskAction `json:"action"`
	ReservationID string     `json:"reservation_id"`
	Items         []Item     `json:"items"`
	Status        TaskStatus `json:"status"`
	Attempts      int        `json:"attempts"`
	Result        string     `json:"result,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     string     `json:"created_at"`
	NextAt        string     `json:"next_at,omitempty"`
	DoneAt        string     `json:"done_at,omitempty"`
	DeadAt        string     `json:"dead_at,omitempty"`
}

// MarshalJSON renders the API shape of a stock task.
func (t StockTask) MarshalJSON() ([]byte, error) { return json.Marshal(t.wire()) }

func (t StockTask) wire() taskJSON {
	j := taskJSON{ID: t.ID, OrderID: t.OrderID, Action: t.Action, ReservationID: t.ReservationID, Items: t.Items,
		Status: t.Status, Attempts: t.Attempts, Result: t.Result, LastError: t.LastError, CreatedAt: FormatTime(t.CreatedAt)}
	if j.Items == nil {
		j.Items = []Item{}
	}
	if t.Status == TaskPending && !t.NextAt.IsZero() {
		j.NextAt = FormatTime(t.NextAt)
	}
	if !t.DoneAt.IsZero() {
		j.DoneAt = FormatTime(t.DoneAt)
	}
	if !t.DeadAt.IsZero() {
		j.DeadAt = FormatTime(t.DeadAt)
	}
	return j
}

// UnmarshalJSON reads the API shape of a stock task.
func (t *StockTask) UnmarshalJSON(b []byte) error {
	var j taskJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	return t.fromWire(j)
}

func (t *StockTask) fromWire(j taskJSON) error {
	*t = StockTask{ID: j.ID, OrderID: j.OrderID, Action: j.Action, ReservationID: j.ReservationID, Items: j.Items,
		Status: j.Status, Attempts: j.Attempts, Result: j.Result, LastError: j.LastError}
	for _, f := range []struct {
		dst *time.Time
		src string
	}{{&t.CreatedAt, j.CreatedAt}, {&t.NextAt, j.NextAt}, {&t.DoneAt, j.DoneAt}, {&t.DeadAt, j.DeadAt}} {
		if f.src == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, f.src)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	return nil
}

// commandJSON is the wire shape of a cancel command of order-service mode.
type commandJSON struct {
	ID          string     `json:"id"`
	OrderID     string     `json:"order_id"`
	CancelAfter string     `json:"cancel_after"`
	Status      TaskStatus `json:"status"`
	Attempts    int        `json:"attempts"`
	Result      string     `json:"result,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   string     `json:"created_at"`
	NextAt      string     `json:"next_at,omitempty"`
	DoneAt      string     `json:"done_at,omitempty"`
	DeadAt      string     `json:"dead_at,omitempty"`
}

// MarshalJSON renders the API shape of a command.
func (c Command) MarshalJSON() ([]byte, error) { return json.Marshal(c.wire()) }

func (c Command) wire() commandJSON {
	j := commandJSON{ID: c.ID, OrderID: c.OrderID, CancelAfter: FormatTime(c.CancelAfter), Status: c.Status,
		Attempts: c.Attempts, Result: c.Result, LastError: c.LastError, CreatedAt: FormatTime(c.CreatedAt)}
	if c.Status == TaskPending && !c.NextAt.IsZero() {
		j.NextAt = FormatTime(c.NextAt)
	}
	if !c.DoneAt.IsZero() {
		j.DoneAt = FormatTime(c.DoneAt)
	}
	if !c.DeadAt.IsZero() {
		j.DeadAt = FormatTime(c.DeadAt)
	}
	return j
}

// UnmarshalJSON reads the API shape of a command.
func (c *Command) UnmarshalJSON(b []byte) error {
	var j commandJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	return c.fromWire(j)
}

func (c *Command) fromWire(j commandJSON) error {
	*c = Command{ID: j.ID, OrderID: j.OrderID, Status: j.Status, Attempts: j.Attempts, Result: j.Result, LastError: j.LastError}
	return parseTimes(
		timeField{&c.CancelAfter, j.CancelAfter}, timeField{&c.CreatedAt, j.CreatedAt},
		timeField{&c.NextAt, j.NextAt}, timeField{&c.DoneAt, j.DoneAt}, timeField{&c.DeadAt, j.DeadAt})
}

// refundJSON is the wire shape of a refund.
type refundJSON struct {
	PaymentID   string     `json:"payment_id"`
	OrderID     string     `json:"order_id"`
	AmountCents int64      `json:"amount_cents"`
	Currency    string     `json:"currency"`
	Status      TaskStatus `json:"status"`
	Attempts    int        `json:"attempts"`
	RefundID    string     `json:"refund_id,omitempty"`
	Manual      bool       `json:"manual"`
	Note        string     `json:"note,omitempty"`
	Actor       string     `json:"actor,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   string     `json:"created_at"`
	NextAt      string     `json:"next_at,omitempty"`
	DoneAt      string     `json:"done_at,omitempty"`
	DeadAt      string     `json:"dead_at,omitempty"`
}

// MarshalJSON renders the API shape of a refund.
func (r Refund) MarshalJSON() ([]byte, error) {
	j := refundJSON{PaymentID: r.PaymentID, OrderID: r.OrderID, AmountCents: r.AmountCents, Currency: r.Currency,
		Status: r.Status, Attempts: r.Attempts, RefundID: r.RefundID, Manual: r.Manual, Note: r.Note, Actor: r.Actor,
		LastError: r.LastError, CreatedAt: FormatTime(r.CreatedAt)}
	if r.Status == TaskPending && !r.NextAt.IsZero() {
		j.NextAt = FormatTime(r.NextAt)
	}
	if !r.DoneAt.IsZero() {
		j.DoneAt = FormatTime(r.DoneAt)
	}
	if !r.DeadAt.IsZero() {
		j.DeadAt = FormatTime(r.DeadAt)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the API shape of a refund.
func (r *Refund) UnmarshalJSON(b []byte) error {
	var j refundJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Refund{PaymentID: j.PaymentID, OrderID: j.OrderID, AmountCents: j.AmountCents, Currency: j.Currency,
		Status: j.Status, Attempts: j.Attempts, RefundID: j.RefundID, Manual: j.Manual, Note: j.Note, Actor: j.Actor,
		LastError: j.LastError}
	return parseTimes(timeField{&r.CreatedAt, j.CreatedAt}, timeField{&r.NextAt, j.NextAt},
		timeField{&r.DoneAt, j.DoneAt}, timeField{&r.DeadAt, j.DeadAt})
}

// timeField is a time read from its wire text ("" leaves it zero).
type timeField struct {
	dst *time.Time
	src string
}

func parseTimes(fs ...timeField) error {
	for _, f := range fs {
		if f.src == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, f.src)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	return nil
}

// paymentJSON is the wire shape of a payment attempt.
type paymentJSON struct {
	PaymentID   string        `json:"payment_id"`
	Status      PaymentStatus `json:"status"`
	AmountCents int64         `json:"amount_cents,omitempty"`
	Currency    string        `json:"currency,omitempty"`
	Conflicts   int           `json:"conflicts,omitempty"`
	CreatedAt   string        `json:"created_at"`
	UpdatedAt   string        `json:"updated_at"`
}

// MarshalJSON renders the API shape of an order.
func (o Order) MarshalJSON() ([]byte, error) {
	j := orderJSON{
		ID: o.ID, Status: o.Status, Items: o.Items, AmountCents: o.AmountCents, Currency: o.Currency,
		CreatedAt: FormatTime(o.CreatedAt), ExpiresAt: FormatTime(o.ExpiresAt), CancelAfter: FormatTime(o.CancelAfter),
		CancelReason: o.CancelReason, PaymentID: o.PaymentID, RefundRequired: o.RefundRequired,
		PaymentAttempts: o.PaymentAttempts, Version: o.Version, ReservationID: o.ReservationID,
	}
	if o.Tasks != nil {
		ts := make([]taskJSON, len(o.Tasks))
		for i, t := range o.Tasks {
			ts[i] = t.wire()
		}
		j.Tasks = &ts
	}
	for _, c := range o.Commands {
		j.Commands = append(j.Commands, c.wire())
	}
	if j.Items == nil {
		j.Items = []Item{}
	}
	if o.Payments != nil { // loaded (a read of one order): listed, [] when none
		ps := make([]paymentJSON, len(o.Payments))
		for i, p := range o.Payments {
			ps[i] = paymentJSON{PaymentID: p.PaymentID, Status: p.Status, AmountCents: p.AmountCents, Currency: p.Currency,
				Conflicts: p.Conflicts, CreatedAt: FormatTime(p.CreatedAt), UpdatedAt: FormatTime(p.UpdatedAt)}
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
		PaymentAttempts: j.PaymentAttempts, Version: j.Version, ReservationID: j.ReservationID,
	}
	if j.Tasks != nil {
		o.Tasks = make([]StockTask, len(*j.Tasks))
		for i, t := range *j.Tasks {
			if err := o.Tasks[i].fromWire(t); err != nil {
				return err
			}
		}
	}
	for _, c := range j.Commands {
		var cmd Command
		if err := cmd.fromWire(c); err != nil {
			return err
		}
		o.Commands = append(o.Commands, cmd)
	}
	type field struct {
		dst *time.Time
		src string
	}
	times := []field{{&o.CreatedAt, j.CreatedAt}, {&o.ExpiresAt, j.ExpiresAt}, {&o.CancelAfter, j.CancelAfter}, {&o.PaidAt, j.PaidAt}, {&o.CancelledAt, j.CancelledAt}}
	if j.Payments != nil {
		o.Payments = make([]Payment, len(*j.Payments))
		for i, p := range *j.Payments {
			o.Payments[i] = Payment{PaymentID: p.PaymentID, Status: p.Status, AmountCents: p.AmountCents, Currency: p.Currency,
				Conflicts: p.Conflicts}
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
