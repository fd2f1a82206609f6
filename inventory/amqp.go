package inventory

// The AMQP transport: lapse publishes commands to a topic exchange and waits
// for answers on a reply queue of its own (amqp_client.go); the inventory
// consumes a durable command queue, applies each command and answers
// (amqp_server.go). Both sides keep their connection through internal/rabbit,
// which confirms publishes, reports unroutable messages and reconnects.
//
// The names both sides use derive from one prefix (AMQPPrefix, default
// "lapse.stock"):
//
//	<prefix>                  topic exchange, durable: commands, routing key stock.<action>
//	<prefix>.commands         the inventory's command queue, durable, bound with stock.*
//	<prefix>.dead             exchange (topic, durable) and queue (durable, bound with #)
//	                          of the commands the inventory rejected for good
//	<prefix>.replies.<random> one client's reply queue
//
// A different prefix is a separate deployment: tests use one each, and
// several lapse installations can share a broker.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The default AMQP names beside Exchange and DeadExchange.
const (
	// CommandQueue is the inventory's queue of commands.
	CommandQueue = "lapse.stock.commands"
	// DeadQueue keeps the commands dead-lettered to DeadExchange, for the
	// inventory's operator to inspect or move back.
	DeadQueue = "lapse.stock.dead"
	// contentType of commands and answers.
	contentType = "application/json"
)

// AMQP transport defaults.
const (
	// DefaultAMQPTimeout is how long Send waits for an answer.
	DefaultAMQPTimeout = 5 * time.Second
	// DefaultAMQPPrefetch is how many commands an inventory applies at once.
	DefaultAMQPPrefetch = 32
	// replyExpiry is how long a reply queue outlives its client's last
	// consumer (x-expires): long enough to span a reconnect, so that
	// answers sent meanwhile are still delivered, short enough that the
	// queues of lapse instances that went away do not pile up.
	replyExpiry = 5 * time.Minute
)

// AMQPOption configures DialAMQP and NewAMQPServer. An option that concerns
// one side only is ignored by the other, so that both sides can be given
// the same list.
type AMQPOption func(*amqpConfig)

type amqpConfig struct {
	prefix   string
	queue    string // "" is prefix.commands
	timeout  time.Duration
	prefetch int
	retryMin time.Duration
	retryMax time.Duration
	applyMax time.Duration
	logger   *slog.Logger
}

func newAMQPConfig(opts []AMQPOption) (amqpConfig, error) {
	cfg := amqpConfig{
		prefix:   Exchange,
		timeout:  DefaultAMQPTimeout,
		prefetch: DefaultAMQPPrefetch,
		retryMin: 50 * time.Millisecond,
		retryMax: 2 * time.Second,
		applyMax: 30 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	switch {
	case cfg.prefix == "":
		return cfg, fmt.Errorf("inventory: amqp: empty prefix")
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("inventory: amqp: timeout %s: want > 0", cfg.timeout)
	case cfg.prefetch < 1:
		return cfg, fmt.Errorf("inventory: amqp: prefetch %d: want at least 1", cfg.prefetch)
	case cfg.retryMin <= 0 || cfg.retryMax < cfg.retryMin:
		return cfg, fmt.Errorf("inventory: amqp: retry backoff %s to %s: want 0 < min <= max", cfg.retryMin, cfg.retryMax)
	}
	return cfg, nil
}

func (cfg amqpConfig) exchange() string     { return cfg.prefix }
func (cfg amqpConfig) deadExchange() string { return cfg.prefix + ".dead" }
func (cfg amqpConfig) deadQueue() string    { return cfg.prefix + ".dead" }

func (cfg amqpConfig) commandQueue() string {
	if cfg.queue != "" {
		return cfg.queue
	}
	return cfg.prefix + ".commands"
}

// replyQueue is a new client's reply queue name: random, so that any number
// of lapse instances each have their own.
func (cfg amqpConfig) replyQueue() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return cfg.prefix + ".replies." + hex.EncodeToString(b)
}

// AMQPPrefix names the exchanges and queues (see the list at the top of
// amqp.go): prefix is the command exchange, prefix+".dead" the dead-letter
// exchange and queue, prefix+".commands" the command queue,
// prefix+".replies.<random>" a client's reply queue. Default "lapse.stock"
// (Exchange, DeadExchange, CommandQueue, DeadQueue).
func AMQPPrefix(prefix string) AMQPOption { return func(c *amqpConfig) { c.prefix = prefix } }

// AMQPQueue names the inventory's command queue instead of
// prefix+".commands" (inventory side).
func AMQPQueue(name string) AMQPOption { return func(c *amqpConfig) { c.queue = name } }

// AMQPTimeout is how long Send waits for the inventory's answer, publishing
// included, before it reports an unknown outcome (client side). Default
// DefaultAMQPTimeout.
func AMQPTimeout(d time.Duration) AMQPOption { return func(c *amqpConfig) { c.timeout = d } }

// AMQPPrefetch is how many commands the inventory holds unacknowledged and
// applies at once (inventory side). Default DefaultAMQPPrefetch.
func AMQPPrefetch(n int) AMQPOption { return func(c *amqpConfig) { c.prefetch = n } }

// AMQPRetryBackoff bounds the wait before a command whose Apply failed goes
// back to the queue (inventory side): min after one failure, doubling with
// each consecutive failure up to max, so that a failing database is not
// spun on. Default 50 ms to 2 s.
func AMQPRetryBackoff(min, max time.Duration) AMQPOption {
	return func(c *amqpConfig) { c.retryMin, c.retryMax = min, max }
}

// AMQPLogger receives the transport's and the connection's logs. Default
// slog.Default().
func AMQPLogger(l *slog.Logger) AMQPOption { return func(c *amqpConfig) { c.logger = l } }

// declareExchange declares the command exchange: durable, topic, the same
// on both sides so that either may come first.
func declareExchange(ch *amqp.Channel, name string) error {
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s (durable, topic): %w", name, err)
	}
	return nil
}

// taskOf is the task id a delivery answers to: the command's own, or the
// message's correlation or message id when the body did not say.
func taskOf(c Command, d amqp.Delivery) string {
	switch {
	case c.TaskID != "":
		return c.TaskID
	case d.CorrelationId != "":
		return d.CorrelationId
	}
	return d.MessageId
}
