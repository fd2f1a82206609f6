package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/timer"
)

// The data-loss check (see "Durability and data loss" in the package doc).
//
// internal/rabbit's Conn offers publishing and consuming, not a channel of
// its own connection, and the check needs one: passive declarations, which
// the broker answers with a 404 that closes the channel, a purge, and an
// exclusive consumer held for the length of a seed. So the check keeps a
// small connection of its own, opened when first needed and again after it
// was lost.

// maxWindows bounds the windows the ledger keeps per level.
const maxWindows = 1 << 12

// ledger knows where the timers this instance published are at the
// earliest: a timer never leaves a queue before its TTL ran out (less a
// millisecond: RabbitMQ counts whole milliseconds), though it may leave
// later, when the broker is busy. So at any time a timer is in the level
// the ledger puts it in, or in a higher one: the queues of levels k and
// above hold at least as many timers as the ledger puts there, whatever
// the broker's delays, and fewer means timers were lost. Other instances'
// timers only add to the queues.
type ledger struct {
	base   time.Duration
	levels int
	// ttls are the queues' TTLs: the levels', then the fixed queues' (the
	// fixed queue i is the ledger's queue levels + i).
	ttls []time.Duration

	mu      sync.Mutex
	windows []map[int64]*window // per queue, by the start of the window in units of its width
}

// window is when n timers are certainly in a level's queue or above:
// from from, and before until.
type window struct {
	from, until time.Time
	n           int
}

func newLedger(base time.Duration, levels int, fixed []time.Duration) *ledger {
	l := &ledger{base: base, levels: levels}
	for k := range levels {
		l.ttls = append(l.ttls, ttl(base, k))
	}
	l.ttls = append(l.ttls, fixed...)
	l.reset()
	return l
}

// reset forgets every timer: after a loss, or a reconnection that may hide
// a broker restart (whose pause shifts every timer's journey).
func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = make([]map[int64]*window, len(l.ttls))
	for k := range l.windows {
		l.windows[k] = map[int64]*window{}
	}
}

// add records a timer that waits units × Base, published from sent and
// confirmed at confirmed. On its earliest course it enters its first queue
// (the highest set bit) at sent, and each queue after that as it leaves the
// one before; the ledger counts it in its first queue only from confirmed,
// when it is certainly there.
func (l *ledger) add(units uint64, sent, confirmed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	enter, from := sent, confirmed
	for k := l.levels - 1; k >= 0; k-- {
		if units>>uint(k)&1 == 0 {
			continue
		}
		t := ttl(l.base, k)
		until := enter.Add(t - time.Millisecond)
		if from.Before(until) {
			l.record(k, from, until)
		}
		enter = until
		from = until
	}
}

// addFixed records a timer published from sent to the queue of fixed
// delay i, confirmed at confirmed: it is there from confirmed until its TTL
// runs out.
func (l *ledger) addFixed(i int, sent, confirmed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.levels + i
	if until := sent.Add(l.ttls[k] - time.Millisecond); confirmed.Before(until) {
		l.record(k, confirmed, until)
	}
}

// record counts one timer in queue k (a level's, or levels + i: fixed
// queue i) from from until until. Windows that start within an eighth of
// the queue's TTL of each other share an entry, which holds them all: the
// latest start, the earliest end.
func (l *ledger) record(k int, from, until time.Time) {
	width := max(l.ttls[k]/8, time.Millisecond)
	slot := from.UnixNano() / int64(width)
	ws := l.windows[k]
	w, ok := ws[slot]
	switch {
	case ok:
		w.from, w.until, w.n = later(w.from, from), earlier(w.until, until), w.n+1
	case len(ws) < maxWindows:
		ws[slot] = &window{from: from, until: until, n: 1}
	}
}

// expected is how many of the recorded timers are in level k's queue for
// the whole of [from, until], and forgets those that have left it for good.
func (l *ledger) expected(k int, from, until time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for slot, w := range l.windows[k] {
		switch {
		case !w.until.After(from):
			delete(l.windows[k], slot)
		case !w.from.After(from) && w.until.After(until):
			n += w.n
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkConn is the data-loss check's connection.
type checkConn struct {
	url, shown string

	mu     sync.Mutex
	conn   *amqp091.Connection
	opened int // connections made
	closed bool
}

// get returns the open connection, connecting if there is none; reopened
// is set when it is not the first connection and not the one of the last
// call: it replaces one that was lost.
func (c *checkConn) get() (conn *amqp091.Connection, reopened bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, rabbit.ErrClosed
	}
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, false, nil
	}
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName("lapse timers (data-loss check)")
	conn, err = amqp091.DialConfig(c.url, amqp091.Config{Properties: props, Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, false, fmt.Errorf("connect to %s: %w", c.shown, err)
	}
	c.conn = conn
	c.opened++
	return conn, c.opened > 1, nil
}

func (c *checkConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn != nil {
		_ = c.conn.Close()
	}
}

// watch runs the data-loss check every LossCheck, and when woken (a timer
// returned unroutable), until ctx ends.
func (s *Scheduler) watch(ctx context.Context) {
	owed := false // a loss was seen and no seed has covered it yet
	timer.Watch(ctx, s.cfg.LossCheck, s.wake, func(ctx context.Context) error {
		var err error
		owed, err = s.check(ctx, owed)
		return err
	}, func(err error, failures int, next time.Duration) {
		if failures == 1 {
			s.log.Error("amqp timers: data-loss check failed; retrying", "in", next, "err", err)
		} else {
			s.log.Debug("amqp timers: data-loss check failed again", "in", next, "err", err)
		}
	})
}

// inspection is what a look at the topology found.
type inspection struct {
	missing []string // exchanges and queues that do not exist
	short   []string // levels holding fewer timers than the ledger knows
	markers int      // messages in the seed marker's queue
}

// check looks for lost timers and seeds when it finds a loss, or the seed
// marker missing. owed says a loss seen by an earlier check still needs a
// seed; check returns whether one still does.
func (s *Scheduler) check(ctx context.Context, owed bool) (bool, error) {
	conn, reopened, err := s.checks.get()
	if err != nil {
		return owed, err
	}
	if reopened {
		s.ledger.reset() // the broker may have restarted: the timings are off
	}
	found, err := s.inspect(conn)
	if err != nil {
		return owed, err
	}
	if len(found.missing) > 0 || len(found.short) > 0 {
		s.stats.losses.Add(1)
		s.ledger.reset()
		var what []string
		if len(found.missing) > 0 {
			what = append(what, "missing (deleted): "+strings.Join(found.missing, ", "))
		}
		if len(found.short) > 0 {
			what = append(what, "holding fewer timers than were published to them (purged): "+strings.Join(found.short, ", "))
		}
		s.log.Error("amqp timers: timers lost: " + strings.Join(what, "; ") + "; the topology was declared again and the timers are seeded from the store")
		owed = true
		// Without the marker, another instance seeds if this one dies
		// before it finished.
		if err := withChannel(conn, func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge(s.names.marker(), false)
			return err
		}); err != nil {
			return owed, fmt.Errorf("remove the seed marker: %w", err)
		}
		found.markers = 0
	}
	seed := s.seedFunc()
	if seed == nil || (!owed && found.markers > 0) {
		return owed, nil
	}
	seeded, err := s.seedLocked(ctx, conn, seed, owed)
	if seeded {
		owed = false
	}
	return owed, err
}

// inspect looks at every exchange and queue with passive declarations,
// declares the topology again if part of it is missing, and compares the
// waiting queues' lengths with the ledger.
func (s *Scheduler) inspect(conn *amqp091.Connection) (inspection, error) {
	var found inspection
	ch, err := conn.Channel()
	if err != nil {
		return found, fmt.Errorf("open a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	// look runs a passive declaration; a 404 (which closes the channel) is
	// noted as missing and a new channel opened.
	look := func(name string, declare func(*amqp091.Channel) error) error {
		err := declare(ch)
		if ae, ok := errors.AsType[*amqp091.Error](err); ok && ae.Code == amqp091.NotFound {
			found.missing = append(found.missing, name)
			if ch, err = conn.Channel(); err != nil {
				return fmt.Errorf("open a channel: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("look at %s: %w", name, err)
		}
		return nil
	}
	// depth is how many messages queue q holds (0 when it is missing).
	depth := func(q string) (int, error) {
		var messages int
		err := look("queue "+q, func(ch *amqp091.Channel) error {
			info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			messages = info.Messages
			return err
		})
		return messages, err
	}
	exchanges := []string{s.names.ready()}
	for k := range s.cfg.Levels {
		exchanges = append(exchanges, s.names.level(k))
	}
	for _, x := range exchanges {
		if err := look("exchange "+x, func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive(x, amqp091.ExchangeTopic, true, false, false, false, nil)
		}); err != nil {
			return found, err
		}
	}
	// The levels are looked at from the top down, over a span [from, now]:
	// a timer that moves down meanwhile may be counted twice, never missed.
	// Levels k and above must hold at least the timers the ledger puts in
	// them for the whole span; a shortfall of over 1% of that (a timer
	// between two queues at the moment it is counted is in neither) is a
	// loss.
	from := time.Now()
	held, want := 0, 0
	for k := s.cfg.Levels - 1; k >= 0; k-- {
		messages, err := depth(s.names.level(k))
		if err != nil {
			return found, err
		}
		held += messages
		want += s.ledger.expected(k, from, time.Now())
		if held < want-want/100 && len(found.short) == 0 {
			found.short = append(found.short, fmt.Sprintf("levels %d and above (%d timers, at least %d expected)", k, held, want))
		}
	}
	// A fixed queue's timers only leave it for the ready queue: each must
	// hold what the ledger puts in it, less 1%.
	for i, t := range s.names.fixed {
		q := s.names.fixedQueue(t)
		messages, err := depth(q)
		if err != nil {
			return found, err
		}
		if want := s.ledger.expected(s.cfg.Levels+i, from, time.Now()); messages < want-want/100 {
			found.short = append(found.short, fmt.Sprintf("%s (%d timers, at least %d expected)", q, messages, want))
		}
	}
	for _, q := range []string{s.names.ready(), s.names.lock(), s.names.marker()} {
		if err := look("queue "+q, func(ch *amqp091.Channel) error {
			info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if q == s.names.marker() {
				found.markers = info.Messages
			}
			return err
		}); err != nil {
			return found, err
		}
	}
	if len(found.missing) > 0 {
		if err := declareTopology(ch, s.names, s.cfg.Base, s.cfg.QueueType); err != nil {
			return found, fmt.Errorf("declare the topology again: %w", err)
		}
	}
	return found, nil
}

// seedLocked runs seed under the seed lock and then writes the seed marker.
// When another instance holds the lock it leaves the seed to it (seeded
// false). Unless owed (this instance saw a loss), it looks at the marker
// again once it holds the lock: another instance may have finished a seed
// meanwhile.
func (s *Scheduler) seedLocked(ctx context.Context, conn *amqp091.Connection, seed func(context.Context) error, owed bool) (seeded bool, _ error) {
	lock, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open a channel for the seed lock: %w", err)
	}
	defer func() { _ = lock.Close() }()
	if _, err := lock.Consume(s.names.lock(), "", false, true, false, false, nil); err != nil {
		if ae, ok := errors.AsType[*amqp091.Error](err); ok && ae.Code == amqp091.AccessRefused {
			s.log.Info("amqp timers: seed needed; another instance holds the seed lock and seeds")
			return false, nil
		}
		return false, fmt.Errorf("take the seed lock: %w", err)
	}
	if !owed {
		var markers int
		err := withChannel(conn, func(ch *amqp091.Channel) error {
			info, err := ch.QueueDeclarePassive(s.names.marker(), true, false, false, false, nil)
			markers = info.Messages
			return err
		})
		if err != nil {
			return false, fmt.Errorf("look at the seed marker: %w", err)
		}
		if markers > 0 {
			return true, nil
		}
	}
	s.log.Warn("amqp timers: seeding the timers from the store (a new topology, or one that lost timers)")
	start := time.Now()
	if err := seed(ctx); err != nil {
		return false, fmt.Errorf("seed from the store: %w", err)
	}
	marker := rabbit.Message{RoutingKey: s.names.marker(), Publishing: amqp091.Publishing{
		MessageId: randomID(), Type: markerType, Timestamp: time.Now(), DeliveryMode: amqp091.Persistent,
		ContentType: "text/plain", Body: []byte("seeded " + time.Now().UTC().Format(time.RFC3339)),
	}}
	if err := s.conn.Publish(ctx, []rabbit.Message{marker})[0]; err != nil {
		return false, fmt.Errorf("write the seed marker: %w", err)
	}
	s.stats.seeds.Add(1)
	s.log.Info("amqp timers: seeded from the store", "took", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// withChannel runs f on a channel of its own, closed afterwards.
func withChannel(conn *amqp091.Connection, f func(*amqp091.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	return f(ch)
}
