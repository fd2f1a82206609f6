// Package rabbitmq is the outbox sink that publishes lapse's events to a
// RabbitMQ topic exchange:
//
//	--sink amqp://user:password@host:5672/vhost?exchange=lapse.events
//
// # What it guarantees
//
// The exchange (the exchange query parameter, lapse.events by default) is
// declared durable, of type topic, when the sink starts and again after
// every reconnect. Each event is one persistent message whose routing key is
// the event type (order.cancelled, order.paid, …), so consumers bind queues
// with patterns such as order.* or #. Its message_id is the event id — the
// key consumers deduplicate by, since delivery is at least once — its type
// property the event type, its timestamp the event's CreatedAt (whole
// seconds, AMQP's resolution) and its app_id "lapse". In outbox.FormatJSON
// the body is the outbox.Envelope; in outbox.FormatCloudEvents it is the
// payload, in CloudEvents binary mode: the attributes are AMQP headers named
// cloudEvents:id, cloudEvents:type, … (the AMQP binding of CloudEvents).
//
// An event counts as delivered only when the broker confirmed it (publisher
// confirms) and routed it to at least one queue: it is published mandatory,
// and a basic.return — no queue is bound for its routing key — is a refusal
// although the broker acks the message afterwards. Refusals (returned or
// nacked) are outbox.Refused and fall under the sink's Policy: an event
// refused ten times, or for 72 hours, is dead. A lost connection is a
// transport failure, retried without limit; the sink reconnects by itself
// (see internal/rabbit), and an event unconfirmed when the connection was
// lost is published again, with the same message_id.
//
// Events of one Publish call go out in order on one channel, and a call
// returns only once all of them are confirmed, so events of one order,
// which the relay publishes one call after another, reach each queue in
// order.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// DefaultExchange is the exchange of a URL without an exchange parameter.
const DefaultExchange = "lapse.events"

// HeaderPrefix starts the names of the AMQP headers that carry CloudEvents
// attributes (the CloudEvents AMQP binding).
const HeaderPrefix = "cloudEvents:"

// policy: "unroutable on AMQP ten times" and the event is dead; or refused
// for three days, as every sink.
var policy = outbox.Policy{MaxAge: 72 * time.Hour, MaxRefusals: 10}

// Sink publishes events to a RabbitMQ exchange. It is safe for concurrent
// use. Close it when done.
type Sink struct {
	conn     *rabbit.Conn
	exchange string
	format   outbox.Format
	name     string
}

var _ outbox.PolicySink = (*Sink)(nil)

// New connects to the broker of rawURL, declares its exchange and returns
// the sink. rawURL is amqp:// or amqps://, with the query parameter
// exchange and those of rabbit.URLParams (heartbeat, TLS files, …); any
// other parameter is an error. New keeps trying to connect until ctx ends,
// and gives up at once when the broker refuses the credentials, the vhost or
// the exchange (one of that name and another type). A nil logger logs to
// slog.Default().
func New(ctx context.Context, rawURL string, format outbox.Format, logger *slog.Logger) (*Sink, error) {
	dialURL, exchange, name, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := rabbit.Dial(ctx, dialURL, rabbit.Config{
		Topology: func(ch *amqp.Channel) error {
			if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
				return fmt.Errorf("declare exchange %s (durable, topic): %w", exchange, err)
			}
			return nil
		},
		ConnectionName: "lapse outbox",
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq sink %s: %w", name, err)
	}
	return &Sink{conn: conn, exchange: exchange, format: format, name: name}, nil
}

// Name implements outbox.Sink: scheme://host:port/vhost/exchange, the
// vhost path-escaped ("/" is %2F), without user or password.
func (s *Sink) Name() string { return s.name }

// SinkName is the Name of the sink New would make of rawURL, without
// connecting: for checking, before opening anything, that two configured
// sinks are not one (URLs that differ only in connection parameters such
// as heartbeat name one exchange, so one sink).
func SinkName(rawURL string) (string, error) {
	_, _, name, err := parseURL(rawURL)
	return name, err
}

// Policy implements outbox.PolicySink: an event refused (unroutable or
// nacked) ten times, or for 72 hours, is dead.
func (s *Sink) Policy() outbox.Policy { return policy }

// Publish implements outbox.Sink. It publishes the events as one batch with
// publisher confirms (see the package doc): nil for each event the broker
// confirmed and routed; outbox.Refused wrapping rabbit.ErrReturned or
// rabbit.ErrNacked for one it refused; a plain error when the connection
// failed; ctx's error for what was unconfirmed when ctx ended. An event
// that cannot be encoded is refused for good.
func (s *Sink) Publish(ctx context.Context, events []order.Event) []error {
	errs := make([]error, len(events))
	msgs := make([]rabbit.Message, 0, len(events))
	at := make([]int, 0, len(events)) // msgs[k] is events[at[k]]
	for i, e := range events {
		m, err := s.message(e)
		if err != nil {
			errs[i] = outbox.RefusedForGood(fmt.Errorf("publish event %s: %w", e.ID, err))
			continue
		}
		msgs = append(msgs, m)
		at = append(at, i)
	}
	for k, err := range s.conn.Publish(ctx, msgs) {
		i := at[k]
		switch {
		case err == nil:
		case rabbit.IsRefusal(err):
			errs[i] = outbox.Refused(fmt.Errorf("publish event %s: %w", events[i].ID, err))
		default:
			errs[i] = fmt.Errorf("publish event %s: %w", events[i].ID, err)
		}
	}
	return errs
}

// message is e as an AMQP message.
func (s *Sink) message(e order.Event) (rabbit.Message, error) {
	body, contentType, headers, err := s.format.Binary(e, HeaderPrefix)
	if err != nil {
		return rabbit.Message{}, err
	}
	var table amqp.Table
	if len(headers) > 0 {
		table = make(amqp.Table, len(headers))
		for k, v := range headers {
			// The CloudEvents SDK lowercases the prefix (cloudevents:id);
			// the AMQP binding spells it cloudEvents:, and AMQP header names
			// are case-sensitive.
			if len(k) >= len(HeaderPrefix) && strings.EqualFold(k[:len(HeaderPrefix)], HeaderPrefix) {
				k = HeaderPrefix + k[len(HeaderPrefix):]
			}
			table[k] = v
		}
	}
	return rabbit.Message{
		Exchange:   s.exchange,
		RoutingKey: e.Type,
		Publishing: amqp.Publishing{
			MessageId:    e.ID,
			Type:         e.Type,
			AppId:        "lapse",
			ContentType:  contentType,
			Timestamp:    e.CreatedAt,
			DeliveryMode: amqp.Persistent,
			Headers:      table,
			Body:         body,
		},
	}, nil
}

// Ping returns nil while the sink is connected, and why not otherwise: a
// readiness check that costs no round trip.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("rabbitmq sink %s: %w", s.name, err)
	}
	return nil
}

// Close closes the connection. A Publish in flight returns errors for what
// was unconfirmed.
func (s *Sink) Close() error { return s.conn.Close() }

// parseURL checks a --sink URL and returns the URL to dial (without the
// exchange parameter), the exchange and the sink's name. Its errors do not
// quote the URL, which holds a password.
func parseURL(rawURL string) (dialURL, exchange, name string, err error) {
	fail := func(format string, args ...any) (string, string, string, error) {
		return "", "", "", fmt.Errorf("rabbitmq sink URL: "+format, args...)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL
		}
		return fail("%w (a password with reserved characters such as @ : / ? # must be percent-encoded)", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return fail("scheme %q: want amqp or amqps", u.Scheme)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail("query: %w", err)
	}
	known := append(rabbit.URLParams(), "exchange")
	for k := range q {
		if !slices.Contains(known, k) {
			slices.Sort(known)
			return fail("unknown query parameter %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	exchange = DefaultExchange
	if vs, ok := q["exchange"]; ok {
		if len(vs) > 1 {
			return fail("exchange given %d times", len(vs))
		}
		exchange = vs[0]
		if err := checkExchange(exchange); err != nil {
			return fail("exchange %q: %w", exchange, err)
		}
	}
	q.Del("exchange")
	u.RawQuery = q.Encode()
	dialURL = u.String()

	uri, err := amqp.ParseURI(dialURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fail("%w", err)
	}
	name = uri.Scheme + "://" + net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)) + "/" + url.PathEscape(uri.Vhost) + "/" + exchange
	return dialURL, exchange, name, nil
}

// checkExchange accepts the exchange names RabbitMQ does: up to 255 bytes of
// letters, digits, '-', '_', '.' and ':', not the default exchange ("") and
// not the broker's own (amq.*), which cannot be declared.
func checkExchange(name string) error {
	switch {
	case name == "":
		return errors.New("empty: the default exchange routes by queue name; name a topic exchange")
	case len(name) > 255:
		return errors.New("longer than 255 bytes")
	case strings.HasPrefix(name, "amq."):
		return errors.New("amq.* names are reserved to the broker")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r)) {
			return fmt.Errorf("character %q: want letters, digits, '-', '_', '.' and ':'", r)
		}
	}
	return nil
}
