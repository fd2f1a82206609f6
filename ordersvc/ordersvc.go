// Package ordersvc is lapse's side of an order service that owns its orders
// (order-service mode, docs/order-service.md): the command lapse sends when
// an order's deadline has passed, the answers it accepts, the transports that
// carry them, and a receiver a Go order service can mount.
//
// The contract is small and idempotent, in the manner of the managed
// "delayed callback" services (QStash, Cloud Tasks). At an order's
// cancel_after — after the grace window, and after the payment gateway was
// asked about an open attempt — lapse sends one order.cancel_if_pending
// command. The order service runs a conditional update in its own database
// (`UPDATE orders SET status='cancelled' WHERE id=? AND status='pending'`)
// and answers what became of the order. Its answer decides lapse's side:
// cancelled, already_cancelled, already_paid, paying (ask again later) or
// not_found. The command's id (the Standard Webhooks webhook-id) is one per
// order and deadline, the same on every retry: the receiver answers the same
// command id the same way however often it arrives, so lapse sends again
// whenever it did not hear an answer — a timeout, a 5xx, lapse killed
// between sending and recording — and never needs to know whether an earlier
// try was applied.
package ordersvc

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Type is the command's type, the body's "type".
const Type = "order.cancel_if_pending"

// SchemaVersion is the body's "schema_version": a receiver refuses (4xx) a
// version it does not know rather than guessing.
const SchemaVersion = 1

// The headers lapse sets beside Standard Webhooks' webhook-id,
// webhook-timestamp and webhook-signature.
const (
	// HeaderAttempt is the delivery's attempt number, from 1: a receiver
	// may log it; it must not decide anything with it.
	HeaderAttempt = "lapse-attempt"
	// HeaderDeadline is the order's deadline (expires_at), RFC 3339 in UTC
	// with milliseconds: a router or a log can read it without the body.
	HeaderDeadline = "lapse-deadline"
)

// Command is the body of one order.cancel_if_pending command, as JSON on
// both transports.
type Command struct {
	Type    string `json:"type"`
	OrderID string `json:"order_id"`
	// Deadline is when the buyer was told the order expires (expires_at);
	// CancelAfter is the deadline plus the grace window, when the command
	// became due. RFC 3339, UTC, milliseconds.
	Deadline    string `json:"deadline"`
	CancelAfter string `json:"cancel_after"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	// Attempts are the payment attempts lapse knows of (reported to it
	// through /pay and the gateways' notifications): none when the shop
	// tells lapse nothing about payments.
	Attempts      []Attempt `json:"attempts"`
	SchemaVersion int       `json:"schema_version"`
}

// Attempt is one payment attempt lapse knows of.
type Attempt struct {
	PaymentID   string `json:"payment_id"`
	Status      string `json:"status"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency,omitempty"`
}

// Validate reports what is wrong with c, or nil: a receiver answers 400 to
// a command that fails it (lapse parks it DEAD, never retries it).
func (c Command) Validate() error {
	switch {
	case c.Type != Type:
		return fmt.Errorf("ordersvc: type %q, want %q", c.Type, Type)
	case c.SchemaVersion != SchemaVersion:
		return fmt.Errorf("ordersvc: schema_version %d, want %d", c.SchemaVersion, SchemaVersion)
	case c.OrderID == "":
		return errors.New("ordersvc: command without order_id")
	}
	if _, err := time.Parse(time.RFC3339Nano, c.Deadline); err != nil {
		return fmt.Errorf("ordersvc: deadline %q: want RFC 3339", c.Deadline)
	}
	if _, err := time.Parse(time.RFC3339Nano, c.CancelAfter); err != nil {
		return fmt.Errorf("ordersvc: cancel_after %q: want RFC 3339", c.CancelAfter)
	}
	return nil
}

// Result is the order service's answer to a command.
type Result string

// The five results. Each says where the order stands in the order service
// now that the command was applied (or found applied before).
const (
	// Cancelled: the command cancelled the order (it was pending).
	Cancelled Result = "cancelled"
	// AlreadyCancelled: the order was cancelled before (by the buyer, by
	// an earlier delivery of this command): lapse's order is CANCELLED too.
	AlreadyCancelled Result = "already_cancelled"
	// AlreadyPaid: the order is paid; lapse's order becomes PAID and is
	// never cancelled.
	AlreadyPaid Result = "already_paid"
	// Paying: a payment is in flight at the order service; lapse's order
	// becomes PAYING and the command is sent again later
	// (Answer.RetryAfterSeconds, or lapse's backoff).
	Paying Result = "paying"
	// NotFound: the order service has no such order; the command is DEAD
	// for an operator to look at.
	NotFound Result = "not_found"
)

// Valid reports whether r is one of the five results.
func (r Result) Valid() bool {
	switch r {
	case Cancelled, AlreadyCancelled, AlreadyPaid, Paying, NotFound:
		return true
	}
	return false
}

// Final reports whether r ends the command: all but Paying.
func (r Result) Final() bool { return r.Valid() && r != Paying }

// Answer is the order service's answer: the body of a 200 over HTTP, the
// reply's body over AMQP.
type Answer struct {
	Result Result `json:"result"`
	// RetryAfterSeconds, with Paying, asks lapse to send the command again
	// no sooner than this (lapse bounds it: see Dispatcher).
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
	// CommandID, when the receiver sets it, must be the command's id (the
	// webhook-id): lapse refuses an answer to another command.
	CommandID string `json:"command_id,omitempty"`
}

// CommandID is the id of the command for the order id whose deadline
// generation is cancelAfter: the Standard Webhooks webhook-id and the AMQP
// message_id. The same order and cancel_after always give the same id (it is
// stable across retries and across lapse instances); a moved deadline gives
// a new one. It is "cmd_" and 26 base32 characters of a SHA-256.
func CommandID(orderID string, cancelAfter time.Time) string {
	h := sha256.New()
	h.Write([]byte(orderID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(cancelAfter.UTC().UnixMilli(), 10)))
	sum := h.Sum(nil)
	return "cmd_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum)[:26])
}

// FormatTime is how the contract writes a time: RFC 3339, UTC, milliseconds.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
