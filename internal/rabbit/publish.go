package rabbit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Message is one message of a Publish batch.
type Message struct {
	// Exchange and RoutingKey say where it goes; "" is the default exchange,
	// which routes to the queue named by the routing key.
	Exchange, RoutingKey string
	// Publishing is the message itself. Its MessageId is required and must
	// be unique in the batch: a basic.return is matched to its message by
	// it.
	Publishing amqp.Publishing
}

// Errors of Publish, for callers to classify with errors.Is and errors.As.
var (
	// ErrReturned: the broker could not route the message to any queue and
	// returned it (basic.return). Publish's error is a *ReturnError, which
	// matches it.
	ErrReturned = errors.New("rabbit: message returned unroutable")
	// ErrNacked: the broker refused the message (basic.nack), e.g. a queue
	// at its x-max-length with x-overflow reject-publish.
	ErrNacked = errors.New("rabbit: message nacked by the broker")
	// ErrUnconfirmed: the channel or connection closed before the broker
	// confirmed the message. It may or may not have been routed.
	ErrUnconfirmed = errors.New("rabbit: connection lost before the broker confirmed the message")
	// ErrNoMessageID: a message without a MessageId was not published.
	ErrNoMessageID = errors.New("rabbit: message without a MessageId")
	// ErrDuplicateMessageID: a message whose MessageId another message of
	// the batch has was not published.
	ErrDuplicateMessageID = errors.New("rabbit: message id repeated in one batch")
)

// ReturnError is the broker's basic.return of a message it could not route
// (reply code 312 NO_ROUTE: no queue is bound to the exchange for the
// routing key). It matches ErrReturned.
type ReturnError struct {
	MessageID            string
	Exchange, RoutingKey string
	ReplyCode            uint16
	ReplyText            string
}

func (e *ReturnError) Error() string {
	return fmt.Sprintf("rabbit: message %s returned by exchange %q with routing key %q: %d %s",
		e.MessageID, e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is makes errors.Is(err, ErrReturned) hold.
func (e *ReturnError) Is(target error) bool { return target == ErrReturned }

// IsRefusal reports whether err is the broker's answer declining a message
// (returned or nacked), as opposed to a transport failure.
func IsRefusal(err error) bool {
	return errors.Is(err, ErrReturned) || errors.Is(err, ErrNacked)
}

// Publish publishes msgs mandatory, on a confirm-mode channel, waits for the
// broker to confirm each, and returns one error per message, in order: nil
// once the broker acked the message without returning it; a *ReturnError
// for a returned one; ErrNacked; ErrUnconfirmed (wrapping why) for those
// unconfirmed when the channel or connection closed; ErrNotConnected or
// ErrClosed for all when there was no connection; ctx's error for those
// unconfirmed when ctx ended; ErrNoMessageID and ErrDuplicateMessageID for
// messages it did not publish, and an error for a message whose Headers
// hold a type AMQP cannot carry.
//
// The messages of a batch go out in order on one channel, so a queue
// receives them in that order, after those of any Publish call that
// returned before. Publish is safe for concurrent use (see the package
// doc). When ctx ends while a write is blocked (the broker blocks
// publishing during a resource alarm), Publish returns at once and the
// write finishes in the background: the messages' Body and Headers must not
// be modified after the call.
func (c *Conn) Publish(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	todo := make([]int, 0, len(msgs))
	seen := make(map[string]bool, len(msgs))
	for i, m := range msgs {
		id := m.Publishing.MessageId
		switch {
		case id == "":
			errs[i] = fmt.Errorf("rabbit: message %d of the batch: %w", i, ErrNoMessageID)
		case seen[id]:
			errs[i] = fmt.Errorf("rabbit: message %s: %w", id, ErrDuplicateMessageID)
		default:
			if err := m.Publishing.Headers.Validate(); err != nil {
				errs[i] = fmt.Errorf("rabbit: message %s headers: %w", id, err)
				continue
			}
			seen[id] = true
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return errs
	}
	p, err := c.acquire(ctx)
	if err != nil {
		for _, i := range todo {
			errs[i] = err
		}
		return errs
	}
	c.publish(ctx, p, msgs, todo, errs)
	return errs
}

// pubChannel is a confirm-mode channel of the publishing pool. It holds one
// batch at a time.
type pubChannel struct {
	conn   *amqp.Connection // the connection it is on
	ch     *amqp.Channel
	closes chan *amqp.Error // why the channel closed

	// The returns collector (collect) and how to ask it for what it holds.
	barrier chan chan map[string]amqp.Return
	exited  chan struct{}
	final   map[string]amqp.Return // what it held when the channel closed; read after exited

	reason error // lost's answer, once known
}

// acquire takes a publishing channel of the current connection: an idle one,
// or a new one while the pool is not full. The caller gives it back with
// release.
func (c *Conn) acquire(ctx context.Context) (*pubChannel, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case c.pool <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrClosed
	}
	p, err := c.idleOrNew(ctx)
	if err != nil {
		<-c.pool
		return nil, err
	}
	return p, nil
}

func (c *Conn) idleOrNew(ctx context.Context) (*pubChannel, error) {
	c.mu.Lock()
	conn, err := c.currentLocked()
	for err == nil && len(c.idle) > 0 {
		p := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if p.conn == conn && !p.ch.IsClosed() {
			c.mu.Unlock()
			return p, nil
		}
		_ = p.ch.Close() // at once: it is closed already, or its connection is
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Opening takes two round trips (channel.open, confirm.select), and
	// the Topology more when it is stale, which amqp091 does not bound by
	// ctx.
	type opened struct {
		p   *pubChannel
		err error
	}
	res := make(chan opened, 1)
	go func() {
		if err := c.redeclare(conn); err != nil {
			res <- opened{nil, fmt.Errorf("rabbit: %w", err)}
			return
		}
		p, err := openPubChannel(conn)
		res <- opened{p, err}
	}()
	select {
	case r := <-res:
		return r.p, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.err == nil {
				c.keep(r.p, true) // for the next batch
			}
		}()
		return nil, ctx.Err()
	}
}

// release gives p back with its pool token.
func (c *Conn) release(p *pubChannel, reusable bool) {
	c.keep(p, reusable)
	<-c.pool
}

// keep puts p with the idle channels, or closes it when it is not reusable:
// its connection is gone, it is closed, or a batch was abandoned on it.
func (c *Conn) keep(p *pubChannel, reusable bool) {
	c.mu.Lock()
	keep := reusable && !c.closed && p.conn == c.conn && !p.ch.IsClosed() && len(c.idle) < cap(c.pool)
	if keep {
		c.idle = append(c.idle, p)
	}
	// Closing an open channel waits for the broker's close-ok, which comes
	// after the confirms of an abandoned batch: not on the caller's time.
	// Added under mu while the Conn is open, so before Close's Wait.
	background := !keep && !c.closed && !p.ch.IsClosed()
	if background {
		c.wg.Add(1)
	}
	c.mu.Unlock()
	switch {
	case keep:
	case background:
		go func() {
			defer c.wg.Done()
			_ = p.ch.Close()
		}()
	default:
		_ = p.ch.Close() // closed already, or its connection is closing
	}
}

// openPubChannel opens a confirm-mode channel on conn and starts its
// returns collector.
func openPubChannel(conn *amqp.Connection) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbit: open a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbit: put a channel in confirm mode: %w", err)
	}
	p := &pubChannel{
		conn: conn, ch: ch,
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		barrier: make(chan chan map[string]amqp.Return),
		exited:  make(chan struct{}),
	}
	// amqp091 gives up a return after 5 s on a full listener: collect reads
	// them at once, whatever the publisher is doing.
	go p.collect(ch.NotifyReturn(make(chan amqp.Return, 64)))
	return p, nil
}

// collect gathers the channel's basic.returns by message id until the
// channel closes, and hands them over at each barrier.
//
// amqp091's reader goroutine dispatches a return (handing it to this
// channel) before it dispatches the ack that follows it, so once a batch's
// confirms are all in, its returns are in the channel's buffer or in got.
// At a barrier, collect drains the buffer before answering: the answer holds
// every return sent before the batch's last confirm.
func (p *pubChannel) collect(returns <-chan amqp.Return) {
	defer close(p.exited)
	got := map[string]amqp.Return{}
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				p.final = got
				return
			}
			got[r.MessageId] = r
		case reply := <-p.barrier:
			open := true
			for drained := false; open && !drained; {
				select {
				case r, ok := <-returns:
					if open = ok; ok {
						got[r.MessageId] = r
					}
				default:
					drained = true
				}
			}
			reply <- got
			got = map[string]amqp.Return{}
			if !open {
				p.final = got
				return
			}
		}
	}
}

// returns takes the returns collected since the last call.
func (p *pubChannel) returns() map[string]amqp.Return {
	reply := make(chan map[string]amqp.Return, 1)
	select {
	case p.barrier <- reply:
		return <-reply
	case <-p.exited:
		return p.final
	}
}

// lost is why the channel, which is closed, closed: ErrUnconfirmed,
// wrapping the broker's or the library's reason when there is one.
func (p *pubChannel) lost() error {
	if p.reason == nil {
		p.reason = ErrUnconfirmed
		// amqp091 marks the channel closed, then sends the reason, then
		// closes p.closes: the wait is short.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case e, ok := <-p.closes:
			if ok && e != nil {
				p.reason = fmt.Errorf("%w: %w", ErrUnconfirmed, e)
			}
		case <-t.C:
		}
	}
	return p.reason
}

// sent is what the publishing loop of a batch did: a confirmation to wait
// for, or an error, for each message.
type sent struct {
	confirms []*amqp.DeferredConfirmation
	errs     []error
}

// send publishes msgs[i] for each i of todo.
func (p *pubChannel) send(ctx context.Context, msgs []Message, todo []int) sent {
	s := sent{confirms: make([]*amqp.DeferredConfirmation, len(msgs)), errs: make([]error, len(msgs))}
	var failed error // set once nothing more can be published
	for _, i := range todo {
		m := msgs[i]
		if failed == nil {
			dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Publishing)
			switch {
			case err == nil:
				s.confirms[i] = dc
				continue
			case ctx.Err() != nil:
				failed = ctx.Err()
			case p.ch.IsClosed():
				failed = p.lost()
			default: // the headers were valid: the connection is gone
				failed = fmt.Errorf("%w: %w", ErrUnconfirmed, err)
			}
		}
		if errors.Is(failed, ErrUnconfirmed) {
			s.errs[i] = fmt.Errorf("rabbit: message %s: %w", m.Publishing.MessageId, failed)
		} else {
			s.errs[i] = failed
		}
	}
	return s
}

// publish publishes msgs[i] for each i of todo on p, waits for their
// confirms and sets errs[i]. It releases p.
func (c *Conn) publish(ctx context.Context, p *pubChannel, msgs []Message, todo []int, errs []error) {
	// The loop runs apart so that Publish can return when ctx ends: a
	// write blocks, beyond amqp091's reach of ctx, while the broker blocks
	// publishing (a resource alarm) or the TCP buffers are full.
	// It reads a copy of msgs, which the caller may reuse once Publish
	// returned.
	loop := make(chan sent, 1)
	go func(msgs []Message) { loop <- p.send(ctx, msgs, todo) }(slices.Clone(msgs))
	var s sent
	select {
	case s = <-loop:
	case <-ctx.Done():
		for _, i := range todo {
			errs[i] = ctx.Err()
		}
		go func() {
			<-loop
			c.release(p, false)
		}()
		return
	}

	abandoned := false // ctx ended with confirms outstanding
wait:
	for _, i := range todo {
		if dc := s.confirms[i]; dc != nil {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				abandoned = true
				break wait
			}
		}
	}

	returned := p.returns()
	for _, i := range todo {
		dc := s.confirms[i]
		if dc == nil {
			errs[i] = s.errs[i]
			continue
		}
		id := msgs[i].Publishing.MessageId
		select {
		case <-dc.Done():
		default:
			errs[i] = ctx.Err()
			continue
		}
		switch r, ok := returned[id]; {
		case !dc.Acked() && p.ch.IsClosed():
			// amqp091 nacks what is unconfirmed when the channel closes,
			// after marking it closed.
			lost := p.lost()
			c.noteMissing(lost)
			errs[i] = fmt.Errorf("rabbit: message %s: %w", id, lost)
		case !dc.Acked():
			errs[i] = fmt.Errorf("rabbit: message %s: %w", id, ErrNacked)
		case ok:
			errs[i] = &ReturnError{MessageID: id, Exchange: r.Exchange, RoutingKey: r.RoutingKey, ReplyCode: r.ReplyCode, ReplyText: r.ReplyText}
		}
	}
	c.release(p, !abandoned && !slices.ContainsFunc(s.errs, func(err error) bool { return err != nil }))
}
