package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RawRoutingKey is the routing key of RawPublishRate's messages.
const RawRoutingKey = "lapse.bench.raw"

// RawBatch is how many messages RawPublishRate publishes before it waits
// for their confirms: the outbox relay's default batch size, so that the
// raw rate and the sink's are measured alike.
const RawBatch = 500

// RawPublishRate measures the broker's own publish rate, the yardstick of
// the sink's in a benchmark report: how many messages a second a plain
// amqp091 publisher gets confirmed, with what the sink does and nothing
// else — one connection, one confirm-mode channel, n persistent messages of
// size bytes published mandatory to the exchange of rawURL (a --sink URL;
// declared like the sink declares it) with routing key RawRoutingKey, in
// batches of RawBatch, each batch published in full and then waited for.
// Connecting and declaring are not timed.
//
// A queue must be bound to the exchange for RawRoutingKey (with # or
// lapse.bench.#): an unroutable message is returned, costs the broker less
// than a routed one and would flatter the rate, so RawPublishRate fails when
// any message is returned, or nacked.
func RawPublishRate(ctx context.Context, rawURL string, n, size int) (float64, error) {
	if n < 1 || size < 0 {
		return 0, fmt.Errorf("rabbitmq raw publish rate: %d messages of %d bytes: want at least 1 message, 0 bytes or more", n, size)
	}
	dialURL, exchange, name, err := parseURL(rawURL)
	if err != nil {
		return 0, err
	}
	fail := func(format string, args ...any) (float64, error) {
		return 0, fmt.Errorf("rabbitmq raw publish rate on %s: "+format, append([]any{name}, args...)...)
	}
	conn, err := amqp.Dial(dialURL)
	if err != nil {
		return fail("connect: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fail("open a channel: %w", err)
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fail("declare exchange %s: %w", exchange, err)
	}
	if err := ch.Confirm(false); err != nil {
		return fail("confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, RawBatch))
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}

	start := time.Now()
	confirms := make([]*amqp.DeferredConfirmation, 0, RawBatch)
	for sent := 0; sent < n; {
		confirms = confirms[:0]
		for ; sent < n && len(confirms) < RawBatch; sent++ {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, RawRoutingKey, true, false, amqp.Publishing{
				MessageId: strconv.Itoa(sent), DeliveryMode: amqp.Persistent, ContentType: "application/json",
				Timestamp: start, Body: body,
			})
			if err != nil {
				return fail("publish: %w", err)
			}
			confirms = append(confirms, dc)
		}
		for _, dc := range confirms {
			acked, err := dc.WaitContext(ctx)
			switch {
			case err != nil:
				return fail("%w", err)
			case !acked && ch.IsClosed():
				return fail("connection lost before the broker confirmed")
			case !acked:
				return fail("message nacked")
			}
		}
		select {
		case r := <-returns:
			return fail("message returned (%d %s): bind a queue to exchange %s for routing key %s", r.ReplyCode, r.ReplyText, exchange, RawRoutingKey)
		default:
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// BenchQueue declares a queue of the benchmark's own bound with # to the
// exchange of rawURL, so that a benchmark's events (and RawPublishRate's
// messages) are routed, as they would be in production, rather than
// returned. The queue expires ten minutes after its last use in any case;
// remove deletes it at once.
func BenchQueue(ctx context.Context, rawURL string) (remove func() error, err error) {
	dialURL, exchange, name, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.Dial(dialURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq bench queue on %s: connect: %w", name, err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	}
	queue := "lapse.bench." + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err == nil {
		_, err = ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-expires": int32(10 * time.Minute / time.Millisecond)})
	}
	if err == nil {
		err = ch.QueueBind(queue, "#", exchange, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq bench queue on %s: %w", name, err)
	}
	_ = ctx
	return func() error {
		defer conn.Close()
		_, err := ch.QueueDelete(queue, false, false, false)
		return err
	}, nil
}
