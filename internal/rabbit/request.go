package rabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Requester is the asking side of request/reply over RabbitMQ, as lapse
// sends commands to a service that answers each (the inventory's stock
// commands, the order service's cancel commands): it publishes a request
// and waits for the reply that carries the request's correlation_id on a
// reply queue of its own.
//
// A request is published as given (persistent or not, to the exchange and
// routing key given), mandatory and with publisher confirms, reply_to the
// Requester's reply queue: Request fails — an unknown outcome, the caller
// may ask again with the same id — when the broker does not confirm it, no
// queue takes it (ErrReturned) or no reply comes before ctx ends
// (ErrNoReply). It never answers a reply to another request.
//
// The reply queue is the Requester's alone (its callers name it with a
// random part, so that any number of instances share one responder). It is
// neither exclusive nor durable and expires RequesterConfig.ReplyExpiry
// after its last consumer went away: it survives a reconnect, during which
// replies wait in it, and is declared again if it was lost (a broker
// restart, a long outage). A reply lost with it is harmless for callers
// whose responder answers a repeated request as before. A reply nobody waits
// for — it came after its Request gave up, twice, or names no request — is
// dropped and counted (Dropped).
type Requester struct {
	conn    *Conn
	replyTo string
	replyID func(amqp.Delivery) string
	log     *slog.Logger

	mu      sync.Mutex
	waiting map[string][]chan amqp.Delivery // by correlation id
	closed  bool

	dropped atomic.Uint64

	stop     context.CancelFunc
	consumed chan struct{} // closed when the reply consumer returned
	done     chan struct{} // closed by Close
}

// RequesterConfig configures a Requester.
type RequesterConfig struct {
	// Conn configures the connection. Its Topology declares what requests
	// are published to (an exchange, so that a requester started before
	// its responder can publish); the Requester declares its reply queue
	// after it, on every new connection. PublishChannels bounds the
	// Requests that publish at once: each publishes alone and waits for
	// its confirm on a channel of the pool.
	Conn Config
	// ReplyQueue names the Requester's reply queue: it must be this
	// Requester's alone. Required.
	ReplyQueue string
	// ReplyExpiry is how long the reply queue outlives its last consumer
	// (x-expires): long enough to span a reconnect, so that replies sent
	// meanwhile are still delivered, short enough that the queues of
	// requesters that went away do not pile up. Defaults to 5 minutes.
	ReplyExpiry time.Duration
	// ReplyPrefetch is how many replies are delivered ahead of their
	// handling. Defaults to 256.
	ReplyPrefetch int
	// ReplyID returns the correlation id of the request a reply answers,
	// "" when the reply cannot be read (it is dropped and counted).
	// Defaults to the reply's correlation_id.
	ReplyID func(d amqp.Delivery) string
}

// Errors of Request.
var (
	// ErrNoReply: no reply came before the Request's context ended. It
	// is wrapped with the context's error.
	ErrNoReply = errors.New("rabbit: no reply")
	// ErrNoCorrelationID: a request without a CorrelationId.
	ErrNoCorrelationID = errors.New("rabbit: request without a CorrelationId")
)

// DialRequester connects to the broker at rawURL (see Dial), declares
// cfg.Conn.Topology and the reply queue, starts consuming replies and
// returns the Requester. It keeps trying to connect until ctx ends and gives
// up at once on an error that retrying cannot fix. Once connected it
// reconnects by itself; Close it when done.
func DialRequester(ctx context.Context, rawURL string, cfg RequesterConfig) (*Requester, error) {
	if cfg.ReplyQueue == "" {
		return nil, errors.New("rabbit: requester without a reply queue")
	}
	if cfg.ReplyExpiry <= 0 {
		cfg.ReplyExpiry = 5 * time.Minute
	}
	if cfg.ReplyPrefetch <= 0 {
		cfg.ReplyPrefetch = 256
	}
	if cfg.ReplyID == nil {
		cfg.ReplyID = func(d amqp.Delivery) string { return d.CorrelationId }
	}
	r := &Requester{
		replyTo:  cfg.ReplyQueue,
		replyID:  cfg.ReplyID,
		waiting:  map[string][]chan amqp.Delivery{},
		consumed: make(chan struct{}),
		done:     make(chan struct{}),
	}
	topology := cfg.Conn.Topology
	args := amqp.Table{"x-expires": int64(cfg.ReplyExpiry / time.Millisecond)}
	cfg.Conn.Topology = func(ch *amqp.Channel) error {
		if topology != nil {
			if err := topology(ch); err != nil {
				return err
			}
		}
		if _, err := ch.QueueDeclare(r.replyTo, false, false, false, false, args); err != nil {
			return fmt.Errorf("declare reply queue %s: %w", r.replyTo, err)
		}
		return nil
	}
	conn, err := Dial(ctx, rawURL, cfg.Conn)
	if err != nil {
		return nil, err
	}
	r.conn, r.log = conn, conn.log
	consumeCtx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		defer close(r.consumed)
		// Returns at Close only: Consume subscribes again after every
		// loss, redeclaring the queue if it is missing.
		_ = r.conn.Consume(consumeCtx, r.replyTo, cfg.ReplyPrefetch, r.reply)
	}()
	return r, nil
}

// ReplyQueue is the name of the Requester's reply queue.
func (r *Requester) ReplyQueue() string { return r.replyTo }

// Dropped counts the replies that arrived when no Request waited for them:
// late (after their Request gave up), repeated, or unreadable.
func (r *Requester) Dropped() uint64 { return r.dropped.Load() }

// Request publishes msg with its ReplyTo set to the reply queue and waits
// for the reply whose id (RequesterConfig.ReplyID) is msg's CorrelationId,
// until ctx ends. msg needs a CorrelationId and a MessageId. The reply is
// returned as delivered, already acknowledged.
//
// Its errors: the Publish error of msg (a *ReturnError, matching
// ErrReturned, when no queue took it; ErrNacked; ErrUnconfirmed;
// ErrNotConnected); ErrNoReply wrapping ctx's error when no reply came;
// ErrClosed when the Requester is, or gets, closed. All but ErrClosed leave
// the outcome unknown: the request may have been applied. Concurrent
// Requests with one correlation id all get the first reply.
func (r *Requester) Request(ctx context.Context, msg Message) (amqp.Delivery, error) {
	id := msg.Publishing.CorrelationId
	if id == "" {
		return amqp.Delivery{}, ErrNoCorrelationID
	}
	// Waiting before publishing: the reply may come before Publish
	// returns.
	got, err := r.wait(id)
	if err != nil {
		return amqp.Delivery{}, err
	}
	defer r.unwait(id, got)

	msg.Publishing.ReplyTo = r.replyTo
	if err := r.conn.Publish(ctx, []Message{msg})[0]; err != nil {
		return amqp.Delivery{}, err
	}
	select {
	case d := <-got:
		return d, nil
	case <-ctx.Done():
		return amqp.Delivery{}, fmt.Errorf("%w: %w", ErrNoReply, ctx.Err())
	case <-r.done:
		return amqp.Delivery{}, ErrClosed
	}
}

// wait registers a waiter for id's reply.
func (r *Requester) wait(id string) (chan amqp.Delivery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	ch := make(chan amqp.Delivery, 1)
	r.waiting[id] = append(r.waiting[id], ch)
	return ch, nil
}

// unwait removes the waiter ch of id, if the reply did not already.
func (r *Requester) unwait(id string, ch chan amqp.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiting[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(r.waiting, id)
	} else {
		r.waiting[id] = ws
	}
}

// reply hands a reply from the reply queue to the Requests waiting for it.
func (r *Requester) reply(_ context.Context, d amqp.Delivery) {
	_ = d.Ack(false) // lost with the channel: delivered again, then dropped
	id := r.replyID(d)
	if id == "" {
		r.dropped.Add(1)
		r.log.Warn("rabbitmq: unreadable reply dropped", "queue", r.replyTo, "correlation_id", d.CorrelationId)
		return
	}
	r.mu.Lock()
	ws := r.waiting[id]
	delete(r.waiting, id)
	r.mu.Unlock()
	if len(ws) == 0 {
		r.dropped.Add(1)
		r.log.Debug("rabbitmq: reply nobody waits for dropped (late or repeated)", "queue", r.replyTo, "correlation_id", id)
		return
	}
	for _, w := range ws {
		w <- d // buffered, and each waiter is answered once
	}
}

// Close stops the Requester: Requests in flight fail with ErrClosed, the
// reply consumer stops and the connection closes. The reply queue expires
// on the broker. Close is idempotent.
func (r *Requester) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	r.stop()
	<-r.consumed
	return r.conn.Close()
}

// Ping returns nil while the Requester is connected to the broker, and why
// not otherwise: a readiness check, costing no round trip.
func (r *Requester) Ping(ctx context.Context) error { return r.conn.Ping(ctx) }
