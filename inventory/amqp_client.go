package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// AMQPClient is lapse's side of the AMQP transport: a Client that publishes
// commands to the inventory's exchange and waits for their answers on a
// reply queue of its own.
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
	conn    *rabbit.Conn
	cfg     amqpConfig
	replyTo string

	mu      sync.Mutex
	waiting map[string][]chan Answer // by task id
	closed  bool

	dropped atomic.Uint64

	stop     context.CancelFunc
	consumed chan struct{} // closed when the reply consumer returned
	done     chan struct{} // closed by Close
}

var _ Client = (*AMQPClient)(nil)

// errClientClosed: Send on, or during, Close.
var errClientClosed = errors.New("inventory: amqp client closed")

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
	c := &AMQPClient{
		cfg:      cfg,
		replyTo:  cfg.replyQueue(),
		waiting:  map[string][]chan Answer{},
		consumed: make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.conn, err = rabbit.Dial(ctx, rawURL, rabbit.Config{
		Topology: c.declare,
		// Each Send publishes alone and waits for its confirm on a
		// channel of the pool: more channels, more Sends in parallel.
		PublishChannels: 16,
		ConnectionName:  "lapse stock commands",
		Logger:          cfg.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: amqp client: %w", err)
	}
	consumeCtx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go func() {
		defer close(c.consumed)
		// Returns at Close only: Consume subscribes again after every
		// loss, redeclaring the queue if it is missing.
		_ = c.conn.Consume(consumeCtx, c.replyTo, 256, c.answer)
	}()
	return c, nil
}

// declare is the client's topology, declared on every new connection: the
// command exchange, so that a client started before its inventory can
// publish (an unroutable command is still refused: no queue is bound), and
// the reply queue.
func (c *AMQPClient) declare(ch *amqp.Channel) error {
	if err := declareExchange(ch, c.cfg.exchange()); err != nil {
		return err
	}
	args := amqp.Table{"x-expires": int64(replyExpiry / time.Millisecond)}
	if _, err := ch.QueueDeclare(c.replyTo, false, false, false, false, args); err != nil {
		return fmt.Errorf("declare reply queue %s: %w", c.replyTo, err)
	}
	return nil
}

// ReplyQueue is the name of the client's reply queue.
func (c *AMQPClient) ReplyQueue() string { return c.replyTo }

// Dropped counts the answers that arrived when no Send waited for them:
// late (after their Send timed out), repeated, or unreadable.
func (c *AMQPClient) Dropped() uint64 { return c.dropped.Load() }

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

	// Waiting before publishing: the answer may come before Publish
	// returns.
	got, err := c.wait(cmd.TaskID)
	if err != nil {
		return Answer{}, err
	}
	defer c.unwait(cmd.TaskID, got)

	msg := rabbit.Message{Exchange: c.cfg.exchange(), RoutingKey: cmd.Action.RoutingKey(), Publishing: amqp.Publishing{
		ContentType:   contentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     cmd.TaskID,
		CorrelationId: cmd.TaskID,
		ReplyTo:       c.replyTo,
		Timestamp:     time.Now(),
		Type:          string(cmd.Action),
		AppId:         "lapse",
		Body:          body,
	}}
	if err := c.conn.Publish(ctx, []rabbit.Message{msg})[0]; err != nil {
		if errors.Is(err, rabbit.ErrReturned) {
			err = fmt.Errorf("no queue takes %s commands on exchange %s (is the inventory's queue declared?): %w",
				msg.RoutingKey, msg.Exchange, err)
		}
		return Answer{}, fmt.Errorf("inventory: amqp send %s task %s: %w", cmd.Action, cmd.TaskID, err)
	}
	select {
	case a := <-got:
		return a, nil
	case <-ctx.Done():
		return Answer{}, fmt.Errorf("inventory: amqp send %s task %s: no answer: %w", cmd.Action, cmd.TaskID, ctx.Err())
	case <-c.done:
		return Answer{}, fmt.Errorf("inventory: amqp send %s task %s: %w", cmd.Action, cmd.TaskID, errClientClosed)
	}
}

// wait registers a waiter for task's answer.
func (c *AMQPClient) wait(task string) (chan Answer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("inventory: amqp send task %s: %w", task, errClientClosed)
	}
	ch := make(chan Answer, 1)
	c.waiting[task] = append(c.waiting[task], ch)
	return ch, nil
}

// unwait removes the waiter ch of task, if the answer did not already.
func (c *AMQPClient) unwait(task string, ch chan Answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiting[task]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiting, task)
	} else {
		c.waiting[task] = ws
	}
}

// answer hands an answer from the reply queue to the Sends waiting for it.
func (c *AMQPClient) answer(_ context.Context, d amqp.Delivery) {
	_ = d.Ack(false) // lost with the channel: delivered again, then dropped
	var a Answer
	if err := json.Unmarshal(d.Body, &a); err != nil {
		c.dropped.Add(1)
		c.cfg.logger.Warn("inventory: amqp: unreadable answer dropped", "correlation_id", d.CorrelationId, "err", err)
		return
	}
	task := d.CorrelationId
	if task == "" {
		task = a.TaskID
	}
	if a.TaskID == "" {
		a.TaskID = task
	}
	c.mu.Lock()
	ws := c.waiting[task]
	delete(c.waiting, task)
	c.mu.Unlock()
	if len(ws) == 0 {
		c.dropped.Add(1)
		c.cfg.logger.Debug("inventory: amqp: answer nobody waits for dropped (late or repeated)", "task_id", task, "result", a.Result)
		return
	}
	for _, w := range ws {
		w <- a // buffered, and each waiter is answered once
	}
}

// Close implements Client: Sends in flight fail, the reply consumer stops
// and the connection closes. The reply queue expires on the broker. Close
// is idempotent.
func (c *AMQPClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.stop()
	<-c.consumed
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("inventory: amqp client: %w", err)
	}
	return nil
}

// Ping returns nil while the client is connected to the broker, and why not
// otherwise: a readiness check, costing no round trip.
func (c *AMQPClient) Ping(ctx context.Context) error {
	if err := c.conn.Ping(ctx); err != nil {
		return fmt.Errorf("inventory: amqp client: %w", err)
	}
	return nil
}
