package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// AMQPServer is the inventory's side of the AMQP transport: it consumes the
// command queue and has an Applier apply each command.
//
// For each delivery, with manual acknowledgements and at most AMQPPrefetch
// in hand:
//   - a body that does not decode or Validate is rejected without requeue,
//     so the broker dead-letters it, and answered REJECTED when it names a
//     task (task_id, correlation_id or message_id) and a reply_to;
//   - Success or AlreadyDone: the answer is published, then the command
//     acked;
//   - Rejected: the answer is published, then the command rejected without
//     requeue: it is dead-lettered to prefix.dead and kept in that queue for
//     the inventory's operator;
//   - an Apply error: no answer; after a backoff that grows with
//     consecutive failures (AMQPRetryBackoff), the command goes back to the
//     queue, to be applied again;
//   - ErrWithhold: no answer; the command is settled as its answer says.
//
// Answers go to the default exchange with the command's reply_to as routing
// key, correlation_id the task id, with publisher confirms. An answer whose
// reply queue is gone (returned unroutable: its lapse went away) is logged
// and the command settled all the same: lapse sends it again. An answer the
// broker did not confirm (the connection was lost, or it nacked the answer)
// sends the command back to the queue, to be applied — idempotently — and
// answered again.
// Deliveries are applied concurrently, so Apply must be safe for concurrent
// use (as Applier requires).
type AMQPServer struct {
	conn *rabbit.Conn
	a    Applier
	cfg  amqpConfig
	log  *slog.Logger

	failures atomic.Int64 // consecutive Apply errors
	serving  sync.Mutex   // one Serve at a time
}

// ServeAMQP connects to the broker at rawURL, declares the topology (see
// NewAMQPServer) and applies commands with a until ctx ends; then it
// finishes the commands in hand and returns nil. It returns an error when it
// cannot connect.
func ServeAMQP(ctx context.Context, rawURL string, a Applier, opts ...AMQPOption) error {
	s, err := NewAMQPServer(ctx, rawURL, a, opts...)
	if err != nil {
		return err
	}
	serr := s.Serve(ctx)
	if err := s.Close(); err != nil && serr == nil {
		serr = err
	}
	return serr
}

// NewAMQPServer connects to the broker at rawURL and declares, here and
// after every reconnect: the command exchange (durable, topic); the
// dead-letter exchange (durable, topic) and its queue (durable, bound with
// #); the command queue (durable, x-dead-letter-exchange the dead-letter
// exchange, bound to the command exchange with stock.*). Once it returned,
// commands are queued even before Serve runs. It keeps trying to connect
// until ctx ends and gives up at once when the broker refuses the
// credentials, the vhost or the topology (a queue of that name with other
// arguments). Options: AMQPPrefix, AMQPQueue, AMQPPrefetch,
// AMQPRetryBackoff, AMQPLogger.
func NewAMQPServer(ctx context.Context, rawURL string, a Applier, opts ...AMQPOption) (*AMQPServer, error) {
	cfg, err := newAMQPConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &AMQPServer{a: a, cfg: cfg, log: cfg.logger.With("inventory", "amqp", "queue", cfg.commandQueue())}
	s.conn, err = rabbit.Dial(ctx, rawURL, rabbit.Config{
		Topology: s.declare,
		// Every command in hand may be answering at once.
		PublishChannels: min(cfg.prefetch, 32),
		ConnectionName:  "lapse inventory",
		Logger:          cfg.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: amqp server: %w", err)
	}
	return s, nil
}

func (s *AMQPServer) declare(ch *amqp.Channel) error {
	if err := declareExchange(ch, s.cfg.exchange()); err != nil {
		return err
	}
	dead := s.cfg.deadExchange()
	if err := ch.ExchangeDeclare(dead, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s (durable, topic): %w", dead, err)
	}
	if _, err := ch.QueueDeclare(s.cfg.deadQueue(), true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", s.cfg.deadQueue(), err)
	}
	if err := ch.QueueBind(s.cfg.deadQueue(), "#", dead, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", s.cfg.deadQueue(), dead, err)
	}
	q := s.cfg.commandQueue()
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": dead}); err != nil {
		return fmt.Errorf("declare queue %s (durable, dead-lettering to %s): %w", q, dead, err)
	}
	if err := ch.QueueBind(q, "stock.*", s.cfg.exchange(), false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", q, s.cfg.exchange(), err)
	}
	return nil
}

// Serve consumes the command queue and applies commands, up to
// AMQPPrefetch at once, until ctx ends: then it takes no more, finishes
// those in hand (their Apply gets a context not cancelled with ctx, for 30 s
// at most), and returns nil. Broker errors are logged and retried; Serve
// returns early only when the server is closed (rabbit.ErrClosed).
func (s *AMQPServer) Serve(ctx context.Context) error {
	if !s.serving.TryLock() {
		return errors.New("inventory: amqp server: Serve is already running")
	}
	defer s.serving.Unlock()

	if err := s.conn.Serve(ctx, s.cfg.commandQueue(), s.cfg.prefetch, s.handle); err != nil {
		return fmt.Errorf("inventory: amqp server: %w", err)
	}
	return nil
}

// handle applies one command and settles its delivery. ctx is Serve's: its
// end cuts a backoff short, not an Apply.
func (s *AMQPServer) handle(ctx context.Context, d amqp.Delivery) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.applyMax)
	defer cancel()

	var c Command
	err := json.Unmarshal(d.Body, &c)
	if err == nil {
		err = c.Validate()
	}
	task := taskOf(c, d)
	if err != nil {
		s.log.Warn("inventory: amqp: malformed command dead-lettered", "task_id", task, "message_id", d.MessageId, "err", err)
		if task != "" {
			s.reply(actx, d, Answer{TaskID: task, Result: Rejected, Reason: err.Error()})
		}
		s.settle(d, d.Nack(false, false), "reject")
		return
	}

	a, err := s.a.Apply(actx, c)
	withhold := errors.Is(err, ErrWithhold)
	if err == nil && a.Result != Success && a.Result != AlreadyDone && a.Result != Rejected {
		err = fmt.Errorf("applier answered result %q", a.Result)
	}
	if err != nil && !withhold {
		n := s.failures.Add(1)
		wait := s.backoff(n)
		s.log.Warn("inventory: amqp: apply failed; command requeued", "task_id", task, "action", c.Action,
			"reservation_id", c.ReservationID, "consecutive_failures", n, "requeue_in", wait, "err", err)
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
	if a.TaskID == "" {
		a.TaskID = task
	}
	if !withhold && !s.reply(actx, d, a) {
		// Requeued to be applied, idempotently, and answered again. (When
		// the channel is gone the nack fails, and the broker requeues it
		// all the same.)
		s.settle(d, d.Nack(false, true), "requeue")
		return
	}
	if a.Result == Rejected {
		s.log.Info("inventory: amqp: command rejected and dead-lettered", "task_id", task, "action", c.Action,
			"reservation_id", c.ReservationID, "reason", a.Reason)
		s.settle(d, d.Nack(false, false), "reject")
		return
	}
	s.settle(d, d.Ack(false), "ack")
}

// reply publishes a to d's reply_to. It returns false when the broker did
// not confirm it (the connection was lost, the broker nacked it), so the
// command must be delivered again; a reply queue that is gone, or no
// reply_to, is logged and counts as answered.
func (s *AMQPServer) reply(ctx context.Context, d amqp.Delivery, a Answer) bool {
	if d.ReplyTo == "" {
		s.log.Warn("inventory: amqp: command without reply_to; not answered", "task_id", a.TaskID)
		return true
	}
	body, err := json.Marshal(a)
	if err != nil { // Answer always encodes
		s.log.Error("inventory: amqp: encode answer", "task_id", a.TaskID, "err", err)
		return true
	}
	switch err := s.conn.Reply(ctx, d, amqp.Publishing{
		ContentType:   contentType,
		MessageId:     a.TaskID,
		CorrelationId: a.TaskID,
		Type:          string(a.Result),
		Body:          body,
	}); {
	case err == nil:
		return true
	case errors.Is(err, rabbit.ErrReturned):
		s.log.Warn("inventory: amqp: reply queue gone; answer dropped (lapse resends)", "task_id", a.TaskID, "reply_to", d.ReplyTo)
		return true
	default:
		s.log.Warn("inventory: amqp: answer not confirmed; command requeued", "task_id", a.TaskID, "err", err)
		return false
	}
}

// settle logs the failure to settle d (how: ack, reject or requeue): its
// channel is gone, and the broker delivers d again.
func (s *AMQPServer) settle(d amqp.Delivery, err error, how string) {
	if err != nil {
		s.log.Warn("inventory: amqp: could not settle command (it will be delivered again)", "how", how, "message_id", d.MessageId, "err", err)
	}
}

// backoff is the wait before requeueing after n consecutive Apply errors:
// retryMin doubling up to retryMax, from half of that to all of it.
func (s *AMQPServer) backoff(n int64) time.Duration {
	return rabbit.Backoff(int(min(n, 64)), s.cfg.retryMin, s.cfg.retryMax)
}

// Close closes the connection; a running Serve returns.
func (s *AMQPServer) Close() error {
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("inventory: amqp server: %w", err)
	}
	return nil
}

// Ping returns nil while the server is connected to the broker, and why not
// otherwise: a readiness check, costing no round trip.
func (s *AMQPServer) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("inventory: amqp server: %w", err)
	}
	return nil
}
