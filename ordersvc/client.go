package ordersvc

import (
	"context"
	"errors"
)

// Delivery is one send of a command.
type Delivery struct {
	// ID is the command's id (CommandID): the Standard Webhooks webhook-id
	// over HTTP, the message_id over AMQP. The same on every attempt.
	ID string
	// Attempt is the attempt number, from 1 (the lapse-attempt header).
	Attempt int
	Command Command
}

// Client sends commands to an order service. Send returns the order
// service's answer; an error means the outcome is not known (a timeout, the
// connection lost, 408/409/429/5xx, an answer lapse could not read) and the
// command is sent again with the same id — unless the error is a Refusal,
// which parks the command DEAD for an operator. Send is safe for concurrent
// use.
type Client interface {
	Send(ctx context.Context, d Delivery) (Answer, error)
	Close() error
}

// Refusal is an error of Send that sending again cannot fix: the order
// service refused the command (a 4xx other than 408, 409 and 429).
type Refusal struct{ Err error }

func (r *Refusal) Error() string { return "refused for good: " + r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// IsRefusal reports whether err is, or wraps, a Refusal.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}
