package ordersvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// AMQPServer is a receiver of lapse's commands over RabbitMQ: lapse's
// reference order service side of the AMQP transport, for tests, the bench
// and Go order services. It consumes the command queue and has an apply
// function apply each command.
//
// For each delivery, with manual acknowledgements and at most AMQPPrefetch
// in hand:
//   - a signature that does not verify with any of the secrets (or is
//     missing, or stamped more than five minutes away): no answer — its
//     reply_to is not to be trusted — and the command is rejected without
//     requeue, and logged: lapse, hearing nothing, sends it again and parks
//     it DEAD after its attempts;
//   - a verified body that does not decode or Validate: answered with
//     lapse-status 400 (lapse parks the command DEAD at once, as for a 400
//     over HTTP) and rejected without requeue;
//   - applied: the answer is published to reply_to, then the command acked;
//     when the broker does not confirm the answer the command is requeued,
//     to be applied again — idempotently — and answered again;
//   - an apply error, or an answer outside the contract: no answer; after a
//     backoff that grows with consecutive failures (AMQPRetryBackoff) the
//     command goes back to the queue, to be applied again (until it expires
//     there, when lapse has stopped waiting and sends it anew).
//
// An answer whose reply queue is gone (its lapse went away) is logged and
// the command acked all the same: lapse sends it again. Commands are
// applied concurrently, so apply must be safe for concurrent use; and
// since a command may be delivered more than once, apply must answer the
// same command the same way (a conditional update does).
type AMQPServer struct {
	conn   *rabbit.Conn
	apply  func(ctx context.Context, c Command, commandID string) (Answer, error)
	cfg    amqpConfig
	log    *slog.Logger
	verify []*standardwebhooks.Webhook

	failures atomic.Int64 // consecutive apply errors
	stats    struct{ applied, unverified, invalid, requeued atomic.Uint64 }
	serving  sync.Mutex // one Serve at a time
}

// AMQPServerStats counts what an AMQPServer did with the commands it took.
type AMQPServerStats struct {
	Applied    uint64 // applied and answered
	Unverified uint64 // rejected for their signature, unanswered
	Invalid    uint64 // verified but unreadable: answered 400, rejected
	Requeued   uint64 // apply failed, or the answer was not confirmed
}

// ServeAMQP connects to the broker at rawURL, declares the topology (see
// NewAMQPServer) and applies commands with apply until ctx ends; then it
// finishes the commands in hand and returns nil. It returns an error when it
// cannot connect.
func ServeAMQP(ctx context.Context, rawURL string, apply func(ctx context.Context, c Command, commandID string) (Answer, error), opts ...AMQPOption) error {
	s, err := NewAMQPServer(ctx, rawURL, apply, opts...)
	if err != nil {
		return err
	}
	serr := s.Serve(ctx)
	if err := s.Close(); err != nil && serr == nil {
		serr = err
	}
	return serr
}

// NewAMQPServer connects to the broker at rawURL (amqp[s]://…, with
// ?prefix=NAME, see CheckAMQPURL) and declares, here and after every
// reconnect, the command exchange (durable, topic) and the command queue
// (durable, bound to the exchange with order.*). Once it returned, commands
// are queued even before Serve runs. It keeps trying to connect until ctx
// ends and gives up at once when the broker refuses the credentials, the
// vhost or the topology. Options: AMQPSecrets (required), AMQPPrefix,
// AMQPQueue, AMQPPrefetch, AMQPRetryBackoff, AMQPLogger.
func NewAMQPServer(ctx context.Context, rawURL string, apply func(ctx context.Context, c Command, commandID string) (Answer, error), opts ...AMQPOption) (*AMQPServer, error) {
	if apply == nil {
		return nil, errors.New("ordersvc: amqp server: no apply function")
	}
	broker, cfg, err := newAMQPConfig(rawURL, opts)
	if err != nil {
		return nil, err
	}
	s := &AMQPServer{apply: apply, cfg: cfg, log: cfg.logger.With("ordersvc", "amqp", "queue", cfg.commandQueue())}
	for _, secret := range cfg.secrets { // checked by newAMQPConfig
		w, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("ordersvc: amqp server: secret: %w", err)
		}
		s.verify = append(s.verify, w)
	}
	s.conn, err = rabbit.Dial(ctx, broker, rabbit.Config{
		Topology: s.declare,
		// Every command in hand may be answering at once.
		PublishChannels: min(cfg.prefetch, 32),
		ConnectionName:  "lapse order service",
		Logger:          cfg.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("ordersvc: amqp server: %w", err)
	}
	return s, nil
}

// declare is the receiver's topology. The command queue has no
// dead-letter exchange: commands expire in it by design (lapse stops
// waiting and sends again), and would bury the few worth an operator's
// look; those are logged, and lapse's DEAD commands list them.
func (s *AMQPServer) declare(ch *amqp.Channel) error {
	if err := declareExchange(ch, s.cfg.exchange()); err != nil {
		return err
	}
	q := s.cfg.commandQueue()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s (durable): %w", q, err)
	}
	if err := ch.QueueBind(q, AMQPBinding, s.cfg.exchange(), false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", q, s.cfg.exchange(), err)
	}
	return nil
}

// Serve consumes the command queue and applies commands, up to
// AMQPPrefetch at once, until ctx ends: then it takes no more, finishes
// those in hand (their apply gets a context not cancelled with ctx, for 30 s
// at most), and returns nil. Broker errors are logged and retried; Serve
// returns early only when the server is closed.
func (s *AMQPServer) Serve(ctx context.Context) error {
	if !s.serving.TryLock() {
		return errors.New("ordersvc: amqp server: Serve is already running")
	}
	defer s.serving.Unlock()
	if err := s.conn.Serve(ctx, s.cfg.commandQueue(), s.cfg.prefetch, s.handle); err != nil {
		return fmt.Errorf("ordersvc: amqp server: %w", err)
	}
	return nil
}

// handle verifies, applies and answers one command and settles its
// delivery. ctx is Serve's: its end cuts a backoff short, not an apply.
func (s *AMQPServer) handle(ctx context.Context, d amqp.Delivery) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.applyMax)
	defer cancel()

	h := httpHeaders(d.Headers)
	if err := s.verified(h, d.Body, time.Now()); err != nil {
		s.stats.unverified.Add(1)
		s.log.Warn("ordersvc: amqp: command rejected unanswered: its signature does not verify",
			"message_id", d.MessageId, "err", err)
		s.settle(d, d.Reject(false), "reject")
		return
	}
	id := h.Get(standardwebhooks.HeaderWebhookID)
	var c Command
	err := json.Unmarshal(d.Body, &c)
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		s.stats.invalid.Add(1)
		s.log.Warn("ordersvc: amqp: unreadable command refused (400) and rejected", "command_id", id, "err", err)
		body, _ := json.Marshal(amqpRefusal{Error: amqpRefusalError{Code: "invalid_command", Message: err.Error()}})
		s.reply(actx, d, id, body, amqp.Table{HeaderStatus: int32(http.StatusBadRequest)})
		s.settle(d, d.Reject(false), "reject")
		return
	}

	a, err := s.apply(actx, c, id)
	if err == nil {
		err = checkAMQPAnswer(a, id)
	}
	if err != nil {
		s.stats.requeued.Add(1)
		n := s.failures.Add(1)
		wait := rabbit.Backoff(int(min(n, 64)), s.cfg.retryMin, s.cfg.retryMax)
		s.log.Warn("ordersvc: amqp: apply failed; command requeued", "command_id", id, "order_id", c.OrderID,
			"consecutive_failures", n, "requeue_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		s.settle(d, d.Nack(false, true), "requeue")
		return
	}
	s.failures.Store(0)
	if a.CommandID == "" {
		a.CommandID = id
	}
	body, _ := json.Marshal(a) // an Answer always encodes
	if !s.reply(actx, d, id, body, nil) {
		// Requeued to be applied, idempotently, and answered again. (When
		// the channel is gone the nack fails, and the broker requeues it
		// all the same.)
		s.stats.requeued.Add(1)
		s.settle(d, d.Nack(false, true), "requeue")
		return
	}
	s.stats.applied.Add(1)
	s.settle(d, d.Ack(false), "ack")
}

// amqpRefusal is the body of a refusal (lapse-status 400): the HTTP
// receiver's error shape.
type amqpRefusal struct {
	Error amqpRefusalError `json:"error"`
}

type amqpRefusalError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// checkAMQPAnswer refuses an answer lapse would not read.
func checkAMQPAnswer(a Answer, id string) error {
	switch {
	case !a.Result.Valid():
		return fmt.Errorf("apply answered result %q", a.Result)
	case a.RetryAfterSeconds < 0:
		return fmt.Errorf("apply answered retry_after_seconds %d", a.RetryAfterSeconds)
	case a.CommandID != "" && a.CommandID != id:
		return fmt.Errorf("apply answered for command %q", a.CommandID)
	}
	return nil
}

// reply publishes an answer to d's reply_to. It returns false when the
// broker did not confirm it (the connection was lost, the broker nacked
// it), so the command must be delivered again; a reply queue that is gone,
// or no reply_to, is logged and counts as answered.
func (s *AMQPServer) reply(ctx context.Context, d amqp.Delivery, id string, body []byte, headers amqp.Table) bool {
	switch err := s.conn.Reply(ctx, d, amqp.Publishing{
		ContentType: amqpContentType,
		MessageId:   id,
		Headers:     headers,
		Body:        body,
	}); {
	case err == nil:
		return true
	case errors.Is(err, rabbit.ErrNoReplyTo):
		s.log.Warn("ordersvc: amqp: command without reply_to; not answered", "command_id", id)
		return true
	case errors.Is(err, rabbit.ErrReturned):
		s.log.Warn("ordersvc: amqp: reply queue gone; answer dropped (lapse resends)", "command_id", id, "reply_to", d.ReplyTo)
		return true
	default:
		s.log.Warn("ordersvc: amqp: answer not confirmed; command requeued", "command_id", id, "err", err)
		return false
	}
}

// verified checks the command's Standard Webhooks signature, as an HTTP
// receiver does: the three headers present, the timestamp within five
// minutes of now either way, a v1 signature that one of the secrets makes.
func (s *AMQPServer) verified(h http.Header, body []byte, now time.Time) error {
	id := h.Get(standardwebhooks.HeaderWebhookID)
	raw := h.Get(standardwebhooks.HeaderWebhookTimestamp)
	if id == "" || raw == "" || h.Get(standardwebhooks.HeaderWebhookSignature) == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	secs, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not unix seconds")
	}
	if tol := int64(amqpTolerance / time.Second); secs < now.Unix()-tol || secs > now.Unix()+tol {
		return fmt.Errorf("webhook-timestamp %d outside %s of now (%d)", secs, amqpTolerance, now.Unix())
	}
	for _, w := range s.verify {
		if err := w.VerifyIgnoringTimestamp(body, h); err == nil {
			return nil
		}
	}
	return errors.New("no signature matches a secret")
}

// httpHeaders returns a message's string headers as HTTP headers, which
// the Standard Webhooks library reads.
func httpHeaders(t amqp.Table) http.Header {
	h := http.Header{}
	for k, v := range t {
		switch v := v.(type) {
		case string:
			h.Set(k, v)
		case []byte:
			h.Set(k, string(v))
		}
	}
	return h
}

// settle logs the failure to settle d (how: ack, reject or requeue): its
// channel is gone, and the broker delivers d again.
func (s *AMQPServer) settle(d amqp.Delivery, err error, how string) {
	if err != nil {
		s.log.Warn("ordersvc: amqp: could not settle command (it will be delivered again)", "how", how, "message_id", d.MessageId, "err", err)
	}
}

// Stats returns what the server did so far.
func (s *AMQPServer) Stats() AMQPServerStats {
	return AMQPServerStats{
		Applied: s.stats.applied.Load(), Unverified: s.stats.unverified.Load(),
		Invalid: s.stats.invalid.Load(), Requeued: s.stats.requeued.Load(),
	}
}

// Close closes the connection; a running Serve returns.
func (s *AMQPServer) Close() error {
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("ordersvc: amqp server: %w", err)
	}
	return nil
}

// Ping returns nil while the server is connected to the broker, and why not
// otherwise: a readiness check, costing no round trip.
func (s *AMQPServer) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ordersvc: amqp server: %w", err)
	}
	return nil
}
