package ordersvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/internal/endpoint"
	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/redact"
)

// AMQPClient sends commands over RabbitMQ (see amqp.go for the contract):
// each Delivery's command is published, signed, to the order service's
// exchange, and Send waits for the answer on the client's reply queue
// (a rabbit.Requester, the inventory transport's machinery).
//
// Send's error means the outcome is unknown — the broker did not confirm
// the command, no queue took it (the order service's queue is not
// declared), the connection is down, no answer came in time, the answer
// could not be read — and the dispatcher sends the command again with the
// same id; or it is a Refusal, when the receiver answered with a
// lapse-status that HTTP would make DEAD. An answer that comes after its
// Send gave up is dropped and counted (Dropped): the command's next send is
// answered as the first was.
type AMQPClient struct {
	req     *rabbit.Requester
	cfg     amqpConfig
	signer  *webhook.Signer
	display string // the broker's URL without its password
}

var _ Client = (*AMQPClient)(nil)

// DialAMQP connects to the broker at rawURL (amqp[s]://…, with the
// transport's ?prefix=NAME and the connection's parameters, see
// CheckAMQPURL), declares the command exchange and the client's reply queue,
// starts consuming answers and returns the client. It keeps trying to
// connect until ctx ends and gives up at once when the broker refuses the
// credentials, the vhost or the exchange (one of that name and another
// type). Once connected the client reconnects by itself; Close it when done.
// Options: AMQPSecrets (required), AMQPPrefix, AMQPTimeout, AMQPLogger.
func DialAMQP(ctx context.Context, rawURL string, opts ...AMQPOption) (*AMQPClient, error) {
	broker, cfg, err := newAMQPConfig(rawURL, opts)
	if err != nil {
		return nil, err
	}
	signer, err := webhook.NewSigner(cfg.secrets) // checked by newAMQPConfig
	if err != nil {
		return nil, fmt.Errorf("ordersvc: amqp: secrets: %w", err)
	}
	c := &AMQPClient{cfg: cfg, signer: signer, display: redact.URL(broker)}
	c.req, err = rabbit.DialRequester(ctx, broker, rabbit.RequesterConfig{
		Conn: rabbit.Config{
			// The command exchange, so that lapse can start before its
			// order service (a command is still refused until the order
			// service's queue is bound: mandatory).
			Topology: func(ch *amqp.Channel) error { return declareExchange(ch, cfg.exchange()) },
			// Each Send publishes alone and waits for its confirm on a
			// channel of the pool: more channels, more Sends in parallel.
			PublishChannels: 16,
			ConnectionName:  "lapse order commands",
			Logger:          cfg.logger,
		},
		ReplyQueue:  cfg.replyQueue(),
		ReplyExpiry: replyExpiry,
	})
	if err != nil {
		return nil, fmt.Errorf("ordersvc: amqp client: %w", err)
	}
	return c, nil
}

// ReplyQueue is the name of the client's reply queue.
func (c *AMQPClient) ReplyQueue() string { return c.req.ReplyQueue() }

// Dropped counts the answers that arrived when no Send waited for them:
// late (after their Send timed out), repeated, or without a correlation_id.
func (c *AMQPClient) Dropped() uint64 { return c.req.Dropped() }

// Send implements Client. It publishes d's command and waits for its
// answer, for the AMQPTimeout at most (or until ctx ends).
func (c *AMQPClient) Send(ctx context.Context, d Delivery) (Answer, error) {
	body, err := json.Marshal(d.Command)
	if err != nil {
		return Answer{}, &Refusal{Err: fmt.Errorf("encode command %s: %w", d.ID, err)}
	}
	now := time.Now()
	sig, err := c.signer.Sign(d.ID, now, body)
	if err != nil {
		return Answer{}, fmt.Errorf("sign command %s: %w", d.ID, err)
	}
	key := d.Command.Type
	if key == "" {
		key = Type // the receiver refuses the command; it is routed to say so
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	msg := rabbit.Message{Exchange: c.cfg.exchange(), RoutingKey: key, Publishing: amqp.Publishing{
		ContentType:   amqpContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     d.ID,
		CorrelationId: d.ID,
		Timestamp:     now,
		Type:          d.Command.Type,
		AppId:         "lapse",
		// Expires when this Send stops waiting: the next send carries the
		// same id and a fresh signature.
		Expiration: strconv.FormatInt(max(c.cfg.timeout.Milliseconds(), 1), 10),
		Headers: amqp.Table{
			standardwebhooks.HeaderWebhookID:        d.ID,
			standardwebhooks.HeaderWebhookTimestamp: strconv.FormatInt(now.Unix(), 10),
			standardwebhooks.HeaderWebhookSignature: sig,
			HeaderAttempt:                           strconv.Itoa(d.Attempt),
			HeaderDeadline:                          d.Command.Deadline,
		},
		Body: body,
	}}
	reply, err := c.req.Request(ctx, msg)
	switch {
	case err == nil:
	case errors.Is(err, rabbit.ErrReturned):
		return Answer{}, fmt.Errorf("order service %s: no queue takes %s commands on exchange %s (is the order service's queue declared?): %w",
			c.display, msg.RoutingKey, msg.Exchange, err)
	case errors.Is(err, rabbit.ErrNoReply) && errors.Is(err, context.DeadlineExceeded):
		return Answer{}, fmt.Errorf("order service %s: no answer within %s: %w", c.display, c.cfg.timeout, err)
	default:
		return Answer{}, fmt.Errorf("order service %s: %w", c.display, err)
	}
	if code, ok := replyStatus(reply.Headers); ok && code != 200 {
		serr := &StatusError{URL: c.display, Code: code}
		if !endpoint.Retryable(code) {
			return Answer{}, &Refusal{Err: serr}
		}
		return Answer{}, serr
	}
	return ReadAnswer(reply.Body, d.ID)
}

// replyStatus reads an answer's lapse-status header: a number, or a string
// of digits; ok is false without one. A header that is neither is taken as
// a 500 (retried): lapse does not guess what the receiver meant.
func replyStatus(h amqp.Table) (code int, ok bool) {
	v, ok := h[HeaderStatus]
	if !ok {
		return 0, false
	}
	switch v := v.(type) {
	case int8:
		code = int(v)
	case int16:
		code = int(v)
	case int32:
		code = int(v)
	case int64:
		code = int(v)
	case int:
		code = v
	case uint8:
		code = int(v)
	case uint16:
		code = int(v)
	case uint32:
		code = int(v)
	case string:
		n, err := strconv.Atoi(v)
		if err != nil {
			return 500, true
		}
		code = n
	default:
		return 500, true
	}
	if code < 100 || code > 599 {
		return 500, true
	}
	return code, true
}

// Close implements Client: Sends in flight fail, the reply consumer stops
// and the connection closes. The reply queue expires on the broker. Close
// is idempotent.
func (c *AMQPClient) Close() error {
	if err := c.req.Close(); err != nil {
		return fmt.Errorf("ordersvc: amqp client: %w", err)
	}
	return nil
}

// Ping returns nil while the client is connected to the broker, and why not
// otherwise: a readiness check, costing no round trip.
func (c *AMQPClient) Ping(ctx context.Context) error {
	if err := c.req.Ping(ctx); err != nil {
		return fmt.Errorf("ordersvc: amqp client: %w", err)
	}
	return nil
}
