package rabbit

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Handler processes one delivery of Consume and settles it: d.Ack(false)
// once it is done with it, d.Nack(false, true) or d.Reject(true) to have it
// delivered again, d.Reject(false) to drop it (or dead-letter it, if the
// queue has a dead-letter exchange). A delivery left unsettled counts
// against the prefetch limit until the channel closes, when the broker
// delivers it again. Settling may happen later on another goroutine; an
// Ack after the channel was lost fails, and the message is delivered again.
type Handler func(ctx context.Context, d amqp.Delivery)

// Consume subscribes to queue with manual acknowledgements, at most prefetch
// deliveries unsettled at once, and calls handle for each delivery, one at a
// time, until ctx ends (it returns ctx's error) or the Conn is closed
// (ErrClosed). When the channel or the connection is lost it subscribes
// again once the Conn has reconnected; a subscription the broker refuses (no
// such queue, an exclusive consumer elsewhere) is tried again with backoff,
// and logged. Deliveries unsettled when a channel is lost are delivered
// again, marked Redelivered. When ctx ends, Consume closes its channel,
// which returns unsettled deliveries to the queue.
func (c *Conn) Consume(ctx context.Context, queue string, prefetch int, handle Handler) error {
	if prefetch < 1 {
		return fmt.Errorf("rabbit: consume %s: prefetch %d: want at least 1", queue, prefetch)
	}
	attempt := 0
	for {
		conn, err := c.waitConnected(ctx)
		if err != nil {
			return err
		}
		ch, deliveries, err := c.subscribe(conn, queue, prefetch)
		if err != nil {
			c.noteMissing(err)
			attempt++
			wait := c.backoff(attempt)
			c.log.Warn("rabbitmq: subscribe failed; retrying", "url", c.shown, "queue", queue, "retry_in", wait, "err", err)
			if err := c.sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		since := time.Now()
		lost := c.deliver(ctx, ch, deliveries, handle)
		_ = ch.Close() // unsettled deliveries go back to the queue
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-c.done:
			return ErrClosed
		default:
		}
		if time.Since(since) > c.cfg.MaxBackoff {
			attempt = 0 // it lasted: lost once, not failing over and over
		}
		attempt++
		wait := c.backoff(attempt)
		c.log.Warn("rabbitmq: consumer lost its channel; subscribing again", "url", c.shown, "queue", queue, "retry_in", wait, "err", lost)
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// subscribe opens a channel on conn with the prefetch limit and consumes
// queue on it.
func (c *Conn) subscribe(conn *amqp.Connection, queue string, prefetch int) (*amqp.Channel, <-chan amqp.Delivery, error) {
	if err := c.redeclare(conn); err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("open a channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("set prefetch %d: %w", prefetch, err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	return ch, deliveries, nil
}

// deliver hands deliveries to handle until the subscription ends (it
// returns why), ctx ends or the Conn is closed.
func (c *Conn) deliver(ctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, handle Handler) error {
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				// The channel closed, or the broker cancelled the
				// subscription (the queue was deleted).
				select {
				case e := <-closes:
					if e != nil {
						return e
					}
					return errors.New("channel closed")
				default:
					return errors.New("subscription cancelled by the broker")
				}
			}
			handle(ctx, d)
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		}
	}
}

// sleep waits for d, until ctx ends or the Conn is closed.
func (c *Conn) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}
