package rabbit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The answering side of request/reply (a Requester's counterpart): Serve
// consumes a queue of requests with a handler per delivery running
// concurrently, and Reply answers a request to its reply_to. What a
// responder does with a request — apply it, refuse it, settle it — is its
// own: the inventory's and the order service's responders differ there.

// ErrNoReplyTo: Reply to a request without a reply_to.
var ErrNoReplyTo = errors.New("rabbit: request without reply_to")

// Serve consumes queue like Consume (manual acknowledgements, at most
// prefetch deliveries unsettled, subscribing again after every loss), but
// runs handle on a goroutine of its own for each delivery, up to prefetch
// at once. When ctx ends it takes no more deliveries, waits for the
// handlers in hand to return — they still settle their deliveries on the
// open channel, so handle must finish what it started rather than stop with
// ctx — then ends the subscription and returns nil. It returns earlier, with
// ErrClosed, only when the Conn is closed.
func (c *Conn) Serve(ctx context.Context, queue string, prefetch int, handle Handler) error {
	// The subscription outlives ctx until the deliveries in hand are
	// settled: closing its channel would requeue them, and their acks
	// would be lost.
	subCtx, unsubscribe := context.WithCancel(context.WithoutCancel(ctx))
	defer unsubscribe()
	var (
		mu       sync.Mutex
		stopping bool
		inHand   sync.WaitGroup
		slots    = make(chan struct{}, max(prefetch, 1))
	)
	consumed := make(chan error, 1)
	go func() {
		consumed <- c.Consume(subCtx, queue, prefetch, func(_ context.Context, d amqp.Delivery) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return // unsettled: back to the queue with the channel
			}
			mu.Lock()
			if stopping {
				mu.Unlock()
				<-slots
				return
			}
			inHand.Add(1)
			mu.Unlock()
			go func() {
				defer inHand.Done()
				defer func() { <-slots }()
				handle(ctx, d)
			}()
		})
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-consumed:
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	inHand.Wait()
	unsubscribe()
	if err == nil {
		if err = <-consumed; errors.Is(err, context.Canceled) {
			err = nil
		}
	}
	return err
}

// Reply publishes reply to the default exchange with request's reply_to as
// routing key, with publisher confirms, its CorrelationId and MessageId
// (when not set) the request's correlation_id, or its message_id when it
// has none. It returns nil once the broker confirmed the reply;
// ErrNoReplyTo for a request without reply_to; a *ReturnError (ErrReturned)
// when the reply queue is gone (its requester went away: it asks again, or
// never will); otherwise the reply may not have arrived, and the request
// should be delivered again (requeued) to be answered again.
func (c *Conn) Reply(ctx context.Context, request amqp.Delivery, reply amqp.Publishing) error {
	if request.ReplyTo == "" {
		return ErrNoReplyTo
	}
	if reply.CorrelationId == "" {
		reply.CorrelationId = request.CorrelationId
		if reply.CorrelationId == "" {
			reply.CorrelationId = request.MessageId
		}
	}
	if reply.MessageId == "" {
		reply.MessageId = reply.CorrelationId
	}
	if reply.MessageId == "" {
		reply.MessageId = "reply" // Publish needs one; the batch holds one message
	}
	if reply.Timestamp.IsZero() {
		reply.Timestamp = time.Now()
	}
	return c.Publish(ctx, []Message{{RoutingKey: request.ReplyTo, Publishing: reply}})[0]
}

// Backoff is the wait before try n (from 1) after failures: lo doubling
// with each failure up to hi, and drawn from half of that to all of it
// (jitter), so that many clients failing at once do not retry in step.
func Backoff(n int, lo, hi time.Duration) time.Duration {
	d := hi
	if shift := n - 1; shift >= 0 && shift < 32 && lo<<shift > 0 {
		d = min(d, lo<<shift)
	}
	return d/2 + rand.N(d/2+1)
}
