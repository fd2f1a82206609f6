package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/redact"
)

// maxRoutingKey is AMQP 0-9-1's limit on a routing key (a short string).
const maxRoutingKey = 255

// names are the exchanges and queues of one Prefix.
type names struct {
	prefix string
	levels int
	fixed  []time.Duration // the TTLs of the fixed delays' queues, shortest first
}

// fixedQueue is the name of the queue of fixed TTL ttl:
// <prefix>.fixed.<ttl in ms>. Named by its TTL, which is baked into it:
// instances with other leads or bases use queues of their own.
func (n names) fixedQueue(ttl time.Duration) string {
	return fmt.Sprintf("%s.fixed.%d", n.prefix, ttl.Milliseconds())
}

// level is the name of level k's exchange and of its wait queue (exchanges
// and queues have separate namespaces): <prefix>.delay.07.
func (n names) level(k int) string { return fmt.Sprintf("%s.delay.%02d", n.prefix, k) }

// entry is the exchange a timer that waits units is published to: that of
// its highest set bit, where it waits first, or the ready exchange when it
// is due already. The levels above would pass it straight on (their bits are
// 0); skipping them spares the broker as many topic matches.
func (n names) entry(units uint64) string {
	if units == 0 {
		return n.ready()
	}
	return n.level(bits.Len64(units) - 1)
}

// ready is the name of the exchange the last level dead-letters into and
// of the queue the Run loops consume.
func (n names) ready() string { return n.prefix + ".ready" }

// below is the exchange level k passes its timers on to: the next lower
// level's, or the ready exchange after level 0.
func (n names) below(k int) string {
	if k == 0 {
		return n.ready()
	}
	return n.level(k - 1)
}

// marker is the queue holding the seed marker (see "Data loss" in the
// package doc).
func (n names) marker() string { return n.prefix + ".seeded" }

// lock is the queue whose exclusive consumer is the seed lock.
func (n names) lock() string { return n.prefix + ".seed-lock" }

// owner is the queue holding the deployment that owns the prefix (Claim);
// ownerLock the queue whose exclusive consumer serializes the claims.
func (n names) owner() string     { return n.prefix + ".deployment" }
func (n names) ownerLock() string { return n.prefix + ".deployment-lock" }

// pattern is the binding pattern of level k's exchange that matches a
// routing key whose bit k is bit ('0' or '1'): one "*." for each higher
// level, the bit, then "#" for the key. Only the topology of earlier
// versions bound with it (see legacyBinding).
func (n names) pattern(k int, bit byte) string {
	return strings.Repeat("*.", n.levels-1-k) + string(bit) + ".#"
}

// next is the binding pattern of level k's exchange that matches a routing
// key whose highest set bit at or below k is bit i: one "*." for each level
// above k, a "0." for each of bits k down to i+1, "1." for bit i, then "#"
// for the lower bits and the key. With i = -1 it matches a key whose bits k
// down to 0 are all 0: the timer is due, bound for the ready queue.
func (n names) next(k, i int) string {
	p := strings.Repeat("*.", n.levels-1-k) + strings.Repeat("0.", k-i)
	if i >= 0 {
		p += "1."
	}
	return p + "#"
}

// routingKey is the routing key of a timer that waits units × Base: one
// token per level, most significant first, each "1" where the timer waits
// in that level's queue and "0" where it passes straight on, then the key
// (cut to fit AMQP's 255 bytes; the body carries it whole). It only makes
// the queues' contents readable: no binding looks at the key.
func (n names) routingKey(units uint64, key string) string {
	var b strings.Builder
	b.Grow(2*n.levels + len(key))
	for k := n.levels - 1; k >= 0; k-- {
		if units>>uint(k)&1 == 1 {
			b.WriteString("1.")
		} else {
			b.WriteString("0.")
		}
	}
	b.WriteString(cut(key, maxRoutingKey-b.Len()))
	return b.String()
}

// cut returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ttl is how long a timer waits in level k's queue: 2^k × base.
func ttl(base time.Duration, k int) time.Duration { return base << uint(k) }

// queueArgs are the arguments every queue of the scheduler is declared
// with, for its queue type.
func queueArgs(queueType string) amqp091.Table {
	return amqp091.Table{"x-queue-type": queueType}
}

// declareTopology declares the ladder, the ready exchange and queue, and the
// queues of the seed marker and lock (see the package doc's diagram). Every
// declaration is idempotent; one whose arguments differ from those of an
// existing entity is refused by the broker (406 PRECONDITION_FAILED), and
// the error says to use a new prefix.
func declareTopology(ch *amqp091.Channel, n names, base time.Duration, queueType string) error {
	// Exchanges first, top down, so that the bindings between them can be made.
	for k := n.levels - 1; k >= 0; k-- {
		if err := ch.ExchangeDeclare(n.level(k), amqp091.ExchangeTopic, true, false, false, false, nil); err != nil {
			return topologyError("exchange", n.level(k), err)
		}
	}
	if err := ch.ExchangeDeclare(n.ready(), amqp091.ExchangeTopic, true, false, false, false, nil); err != nil {
		return topologyError("exchange", n.ready(), err)
	}
	if _, err := ch.QueueDeclare(n.ready(), true, false, false, false, queueArgs(queueType)); err != nil {
		return topologyError("queue", n.ready(), err)
	}
	if err := ch.QueueBind(n.ready(), "#", n.ready(), false, nil); err != nil {
		return topologyError("binding of queue", n.ready(), err)
	}
	for k := n.levels - 1; k >= 0; k-- {
		args := queueArgs(queueType)
		args["x-message-ttl"] = ttl(base, k).Milliseconds()
		args["x-dead-letter-exchange"] = n.below(k)
		if queueType == QueueQuorum {
			// A quorum queue dead-letters at most once by default: a
			// timer would be lost if the next level did not take it (a
			// leader election, a full disk). At least once needs
			// reject-publish overflow (RabbitMQ 3.10+).
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		if _, err := ch.QueueDeclare(n.level(k), true, false, false, false, args); err != nil {
			return topologyError("queue", n.level(k), err)
		}
	}
	// Every exchange routes a timer straight to the queue of its next set
	// bit, or to the ready queue: one topic match per wait, where passing
	// the timer down exchange by exchange cost one per level (see
	// "Routing" in the package doc).
	for k := n.levels - 1; k >= 0; k-- {
		for i := k; i >= -1; i-- {
			q := n.ready()
			if i >= 0 {
				q = n.level(i)
			}
			if err := ch.QueueBind(q, n.next(k, i), n.level(k), false, nil); err != nil {
				return topologyError("binding of queue", q, err)
			}
		}
		// Earlier versions passed a timer whose bit k is 0 on to the next
		// exchange: with both bindings RabbitMQ would still put it in each
		// queue once, but match it at every exchange of the way.
		if err := ch.ExchangeUnbind(n.below(k), n.pattern(k, '0'), n.level(k), false, nil); err != nil {
			return fmt.Errorf("remove the binding of exchange %s from %s (an earlier version's): %w", n.below(k), n.level(k), err)
		}
	}
	// The fast path: a queue per fixed delay, dead-lettering straight into
	// the ready exchange (see "Fixed delays"). Published to through the
	// default exchange, which routes by queue name.
	for _, t := range n.fixed {
		args := queueArgs(queueType)
		args["x-message-ttl"] = t.Milliseconds()
		args["x-dead-letter-exchange"] = n.ready()
		if queueType == QueueQuorum {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		if _, err := ch.QueueDeclare(n.fixedQueue(t), true, false, false, false, args); err != nil {
			return topologyError("queue", n.fixedQueue(t), err)
		}
	}
	markerArgs := queueArgs(queueType)
	markerArgs["x-max-length"] = 1 // a new marker replaces the old one
	markerArgs["x-overflow"] = "drop-head"
	if _, err := ch.QueueDeclare(n.marker(), true, false, false, false, markerArgs); err != nil {
		return topologyError("queue", n.marker(), err)
	}
	// Always classic: a quorum queue does not enforce exclusive consumers
	// (RabbitMQ 3.10), and this queue never holds a message.
	if _, err := ch.QueueDeclare(n.lock(), true, false, false, false, queueArgs(QueueClassic)); err != nil {
		return topologyError("queue", n.lock(), err)
	}
	// Classic too: the owner queue is read under the claim lock's exclusive
	// consumer, and holds one message.
	for _, q := range []string{n.owner(), n.ownerLock()} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, queueArgs(QueueClassic)); err != nil {
			return topologyError("queue", q, err)
		}
	}
	return nil
}

func topologyError(what, name string, err error) error {
	if ae, ok := errors.AsType[*amqp091.Error](err); ok && ae.Code == amqp091.PreconditionFailed {
		return fmt.Errorf("declare %s %s: %w (it exists with other settings: a change of base, levels or queue_type needs a new prefix)", what, name, err)
	}
	return fmt.Errorf("declare %s %s: %w", what, name, err)
}

// DeleteTopology deletes every exchange and queue of cfg.Prefix (with
// cfg.Levels levels), with the timers they hold, on a connection of its own
// to the broker rawURL names (a --timers URL; its prefix and levels, when
// given, replace cfg's). It is how a prefix is retired, and how benchmarks
// and tests leave the broker as they found it. Nothing may be running on
// the prefix: a scheduler that reconnects declares it again.
func DeleteTopology(ctx context.Context, rawURL string, cfg Config) error {
	broker, fromURL, err := ParseURL(rawURL)
	if err != nil {
		return err
	}
	cfg = fromURL.over(cfg)
	cfg.setDefaults()
	if msg := validPrefix(cfg.Prefix); msg != "" {
		return fmt.Errorf("amqp timers: Config.Prefix %q: %s", cfg.Prefix, msg)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cc := &checkConn{url: broker, shown: redact.URL(broker)}
	defer cc.close()
	conn, _, err := cc.get()
	if err != nil {
		return fmt.Errorf("amqp timers: delete the topology of %s: %w", cfg.Prefix, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp timers: delete the topology of %s: open a channel: %w", cfg.Prefix, err)
	}
	defer ch.Close()
	if err := deleteTopology(ch, names{prefix: cfg.Prefix, levels: cfg.Levels, fixed: cfg.fixedTTLs()}); err != nil {
		return fmt.Errorf("amqp timers: delete the topology of %s: %w", cfg.Prefix, err)
	}
	return nil
}

// deleteTopology deletes every exchange and queue of n, with the timers
// they hold: for tests and for retiring a prefix.
func deleteTopology(ch *amqp091.Channel, n names) error {
	var first error
	note := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	for k := range n.levels {
		_, err := ch.QueueDelete(n.level(k), false, false, false)
		note(err)
		note(ch.ExchangeDelete(n.level(k), false, false))
	}
	for _, t := range n.fixed {
		_, err := ch.QueueDelete(n.fixedQueue(t), false, false, false)
		note(err)
	}
	for _, q := range []string{n.ready(), n.marker(), n.lock(), n.owner(), n.ownerLock()} {
		_, err := ch.QueueDelete(q, false, false, false)
		note(err)
	}
	note(ch.ExchangeDelete(n.ready(), false, false))
	return first
}
