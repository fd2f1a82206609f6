package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// AMQPClient is lapse's side of the AMQP transport: a Client that publishes
// commands to the inventory's exchange and waits for their answers on a
// reply queue of its own (a rabbit.Requester, which keeps the reply queue
// and matches answers to commands).
//
// A command is published persistent, mandatory and with publisher
// confirms, message_id and correlation_id its task id, reply_to the
// client's reply queue: Send fails (an unknown outcome) when the broker
// does not confirm it or no queue takes it, rather than losing it. The
// inventory answers to the reply queue with the same correlation_id.
//
// The reply queue is the client's alone (prefix.replies.<random>), so any
// number of lapse instances share one inventory. It is neither exclusive
// nor durable and expires five minutes after its last consumer went away:
// it survives a reconnect, during which answers wait in it, and is declared
// again if it was lost (a broker restart, a long outage); an answer lost
// with it is harmless, since the resent command is answered ALREADY_DONE.
// An answer nobody waits for (it came after its Send timed out, or twice) is
// dropped and counted (Dropped).
type AMQPClient struct {
	req *rabbit.Requester
	cfg amqpConfig
}

var _ Client = (*AMQPClient)(nil)

// DialAMQP connects to the broker at rawURL (amqp[s]://…, see
// rabbit.URLParams), declares the command exchange and the client's reply
// queue, starts consuming answers and returns the client. It keeps trying to
// connect until ctx ends and gives up at once when the broker refuses the
// credentials, the vhost or the exchange (one of that name and another
// type). Once connected the client reconnects by itself; Close it when done.
// Options: AMQPPrefix, AMQPTimeout, AMQPLogger.
func DialAMQP(ctx context.Context, rawURL string, opts ...AMQPOption) (*AMQPClient, error) {
	cfg, err := newAMQPConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &AMQPClient{cfg: cfg}
	c.req, err = rabbit.DialRequester(ctx, rawURL, rabbit.RequesterConfig{
		Conn: rabbit.Config{
			// The command exchange, so that a client started before its
			// inventory can publish (an unroutable command is still
			// refused: no queue is bound).
			Topology: func(ch *amqp.Channel) error { return declareExchange(ch, cfg.exchange()) },
			// Each Send publishes alone and waits for its confirm on a
			// channel of the pool: more channels, more Sends in parallel.
			PublishChannels: 16,
			ConnectionName:  "lapse stock commands",
			Logger:          cfg.logger,
		},
		ReplyQueue:  cfg.replyQueue(),
		ReplyExpiry: replyExpiry,
		ReplyID:     c.replyID,
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: amqp client: %w", err)
	}
	return c, nil
}

// replyID is the task an answer answers: its correlation_id, or the body's
// task_id when it has none; "" for an unreadable answer, which is dropped.
func (c *AMQPClient) replyID(d amqp.Delivery) string {
	var a Answer
	if err := json.Unmarshal(d.Body, &a); err != nil {
		c.cfg.logger.Warn("inventory: amqp: unreadable answer dropped", "correlation_id", d.CorrelationId, "err", err)
		return ""
	}
	if d.CorrelationId != "" {
		return d.CorrelationId
	}
	return a.TaskID
}

// ReplyQueue is the name of the client's reply queue.
func (c *AMQPClient) ReplyQueue() string { return c.req.ReplyQueue() }

// Dropped counts the answers that arrived when no Send waited for them:
// late (after their Send timed out), repeated, or unreadable.
func (c *AMQPClient) Dropped() uint64 { return c.req.Dropped() }

// Send implements Client. It publishes c and waits for the answer with c's
// task id, for the AMQPTimeout at most (or until ctx ends). Its error — the
// broker did not confirm the command or no queue took it, the connection is
// down, no answer came in time — means the outcome is unknown: send the
// command again, with the same task id. Send only requires c.TaskID; the
// inventory validates the rest, and answers REJECTED what it cannot apply.
// Concurrent Sends of one task id all get the first answer.
func (c *AMQPClient) Send(ctx context.Context, cmd Command) (Answer, error) {
	if cmd.TaskID == "" {
		return Answer{}, errors.New("inventory: amqp send: command without task_id")
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return Answer{}, fmt.Errorf("inventory: amqp send task %s: encode: %w", cmd.TaskID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()

	msg := rabbit.Message{Exchange: c.cfg.exchange(), RoutingKey: cmd.Action.RoutingKey(), Publishing: amqp.Publishing{
		ContentType:   contentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     cmd.TaskID,
		CorrelationId: cmd.TaskID,
		Timestamp:     time.Now(),
		Type:          string(cmd.Action),
		AppId:         "lapse",
		Body:          body,
	}}
	d, err := c.req.Request(ctx, msg)
	switch {
	case errors.Is(err, rabbit.ErrReturned):
		err = fmt.Errorf("no queue takes %s commands on exchange %s (is the inventory's queue declared?): %w",
			msg.RoutingKey, msg.Exchange, err)
	case errors.Is(err, rabbit.ErrClosed):
		err = errClientClosed
	}
	if err != nil {
		return Answer{}, fmt.Errorf("inventory: amqp send %s task %s: %w", cmd.Action, cmd.TaskID, err)
	}
	var a Answer
	if err := json.Unmarshal(d.Body, &a); err != nil { // replyID read it already
		return Answer{}, fmt.Errorf("inventory: amqp send %s task %s: unreadable answer: %w", cmd.Action, cmd.TaskID, err)
	}
	if a.TaskID == "" {
		a.TaskID = cmd.TaskID
	}
	return a, nil
}

// errClientClosed: Send on, or during, Close.
var errClientClosed = errors.New("inventory: amqp client closed")

// Close implements Client: Sends in flight fail, the reply consumer stops
// and the connection closes. The reply queue expires on the broker. Close
// is idempotent.
func (c *AMQPClient) Close() error {
	if err := c.req.Close(); err != nil {
		return fmt.Errorf("inventory: amqp client: %w", err)
	}
	return nil
}

// Ping returns nil while the client is connected to the broker, and why not
// otherwise: a readiness check, costing no round trip.
func (c *AMQPClient) Ping(ctx context.Context) error {
	if err := c.req.Ping(ctx); err != nil {
		return fmt.Errorf("inventory: amqp client: %w", err)
	}
	return nil
}
