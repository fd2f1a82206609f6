package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Sink delivers events to one destination (a webhook endpoint, an exchange,
// a topic, a stream). The relay hands it at most one event per order at a
// time, so the order of events inside one call does not matter; a sink may
// publish them concurrently.
//
// Delivery is at least once: the relay retries what a sink did not confirm,
// and an event whose confirmation was lost (a crash between publish and mark)
// is published again with the same id. Consumers dedupe by event id.
type Sink interface {
	// Name identifies the sink's progress in the store: stable across
	// restarts and instances, and never holding a secret (no password, no
	// token), since it is shown by `lapse events list` and in metrics.
	Name() string
	// Publish delivers events and returns one error per event, in order: nil
	// once the destination has confirmed that event (a 2xx, a publisher
	// confirm, a Kafka ack, a JetStream PubAck). A RefusedError says the
	// destination answered and declined; any other error is a transport
	// failure (not connected, timed out) and is retried without limit.
	// Publish returns when ctx ends, with ctx's error for what is unconfirmed.
	Publish(ctx context.Context, events []order.Event) []error
}

// Policy bounds how long a sink's refusals are retried before an event is
// dead for that sink. Zero fields mean no bound.
type Policy struct {
	// MaxAge: an event refused for longer than this (from its first
	// refusal) is dead.
	MaxAge time.Duration
	// MaxRefusals: an event refused this many times is dead.
	MaxRefusals int
}

// PolicySink is a Sink with its own Policy. Sinks without one get
// DefaultPolicy.
type PolicySink interface {
	Sink
	Policy() Policy
}

// DefaultPolicy is the policy of a sink that declares none: refusals are
// retried for 72 hours.
var DefaultPolicy = Policy{MaxAge: 72 * time.Hour}

// RefusedError is the destination's answer declining an event: an HTTP
// status other than 2xx, a broker's basic.return or nack, a JetStream error
// reply. It counts toward the sink's Policy; a Permanent refusal makes the
// event dead at once.
type RefusedError struct {
	Err error
	// Permanent: retrying cannot help (a webhook's 400).
	Permanent bool
	// RetryAfter, when positive, is when the destination asked to be tried
	// again (Retry-After); the relay waits at least this long.
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string { return "refused: " + e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Refused wraps err as a refusal to retry under the sink's Policy.
func Refused(err error) error { return &RefusedError{Err: err} }

// RefusedForGood wraps err as a permanent refusal: the event is dead for
// this sink at once.
func RefusedForGood(err error) error { return &RefusedError{Err: err, Permanent: true} }

// RefusedRetryAfter wraps err as a refusal whose destination asked to be
// tried again no sooner than after d.
func RefusedRetryAfter(err error, d time.Duration) error {
	return &RefusedError{Err: err, RetryAfter: d}
}

// ErrGone is returned (wrapped) by a sink whose destination says it no longer
// exists (a webhook's 410 Gone): the relay stops publishing to that sink
// until the next start, keeping its events pending, and logs it as an error.
var ErrGone = errors.New("outbox: destination gone")

// ErrorsFor returns err for each of n events: a transport failure that
// befell the whole call.
func ErrorsFor(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// LogSink writes each event as one structured log line.
type LogSink struct {
	Logger *slog.Logger
}

// Name implements Sink.
func (LogSink) Name() string { return "log" }

// Publish implements Sink.
func (s LogSink) Publish(ctx context.Context, events []order.Event) []error {
	for _, e := range events {
		s.Logger.LogAttrs(ctx, slog.LevelInfo, "event",
			slog.String("event_id", e.ID), slog.String("type", e.Type), slog.String("order_id", e.OrderID),
			slog.Any("payload", json.RawMessage(e.Payload)))
	}
	return make([]error, len(events))
}

// DiscardSink drops every event (benchmarks of other parts).
type DiscardSink struct{}

// Name implements Sink.
func (DiscardSink) Name() string { return "discard" }

// Publish implements Sink.
func (DiscardSink) Publish(_ context.Context, events []order.Event) []error {
	return make([]error, len(events))
}

// checkResults guards against a sink that answers the wrong number of results.
func checkResults(s Sink, n int, errs []error) []error {
	if len(errs) == n {
		return errs
	}
	return ErrorsFor(n, fmt.Errorf("outbox: sink %s answered %d results for %d events", s.Name(), len(errs), n))
}
