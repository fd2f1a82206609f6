package ordersvc

// The AMQP transport: lapse publishes each command to a topic exchange and
// waits for the answer on a reply queue of its own (amqp_client.go); the
// order service consumes a durable command queue, applies each command and
// answers to the command's reply_to (amqp_server.go is lapse's reference
// receiver). The request/reply machinery is internal/rabbit's, shared with
// the inventory's transport.
//
// The wire contract over AMQP is the HTTP one moved onto message
// properties:
//
//   - the body is the command's JSON, content_type application/json;
//   - message_id and correlation_id are the command id (the webhook-id):
//     the same on every retry, the receiver dedupes on it;
//   - the headers webhook-id, webhook-timestamp and webhook-signature
//     (Standard Webhooks, signing the body exactly as over HTTP) and
//     lapse-attempt and lapse-deadline are AMQP string headers, so that a
//     receiver verifies with its language's Standard Webhooks library by
//     handing it the headers as it would HTTP ones;
//   - the message is persistent, published mandatory with publisher
//     confirms (a command no queue takes is an error, retried), reply_to
//     lapse's reply queue, and expires (the expiration property) when
//     lapse stops waiting for its answer: a command nobody waits for is
//     not applied late, lapse sends it again with the same id and a fresh
//     signature;
//   - the answer is the JSON Answer, published to the default exchange with
//     the command's reply_to as routing key and its correlation_id. A
//     receiver that refuses a command it cannot read sets the lapse-status
//     header to the HTTP status it would have answered (400): lapse takes
//     it as it takes that status over HTTP (DEAD at once for a 4xx other
//     than 408, 409 and 429; retried otherwise). Without lapse-status an
//     answer is a 200.
//
// The names both sides use derive from one prefix (AMQPPrefix, default
// "lapse.orders"):
//
//	<prefix>                  topic exchange, durable: commands, routing key order.cancel_if_pending
//	<prefix>.commands         the order service's command queue, durable, bound with order.*
//	<prefix>.replies.<random> one lapse instance's reply queue
//
// A different prefix is a separate deployment: tests use one each, and
// several lapse installations can share a broker.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/outbox/webhook"
)

// The AMQP names and headers of the contract.
const (
	// AMQPExchange is the default prefix and command exchange.
	AMQPExchange = "lapse.orders"
	// AMQPCommandQueue is the default command queue.
	AMQPCommandQueue = AMQPExchange + ".commands"
	// AMQPBinding binds the command queue to the exchange: every command
	// type (the routing key is the body's type).
	AMQPBinding = "order.*"
	// HeaderStatus is the answer's header that carries an HTTP status
	// other than 200 (a refusal, 400 for a command that cannot be read).
	HeaderStatus = "lapse-status"
	// amqpContentType of commands and answers.
	amqpContentType = "application/json"
)

// AMQP transport defaults.
const (
	// DefaultAMQPTimeout is how long Send waits for an answer, publishing
	// included; the command expires in its queue after as long.
	DefaultAMQPTimeout = 10 * time.Second
	// DefaultAMQPPrefetch is how many commands a receiver applies at once.
	DefaultAMQPPrefetch = 32
	// replyExpiry is how long a reply queue outlives its client's last
	// consumer (x-expires).
	replyExpiry = 5 * time.Minute
	// amqpTolerance is how far a command's webhook-timestamp may be from the
	// receiver's clock: Standard Webhooks' five minutes. The command
	// expires in its queue long before (the send timeout).
	amqpTolerance = 5 * time.Minute
)

// AMQPOption configures DialAMQP and ServeAMQP. An option that concerns one
// side only is ignored by the other, so that both sides can be given the
// same list.
type AMQPOption func(*amqpConfig)

type amqpConfig struct {
	prefix   string
	queue    string // "" is prefix.commands
	secrets  []string
	timeout  time.Duration
	prefetch int
	retryMin time.Duration
	retryMax time.Duration
	applyMax time.Duration
	logger   *slog.Logger
}

// newAMQPConfig applies opts, then the URL's own parameter (?prefix=), and
// returns the broker's URL without it.
func newAMQPConfig(rawURL string, opts []AMQPOption) (string, amqpConfig, error) {
	cfg := amqpConfig{
		prefix:   AMQPExchange,
		timeout:  DefaultAMQPTimeout,
		prefetch: DefaultAMQPPrefetch,
		retryMin: 50 * time.Millisecond,
		retryMax: 2 * time.Second,
		applyMax: 30 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	broker, prefix, err := splitAMQPURL(rawURL)
	if err != nil {
		return "", cfg, err
	}
	if prefix != "" {
		cfg.prefix = prefix
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	switch {
	case cfg.prefix == "":
		return "", cfg, errors.New("ordersvc: amqp: empty prefix")
	case cfg.timeout <= 0:
		return "", cfg, fmt.Errorf("ordersvc: amqp: timeout %s: want > 0", cfg.timeout)
	case cfg.prefetch < 1:
		return "", cfg, fmt.Errorf("ordersvc: amqp: prefetch %d: want at least 1", cfg.prefetch)
	case cfg.retryMin <= 0 || cfg.retryMax < cfg.retryMin:
		return "", cfg, fmt.Errorf("ordersvc: amqp: retry backoff %s to %s: want 0 < min <= max", cfg.retryMin, cfg.retryMax)
	}
	if _, err := webhook.NewSigner(cfg.secrets); err != nil {
		return "", cfg, fmt.Errorf("ordersvc: amqp: secrets: %w", err)
	}
	return broker, cfg, nil
}

// splitAMQPURL takes the transport's own parameter, ?prefix=NAME, out of an
// amqp[s]:// URL, and checks what is left as a broker URL. Its errors never
// show the URL (it holds a password).
func splitAMQPURL(raw string) (broker, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", errors.New("ordersvc: amqp URL: malformed")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", errors.New("ordersvc: amqp URL: malformed query")
	}
	if vs, ok := q["prefix"]; ok {
		if len(vs) != 1 || vs[0] == "" || strings.HasPrefix(vs[0], "amq.") || len(vs[0]) > 200 {
			return "", "", fmt.Errorf("ordersvc: amqp URL: prefix %q: want one name of 1 to 200 characters, not starting with \"amq.\"", strings.Join(vs, ","))
		}
		prefix = vs[0]
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	broker = u.String()
	if err := rabbit.CheckURL(broker); err != nil {
		return "", "", fmt.Errorf("ordersvc: amqp URL: %w (the transport's own parameter is prefix)", err)
	}
	return broker, prefix, nil
}

// CheckAMQPURL reports what is wrong with an --order-service amqp[s]:// URL
// without connecting: amqp[s]://user:password@host:5672/vhost, with the
// transport's ?prefix=NAME and the connection's parameters
// (rabbit.URLParams: heartbeat, TLS files, …).
func CheckAMQPURL(raw string) error {
	_, _, err := splitAMQPURL(raw)
	return err
}

func (cfg amqpConfig) exchange() string { return cfg.prefix }

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

// AMQPPrefix names the exchange and queues (see the list at the top of
// amqp.go). Default "lapse.orders" (AMQPExchange, AMQPCommandQueue). A URL's
// ?prefix= takes precedence.
func AMQPPrefix(prefix string) AMQPOption { return func(c *amqpConfig) { c.prefix = prefix } }

// AMQPQueue names the receiver's command queue instead of
// prefix+".commands" (receiver side).
func AMQPQueue(name string) AMQPOption { return func(c *amqpConfig) { c.queue = name } }

// AMQPSecrets are the Standard Webhooks secrets (whsec_…) lapse signs every
// command with and the receiver verifies with: on lapse's side the current
// one and, during a rotation, the previous one (each command carries a
// signature for each); on the receiver's side any of them. Required on both
// sides.
func AMQPSecrets(secrets ...string) AMQPOption {
	return func(c *amqpConfig) { c.secrets = append([]string(nil), secrets...) }
}

// AMQPTimeout is how long Send waits for the answer, publishing included,
// before it reports an unknown outcome; the command expires in its queue
// after as long (lapse's side). Default DefaultAMQPTimeout.
func AMQPTimeout(d time.Duration) AMQPOption { return func(c *amqpConfig) { c.timeout = d } }

// AMQPPrefetch is how many commands the receiver holds unacknowledged and
// applies at once (receiver side). Default DefaultAMQPPrefetch.
func AMQPPrefetch(n int) AMQPOption { return func(c *amqpConfig) { c.prefetch = n } }

// AMQPRetryBackoff bounds the wait before a command whose apply failed goes
// back to the queue (receiver side): min after one failure, doubling with
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
