// Package amqp is the RabbitMQ timer backend: each timer is a persistent
// message that waits in a ladder of delay queues with fixed TTLs and is
// dead-lettered, level by level, into a ready queue that any number of lapse
// instances consume (docs/architecture.md §1). It needs core RabbitMQ only
// — not the delayed-message plugin, which is archived — and follows the
// delay infrastructure of NServiceBus's and kombu's RabbitMQ transports.
//
// # The ladder
//
// A delay is counted in units of Config.Base (100 ms by default), rounded up
// so that a timer never fires early, and written in binary with
// Config.Levels bits (23 by default). Level k is a topic exchange and a
// durable queue, both named <prefix>.delay.<k> (two digits); the queue has
// an x-message-ttl of 2^k × Base and dead-letters into level k-1's exchange
// (level 0's into <prefix>.ready). The routing key carries the bits, most
// significant first, then the timer's key:
//
//	1.3 s = 13 units = 1101 in binary; 23 levels; order o-42:
//	0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.1.0.1.o-42
//
// Level k's exchange sends a timer to the queue of its highest set bit at or
// below k, or to the ready queue when bits k to 0 are all 0: its bindings
// are "*.….*.1.#" to its own queue (one "*." per higher level),
// "*.….*.0.1.#" to level k-1's queue, and so on down to "*.….*.0.….0.#" to
// the ready queue. A timer is thus routed once per wait, straight to the
// queue it waits in next, and never passes through the exchanges of the
// levels it skips:
//
//	⟨x⟩ exchange   [x] queue   ─► routed   ⇢ dead-lettered after the TTL
//
//	1.3 s = 1101:  Schedule ─► ⟨delay.03⟩ ─► [delay.03] ⇢ ⟨delay.02⟩ ─► [delay.02] ⇢ ⟨delay.01⟩ ─► [delay.00]
//	               ⇢ ⟨ready⟩ ─► [ready] ─► Run (any instance)
//
//	level k: [delay.k], TTL 2^k × Base, dead-letters into ⟨delay.k-1⟩ (level 0 into ⟨ready⟩)
//
// (Before lapse routed this way, each exchange passed a timer whose bit was
// 0 on to the next exchange, an exchange-to-exchange binding: at 1,000
// timers a second of 2 s each, RabbitMQ spent a fifth more CPU on matching
// the same timers at every level, and fell behind on a 2-core machine.
// declareTopology removes those bindings from a prefix an earlier version
// declared.)
//
// A timer thus waits in each queue whose bit is set, for exactly that
// queue's TTL. All the messages of one queue have the same TTL, so they
// leave it in the order they came in: a short timer never waits behind a
// long one, and RabbitMQ expires each at its time (classic and quorum queues
// dead-letter an expired message at the head of the queue, which is always
// the oldest). Because dead-lettering keeps the routing key, no state
// travels outside the message.
//
// The longest delay is (2^Levels - 1) × Base, MaxDelay: about 9 days 17
// hours with the defaults. A longer one is sent for MaxDelay; when it arrives
// in the ready queue more than Lead + Base before its due time, Run sends it
// again for the remainder (counted in Stats.Republished), so it is never
// delivered early.
//
// # Fixed delays: the fast path
//
// Most timers of a shop have one delay: its payment window (the default
// timeout + grace), counted from when the order was written. For those the
// ladder's hops are wasted work — the field's RabbitMQ design is one wait
// queue per delay — so each delay of Config.Fixed (lapse serve adds its
// default payment window, Config.PaymentWindow; a URL adds more with
// fixed=15m,30m) has a queue of its own, <prefix>.fixed.<TTL in ms>, whose
// x-message-ttl is the delay less Lead and Base and which dead-letters
// straight into the ready exchange: one routing, one hop. A timer takes it
// when its due time is that delay from now, give or take: from TTL to
// TTL + Lead + Base ahead, so that it leaves the queue no later than its
// due time and no earlier than Run holds a timer for (it is then held, and
// handed over at its due time, as a timer from the ladder is). Every other
// timer — another delay, a deadline moved, a reminder, a retry's backoff,
// a timer scheduled late — rides the ladder. The queue is named by its TTL,
// which is baked into it, so instances with other leads or bases keep
// queues of their own; it is declared with the ladder (again after a
// reconnection), and the data-loss check covers it: missing, it is declared
// again; holding fewer timers than this instance published to it, it was
// purged. Stats.Fixed counts the timers that took it
// (lapse_amqp_timers_fixed_total).
//
// # Scheduling
//
// Schedule publishes one message to the exchange of the first level the
// timer waits in: its highest set bit (the levels above would only pass it
// on), or the ready exchange when it is due already. The message is
// persistent, published with confirms and the mandatory flag
// (internal/rabbit), and Schedule returns once the broker confirmed it: the
// timer is then on disk in its first queue. The message carries the key as
// its body and the due time in the lapse-due header (RFC 3339, nanoseconds),
// which is what Timer.Due is. Concurrent calls share their round trips: the
// calls that arrive while a batch is being confirmed go out together as the
// next batch (internal/group), up to four batches at once, so a busy
// instance does not wait for a confirm per order. A publish that was not
// confirmed is tried again, up to three times with backoff (100 ms, 200 ms),
// then returned as an error; an unroutable one (basic.return: part of the
// topology was deleted) wakes the data-loss check (while Run runs), which
// declares the topology again, before the retry.
//
// lapse calls Schedule after the order has committed. An instance that
// crashes between that commit and the broker's confirm leaves an order
// without a timer (or with one the broker took but never confirmed, which
// fires as usual). The service's fallback sweep cancels such an order: it
// claims orders overdue by SweepLag every SweepInterval, so the order is
// cancelled up to SweepInterval + SweepLag after its deadline (40 s with
// lapse serve's defaults, 30 s and 10 s), never early and never twice. A
// failed Schedule is logged and counted (lapse_timer_schedule_errors_total)
// and costs the same.
//
// # Precision
//
// A timer is sent to leave the ladder Config.Lead (400 ms) before its due
// time, the delay rounded up to Base, so it reaches the ready queue 0 to
// Base after due − Lead, plus about a millisecond per level it waits in (the
// broker's expiry and dead-lettering) and the delivery to a consumer. Run
// holds a timer that arrives before its due time by up to Lead + Base,
// unacknowledged, and hands it over at its due time by this process's
// clock (counted in Stats.Held); none is ever delivered before its Due.
// A timer held when its channel is lost is dropped from the process: the
// broker delivers it again on the new channel, and that copy is the one
// handed over.
//
// The lead is there because the broker is late under load. At 1,000 timers
// a second with lapse and PostgreSQL on the same 2 cores, dead-lettering
// fell behind by hundreds of milliseconds: `lapse bench --store postgres://…
// --timers amqp://… --rate 1000 --duration 10s --timeout 2s` gave lateness
// p50 79 ms, p99 315 ms with no lead and p50 2 ms, p99 17 ms with a 300 ms
// lead, back to back on a quiet machine; with other builds running (load
// 4–6), p99 991 ms without a lead and 26–41 ms with the default 400 ms: the
// broker's lag is hidden inside the lead. Without a lead (Config.Lead negative) the lateness is the
// rounding up to Base plus the broker's lag. TestLateness measures the
// lateness, from the due time to the handler's call, of 300 timers due over
// 3 s on a 2-core machine under the race detector: p50 0.3 ms, p99 2.7 ms
// with the default lead (p99 108 ms with Base 100 ms and no lead).
//
// A timer the broker delivers later than its lead is handed over at once,
// as late as the broker made it. One that arrives more than Lead + Base
// early (a delay beyond the ladder's reach, a clock ahead of this one) is
// sent again for the remainder.
//
// # Delivery
//
// Run consumes the ready queue with manual acknowledgements and a prefetch
// of Config.Prefetch (2,000: the timers held for their due time count
// against it), gathers what arrives within 2 ms of a first timer (up to
// BatchSize) into a batch, and hands the due ones, earliest first, to the
// handler. A batch the handler accepts (nil) is acknowledged. A batch
// it refuses is handed back to the broker: each timer is published again
// with its own Due, Attempt + 1 in the lapse-attempt header, and a delay of
// Config.Backoff(attempt), and the delivery is acknowledged once the broker
// confirmed its copy — so the backoff is served by the ladder, the instance
// holds nothing meanwhile, and the attempt count is exact whichever instance
// gets the timer next. Only when that publish fails too is the delivery
// negatively acknowledged with requeue, after the backoff. (Requeueing every
// failure instead would spend the delivery limit that RabbitMQ 4 sets on
// quorum queues by default, 20, after which the broker drops the message;
// and x-delivery-limit -1, which lifts it on RabbitMQ 4, drops a message at
// its first requeue on 3.10.) Timer.Attempt is the lapse-attempt header
// (1 when absent) plus the deliveries the broker made without a settlement
// (x-delivery-count on a quorum queue; 1 for a classic queue's Redelivered
// flag). Any number of instances consume the ready queue; RabbitMQ gives each
// message to one of them, and a consumer that dies has its unacknowledged
// messages delivered to another.
//
// # Unschedule
//
// A message cannot be taken out of the middle of a queue, so Unschedule
// removes nothing: it only counts the call (Stats.Unscheduled). A Schedule
// that replaces a due time likewise leaves the old timer in the ladder. Both
// are harmless, because a timer only triggers the store's guarded cancel: an
// order paid meanwhile is skipped, and one whose timer comes early (its
// deadline was moved) is scheduled again by the service. The scheduler
// declares this in timertest.Features (CanUnschedule false).
//
// # Durability and data loss
//
// Every queue is durable and every message persistent, so the timers outlive
// lapse's processes and a broker restart: the scheduler is timer.Durable.
// Config.QueueType "quorum" makes the queues replicated quorum queues
// (RabbitMQ 3.10 or later), which dead-letter at least once
// (x-dead-letter-strategy at-least-once, with x-overflow reject-publish, which
// that strategy requires).
//
// The queues can still lose their timers — deleted, purged, a node's data
// lost — so the scheduler is also a timer.Seeder. While Run runs, a check
// every Config.LossCheck, on a connection of its own, looks at the topology
// with passive declarations:
//
//   - a missing exchange or queue (deleted) is a loss: the topology is
//     declared again, bindings included;
//   - levels holding fewer timers than this instance knows must be in them
//     is a loss (purged). The scheduler remembers where each timer it
//     published is on its earliest course: RabbitMQ never expires a message before its TTL
//     (to the millisecond), though it may later, so a timer is in that level
//     or a higher one. The levels are counted from the top down, so that a
//     timer moving down meanwhile is counted twice rather than missed, and
//     the queues of levels k and above must together hold at least the
//     timers remembered there, less 1% (a timer between two queues at the
//     moment is in neither);
//   - a missing seed marker is a loss too: the queue <prefix>.seeded holds one
//     message, written after a complete seed. It is missing on a new broker,
//     or after the whole topology was deleted, or while a seed is unfinished.
//
// On a loss the instance removes the marker (so that the seed is redone
// elsewhere if this instance dies), takes the seed lock — an exclusive
// consumer on <prefix>.seed-lock, released by the broker if the instance
// dies — runs the seed function (which schedules every pending order again
// from the store), writes the marker and releases the lock. An instance that
// finds the lock taken leaves the seed to its holder. Timers that were not
// lost are then in the ladder twice: they are delivered twice, which the
// store's guard makes harmless. Timers due before the seed put them back are
// cancelled by the seed itself (their due time has passed) or by the fallback
// sweep.
//
// A purge is detected only in a queue holding timers that this instance
// published since it started (or since its last reconnection to the broker,
// after which it forgets what it knew); timers of an earlier process lost in
// a purge are left to the fallback sweep.
//
// # Deployments
//
// Two deployments (two stores) whose instances share a Prefix take each
// other's timers: each instance skips the orders its store does not know,
// and their deployment cancels them late, through its sweep. Claim fences a
// prefix: the first deployment to claim it is recorded in
// <prefix>.deployment, and a claim by another is refused (lapse serve claims
// with its store's identity, and so refuses to start on a prefix another
// deployment uses).
//
// # Operations
//
// Base, Levels and QueueType are baked into the queues' arguments: an
// instance started with other values is refused by the broker (406
// PRECONDITION_FAILED) and must use another Prefix. With millions of pending
// timers on RabbitMQ before 3.12, apply a policy with queue-mode lazy to
// ^<prefix>\.delay\. (classic queues keep their messages on disk from 3.12
// on). Do not give the queues a delivery limit or a max length: a timer that
// the broker drops is cancelled late, by the fallback sweep. RabbitMQ 4 gives
// quorum queues a delivery limit of 20 unless told otherwise
// (rabbitmq-server#11937); Run settles every delivery itself, so only a
// timer whose consumers die holding it 20 times over reaches it. A policy
// with delivery-limit -1 on ^<prefix>\.ready$ lifts it there (on RabbitMQ 4
// only: 3.10 takes -1 as "no redelivery at all").
package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/group"
	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/timer"
)

// Config configures a Scheduler. Zero fields take the defaults named below.
// Every instance sharing a Prefix must use the same Base, Levels and
// QueueType (the broker refuses others).
type Config struct {
	// Prefix starts the name of every exchange and queue of the scheduler,
	// so that several lapse deployments (or tests) can share a vhost: 1 to
	// 200 characters of A-Z a-z 0-9 . _ -, not starting with "amq.".
	// Defaults to DefaultPrefix.
	Prefix string
	// Base is the ladder's unit, the TTL of level 0: delays are rounded up
	// to it, so it bounds how late a timer fires. A whole number of
	// milliseconds. Defaults to 100 ms.
	Base time.Duration
	// Levels is the number of delay levels; the longest delay is
	// (2^Levels - 1) × Base, and the top level's TTL, 2^(Levels-1) × Base,
	// may be at most 2^32 - 1 ms. Defaults to 23 (9 days 17 hours with a
	// Base of 100 ms).
	Levels int
	// QueueType is QueueClassic (the default) or QueueQuorum.
	QueueType string
	// BatchSize is the most timers handed to the handler at once. Defaults
	// to 200; at most 10,000.
	BatchSize int
	// Lead is how long before its due time a timer leaves the ladder: Run
	// then holds it, unacknowledged, and hands it over at its due time. Under
	// load the broker expires and dead-letters timers late — at 1,000 timers
	// a second on a 2-core machine the whole service's p99 was 315 ms with no
	// lead, 17 ms with 300 ms (see "Precision") — so a lead above the
	// broker's lag makes this process's clock, not the broker's, set the
	// lateness. Defaults to 400 ms; negative means none (leave at the due
	// time). At most 1 minute.
	Lead time.Duration
	// Prefetch is the most timers an instance holds unacknowledged: the
	// batch in hand and the timers held for their due time (about the
	// rate × Lead). Defaults to 2,000; at least BatchSize, at most 65,535.
	Prefetch int
	// LossCheck is how often Run looks for lost timers (see "Durability and
	// data loss"). Defaults to 5 s; at least 10 ms.
	LossCheck time.Duration
	// Fixed are the delays of the fast path (see "Fixed delays"): a timer
	// scheduled to be due one of them from now (the shop's payment window:
	// lapse serve adds its default timeout + grace) waits in one queue of
	// its own, one dead-letter hop from the ready queue, instead of riding
	// the ladder. At most 16, each longer than Lead + Base + 1 ms and at most
	// RabbitMQ's 2^32-1 ms; a URL's fixed= delays are added to these.
	Fixed []time.Duration
	// PaymentWindow is the delay of most timers, the service's default
	// payment window (its default timeout + grace; lapse serve sets it): a
	// fixed delay like those of Fixed when it is longer than Lead + Base,
	// else nothing (a window that short rides the ladder).
	PaymentWindow time.Duration
	// FixedSpan is how late a timer of a fixed delay may be set and still
	// take the fast path: each fixed delay has a comb of queues, Lead + Base
	// apart in TTL, covering timers due from the delay less FixedSpan to
	// the delay from now (a burst of orders whose timers the broker
	// confirmed late, a seed). Defaults to 10 s (21 queues per delay with
	// the default lead and base, at most 41); negative: one queue.
	FixedSpan time.Duration
	// Backoff is the delay before a refused batch is delivered again.
	// Defaults to timer.Backoff.
	Backoff func(attempt int) time.Duration
	// Logger receives the scheduler's logs: data losses, seeds, broker
	// errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults and limits of Config.
const (
	DefaultPrefix    = "lapse.timers"
	DefaultBase      = 100 * time.Millisecond
	DefaultLevels    = 23
	DefaultBatchSize = 200
	DefaultLead      = 400 * time.Millisecond
	DefaultPrefetch  = 2000
	maxLead          = time.Minute
	maxPrefetch      = 65535
	DefaultLossCheck = 5 * time.Second
	DefaultFixedSpan = 10 * time.Second

	maxBatchSize = 10_000
	maxPrefixLen = 200
	// maxTTL is the largest x-message-ttl this package declares.
	maxTTL = (1<<32 - 1) * time.Millisecond
	// MaxKeyLen bounds a timer key (the message body).
	MaxKeyLen = 1024
)

// Queue types of Config.QueueType.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Base == 0 {
		c.Base = DefaultBase
	}
	if c.Levels == 0 {
		c.Levels = DefaultLevels
	}
	if c.QueueType == "" {
		c.QueueType = QueueClassic
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Lead == 0 {
		c.Lead = DefaultLead
	}
	if c.Prefetch == 0 {
		c.Prefetch = max(DefaultPrefetch, c.BatchSize)
	}
	if c.LossCheck == 0 {
		c.LossCheck = DefaultLossCheck
	}
	if c.Backoff == nil {
		c.Backoff = timer.Backoff
	}
	if c.FixedSpan == 0 {
		c.FixedSpan = DefaultFixedSpan
	}
	if w := c.PaymentWindow; w > 0 && fixedTTL(w, c.Lead, c.Base) >= time.Millisecond && fixedTTL(w, c.Lead, c.Base) <= maxTTL &&
		!slices.Contains(c.Fixed, w) && len(c.Fixed) < maxFixed {
		c.Fixed = append(slices.Clone(c.Fixed), w)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if msg := validPrefix(c.Prefix); msg != "" {
		return fmt.Errorf("amqp timers: Config.Prefix %q: %s", c.Prefix, msg)
	}
	if c.Base < time.Millisecond || c.Base%time.Millisecond != 0 {
		return fmt.Errorf("amqp timers: Config.Base %v: want a whole number of milliseconds, at least 1ms (RabbitMQ's TTLs are milliseconds)", c.Base)
	}
	if c.Levels < 1 || c.Levels > 32 {
		return fmt.Errorf("amqp timers: Config.Levels %d: want 1 to 32", c.Levels)
	}
	if top := maxTTL >> uint(c.Levels-1); c.Base > top {
		return fmt.Errorf("amqp timers: Config.Base %v with %d levels: the top level's TTL, 2^%d × Base, would exceed RabbitMQ's 2^32-1 ms (want Base at most %v)",
			c.Base, c.Levels, c.Levels-1, top.Truncate(time.Millisecond))
	}
	if c.QueueType != QueueClassic && c.QueueType != QueueQuorum {
		return fmt.Errorf("amqp timers: Config.QueueType %q: want %s or %s", c.QueueType, QueueClassic, QueueQuorum)
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatchSize {
		return fmt.Errorf("amqp timers: Config.BatchSize %d: want 1 to %d", c.BatchSize, maxBatchSize)
	}
	if c.Lead > maxLead {
		return fmt.Errorf("amqp timers: Config.Lead %v: at most %v", c.Lead, maxLead)
	}
	if c.Prefetch < c.BatchSize || c.Prefetch > maxPrefetch {
		return fmt.Errorf("amqp timers: Config.Prefetch %d: want BatchSize (%d) to %d", c.Prefetch, c.BatchSize, maxPrefetch)
	}
	if c.LossCheck < 10*time.Millisecond {
		return fmt.Errorf("amqp timers: Config.LossCheck %v: want at least 10ms", c.LossCheck)
	}
	if len(c.Fixed) > maxFixed {
		return fmt.Errorf("amqp timers: Config.Fixed: %d delays, at most %d", len(c.Fixed), maxFixed)
	}
	for _, f := range c.Fixed {
		if ttl := fixedTTL(f, c.Lead, c.Base); ttl < time.Millisecond || ttl > maxTTL {
			return fmt.Errorf("amqp timers: Config.Fixed delay %v: want more than lead + base (%v) and at most %v",
				f, max(c.Lead, 0)+c.Base, maxTTL+max(c.Lead, 0)+c.Base)
		}
	}
	return nil
}

// maxFixed bounds Config.Fixed: each delay is a queue the loss check looks at.
const maxFixed = 16

// fixedTTL is the x-message-ttl of the queue of fixed delay f: a timer
// leaves it lead + base before its due time at the latest, so that it
// reaches the ready queue within Run's hold, never after its due time.
func fixedTTL(f, lead, base time.Duration) time.Duration {
	return (f - max(lead, 0) - base).Truncate(time.Millisecond)
}

// maxComb bounds the queues of one fixed delay (see Config.FixedSpan).
const maxComb = 41

// fixedTTLs are the distinct TTLs of the queues of c's fixed delays,
// shortest first: for each delay, its comb — the TTL that takes a timer set
// on time, then one a step (Lead + Base) shorter for each step of
// FixedSpan, while the TTL is at least a millisecond.
func (c *Config) fixedTTLs() []time.Duration {
	step := max(c.Lead, 0) + c.Base
	var ttls []time.Duration
	for _, f := range c.Fixed {
		top := fixedTTL(f, c.Lead, c.Base)
		for j := 0; j < maxComb && time.Duration(j)*step <= max(c.FixedSpan, 0); j++ {
			if t := top - time.Duration(j)*step; t >= time.Millisecond {
				ttls = append(ttls, t)
			}
		}
	}
	slices.Sort(ttls)
	return slices.Compact(ttls)
}

// validPrefix returns why p cannot start the scheduler's names, or "".
func validPrefix(p string) string {
	switch {
	case p == "" || len(p) > maxPrefixLen:
		return fmt.Sprintf("want 1 to %d characters", maxPrefixLen)
	case strings.HasPrefix(p, "amq."):
		return `names starting with "amq." are reserved by RabbitMQ`
	}
	for _, c := range p {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return "want characters of A-Z a-z 0-9 . _ -"
		}
	}
	return ""
}

// Headers of a timer message.
const (
	hdrDue     = "lapse-due"     // the due time, RFC 3339 with nanoseconds, UTC
	hdrAttempt = "lapse-attempt" // the attempt it is delivered as, when above 1
	// hdrDeliveryCount is a quorum queue's count of earlier deliveries.
	hdrDeliveryCount = "x-delivery-count"
	msgType          = "lapse.timer"
	markerType       = "lapse.seed-marker"
)

// Scheduler is the RabbitMQ timer.Scheduler. It is safe for concurrent use;
// one Run at a time per Scheduler, any number of Schedulers (in any number
// of processes) on one Prefix.
type Scheduler struct {
	conn     *rabbit.Conn
	checks   *checkConn // the data-loss check's own connection
	cfg      Config
	names    names
	maxUnits uint64 // MaxDelay in units of Base
	log      *slog.Logger

	seedMu sync.Mutex
	seed   func(ctx context.Context) error

	ledger *ledger       // what this instance's timers must be in the queues
	wake   chan struct{} // asks the data-loss check to run now

	// lanes take Schedule calls; each publishes the calls that arrived
	// while its previous batch was being confirmed as its next batch.
	lanes    []*group.Queue[*scheduleCall]
	nextLane atomic.Uint64

	stats struct {
		scheduled, fixed, unscheduled, clamped, republished, retried, held, losses, seeds atomic.Uint64
	}

	run sync.Mutex // one Run at a time
}

var (
	_ timer.Scheduler      = (*Scheduler)(nil)
	_ timer.Durable        = (*Scheduler)(nil)
	_ timer.Seeder         = (*Scheduler)(nil)
	_ timer.BatchScheduler = (*Scheduler)(nil)
	_ timer.Counted        = (*Scheduler)(nil)
)

// Open connects to the broker a --timers URL names (see ParseURL), declares
// the scheduler's topology and returns the scheduler. The URL's parameters,
// when given, replace cfg's fields. Open keeps trying to connect, with
// backoff, until ctx ends; it gives up at once on wrong credentials, an
// unknown vhost or a topology the broker refuses (another Base, Levels or
// QueueType on the same Prefix). Once open, the scheduler reconnects by
// itself; Close closes it. Errors never show the URL's password.
func Open(ctx context.Context, rawURL string, cfg Config) (*Scheduler, error) {
	broker, fromURL, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg = fromURL.over(cfg)
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := names{prefix: cfg.Prefix, levels: cfg.Levels, fixed: cfg.fixedTTLs()}
	conn, err := rabbit.Dial(ctx, broker, rabbit.Config{
		Topology:       func(ch *amqp091.Channel) error { return declareTopology(ch, n, cfg.Base, cfg.QueueType) },
		ConnectionName: "lapse timers",
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("amqp timers: %w", err)
	}
	s := &Scheduler{
		conn:     conn,
		checks:   &checkConn{url: broker, shown: redact.URL(broker)},
		cfg:      cfg,
		names:    n,
		maxUnits: 1<<uint(cfg.Levels) - 1,
		log:      cfg.Logger.With("timers", "amqp", "prefix", cfg.Prefix),
		ledger:   newLedger(cfg.Base, cfg.Levels, n.fixed),
		wake:     make(chan struct{}, 1),
	}
	for range lanes {
		s.lanes = append(s.lanes, group.New(publishChunk, s.publishGroup))
	}
	return s, nil
}

// Close closes the scheduler's connections. Run returns (rabbit.ErrClosed)
// if it is still running.
func (s *Scheduler) Close() error {
	s.checks.close()
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("amqp timers: %w", err)
	}
	return nil
}

// Ping returns nil while the scheduler is connected to the broker, and why
// not otherwise: a readiness check. While it fails, timers can be neither
// set nor delivered.
func (s *Scheduler) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("amqp timers: %w", err)
	}
	return nil
}

// Durable reports true: the timers are persistent messages in durable
// queues, not in the process. Queues that lose them are detected and
// reseeded (see SetSeed).
func (s *Scheduler) Durable() bool { return true }

// SetSeed implements timer.Seeder: seed schedules every pending order again
// from the store. Run calls it, in the background, when it finds timers lost
// or the seed marker missing (see the package doc). Without a seed function
// a loss is logged and the topology repaired, but nothing is put back.
func (s *Scheduler) SetSeed(seed func(ctx context.Context) error) {
	s.seedMu.Lock()
	s.seed = seed
	s.seedMu.Unlock()
}

func (s *Scheduler) seedFunc() func(ctx context.Context) error {
	s.seedMu.Lock()
	defer s.seedMu.Unlock()
	return s.seed
}

// MaxDelay is the longest delay the ladder holds, (2^Levels - 1) × Base.
// A timer due later is sent for MaxDelay and again for the remainder when
// it arrives.
func (s *Scheduler) MaxDelay() time.Duration { return time.Duration(s.maxUnits) * s.cfg.Base }

// Stats are the scheduler's counters since Open.
type Stats struct {
	// Scheduled counts the timers the broker confirmed (Schedule,
	// ScheduleMany, and the copies Run sends; see Republished and Retried).
	Scheduled uint64
	// Fixed counts the confirmed timers that took the fast path: a queue
	// of one of Config.Fixed's delays.
	Fixed uint64
	// Unscheduled counts Unschedule calls, none of which removed anything.
	Unscheduled uint64
	// Clamped counts timers due beyond MaxDelay, sent for MaxDelay.
	Clamped uint64
	// Republished counts timers that reached the ready queue more than
	// Lead + Base before their due time (clamped ones, or a clock ahead of this
	// instance's) and were sent again for the remainder.
	Republished uint64
	// Retried counts timers of refused batches sent again with a backoff.
	Retried uint64
	// Held counts timers that reached the ready queue before their due time
	// (by up to Lead + Base) and were held until it.
	Held uint64
	// Losses counts the data losses Run detected; Seeds the seeds it ran
	// to completion.
	Losses, Seeds uint64
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	return Stats{
		Scheduled:   s.stats.scheduled.Load(),
		Fixed:       s.stats.fixed.Load(),
		Unscheduled: s.stats.unscheduled.Load(),
		Clamped:     s.stats.clamped.Load(),
		Republished: s.stats.republished.Load(),
		Retried:     s.stats.retried.Load(),
		Held:        s.stats.held.Load(),
		Losses:      s.stats.losses.Load(),
		Seeds:       s.stats.seeds.Load(),
	}
}

// Counters implements timer.Counted: Stats as the Prometheus counters
// lapse exports (lapse_amqp_timers_…_total).
func (s *Scheduler) Counters() []timer.Counter {
	st := s.Stats()
	return []timer.Counter{
		{Name: "lapse_amqp_timers_scheduled_total", Help: "Timer messages the broker confirmed (schedules, and the copies sent again).", Value: st.Scheduled},
		{Name: "lapse_amqp_timers_fixed_total", Help: "Timer messages the broker confirmed in the queue of a fixed delay (the fast path: one hop, not the ladder).", Value: st.Fixed},
		{Name: "lapse_amqp_timers_unscheduled_total", Help: "Unschedule calls; RabbitMQ cannot take a message out of a queue, so each timer still arrives and the store's guard skips it.", Value: st.Unscheduled},
		{Name: "lapse_amqp_timers_clamped_total", Help: "Timers due beyond the ladder's longest delay, sent for that delay and again for the rest.", Value: st.Clamped},
		{Name: "lapse_amqp_timers_republished_total", Help: "Timers that reached the ready queue more than a base before their due time and were sent again for the remainder.", Value: st.Republished},
		{Name: "lapse_amqp_timers_retried_total", Help: "Timers of batches the handler refused, sent again with a backoff.", Value: st.Retried},
		{Name: "lapse_amqp_timers_held_total", Help: "Timers that left the ladder before their due time (its lead) and were held by the process until it.", Value: st.Held},
		{Name: "lapse_amqp_timer_losses_total", Help: "Data losses detected: queues or exchanges deleted, queues purged, the seed marker missing.", Value: st.Losses},
		{Name: "lapse_amqp_timer_seeds_total", Help: "Seeds from the store run to completion after a data loss.", Value: st.Seeds},
	}
}

// Schedule implements timer.Scheduler: one persistent message, confirmed by
// the broker, that arrives in the ready queue at due rounded up to Base. It
// does not replace an earlier schedule of key (see "Unschedule").
// Concurrent calls share their publishes (see "Scheduling").
func (s *Scheduler) Schedule(ctx context.Context, key string, due time.Time) error {
	if err := validKey(key); err != nil {
		return err
	}
	c := &scheduleCall{ctx: ctx, t: timer.Timer{Key: key, Due: due, Attempt: 1}, done: make(chan error, 1)}
	s.lanes[s.nextLane.Add(1)%uint64(len(s.lanes))].Add(c)
	var err error
	select {
	case err = <-c.done:
	case <-ctx.Done():
		// The publish may still go through: the timer then fires, which
		// is harmless.
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("amqp timers: schedule timer %s: %w", key, err)
	}
	return nil
}

// scheduleCall is a Schedule waiting for the publish of its group.
type scheduleCall struct {
	ctx  context.Context
	t    timer.Timer
	done chan error // buffered: the group never waits for its caller
}

// lanes is how many groups of Schedule calls are published at once, one
// per publishing channel of internal/rabbit's pool.
const lanes = rabbit.DefaultPublishChannels

// publishGroup publishes the timers of the Schedule calls of one group in
// one batch and answers each call. The batch runs on the values of one of
// its callers' contexts, not on their cancellation (a caller that gives up
// must not fail the others), for at most group.Timeout.
func (s *Scheduler) publishGroup(calls []*scheduleCall) {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.done <- err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := group.Context(live[0].ctx)
	defer cancel()
	ts := make([]timer.Timer, len(live))
	for i, c := range live {
		ts[i] = c.t
	}
	for i, err := range s.publish(ctx, ts, nil) {
		live[i].done <- err
	}
}

// ScheduleMany implements timer.BatchScheduler: Schedule for many timers, a
// thousand messages per round of confirms, for seeding. Each timer's Key
// and Due are used (Attempt is ignored). A bad key is an error and schedules
// nothing; a broker error may leave some timers scheduled.
func (s *Scheduler) ScheduleMany(ctx context.Context, timers []timer.Timer) error {
	ts := make([]timer.Timer, len(timers))
	for i, t := range timers {
		if err := validKey(t.Key); err != nil {
			return err
		}
		ts[i] = timer.Timer{Key: t.Key, Due: t.Due, Attempt: 1}
	}
	for start := 0; start < len(ts); start += publishChunk {
		if err := s.send(ctx, ts[start:min(start+publishChunk, len(ts))], nil); err != nil {
			return fmt.Errorf("amqp timers: schedule %d timers: %w", len(ts), err)
		}
	}
	return nil
}

// Unschedule implements timer.Scheduler: it removes nothing, since a message
// cannot be taken out of a queue; it counts the call (Stats.Unscheduled).
// The timer is delivered at its time, and the store's guard skips the order
// (see "Unschedule" in the package doc).
func (s *Scheduler) Unschedule(_ context.Context, key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	s.stats.unscheduled.Add(1)
	return nil
}

func validKey(key string) error {
	if key == "" {
		return errors.New("amqp timers: empty timer key")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("amqp timers: timer key of %d bytes: at most %d", len(key), MaxKeyLen)
	}
	return nil
}

const (
	// publishChunk is the most messages of one Publish call.
	publishChunk = 1000
	// publishTries bounds the tries of one message; publishBackoff is the
	// wait before the second, doubled before each further one.
	publishTries   = 3
	publishBackoff = 100 * time.Millisecond
)

// send publishes a message for each timer, for its Due from now, and
// returns nil once the broker confirmed them all, else the errors of those
// it did not confirm (see publish), joined.
func (s *Scheduler) send(ctx context.Context, ts []timer.Timer, delay func(timer.Timer) time.Duration) error {
	var failed []error
	for _, err := range s.publish(ctx, ts, delay) {
		if err != nil {
			failed = append(failed, err)
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	return fmt.Errorf("%d of %d messages not confirmed: %w", len(failed), len(ts), errors.Join(failed...))
}

// publish publishes a message for each timer and retries those the broker
// did not confirm, up to publishTries in all. Each timer's Attempt goes in
// its message; delay, when not nil, sets how long each timer waits instead
// of until its Due (the backoff of a refused batch). It returns one error
// per timer: nil once the broker confirmed its message, else the error of
// its last try.
func (s *Scheduler) publish(ctx context.Context, ts []timer.Timer, delay func(timer.Timer) time.Duration) []error {
	errs := make([]error, len(ts))
	todo := make([]int, len(ts)) // indices in ts
	for i := range todo {
		todo[i] = i
	}
	wait := publishBackoff
	for try := 1; ; try++ {
		now := time.Now()
		msgs := make([]rabbit.Message, len(todo))
		units := make([]uint64, len(todo))
		fixed := make([]int, len(todo)) // the fixed queue's index, or -1: the ladder
		for j, i := range todo {
			at := ts[i].Due.Add(-max(s.cfg.Lead, 0)) // Run holds it for the rest
			if delay != nil {
				at = now.Add(delay(ts[i]))
			}
			fixed[j] = -1
			if delay == nil {
				fixed[j] = s.fixedFor(ts[i].Due.Sub(now))
			}
			if fixed[j] >= 0 {
				msgs[j] = s.fixedMessage(now, ts[i], fixed[j])
				continue
			}
			msgs[j], units[j] = s.message(now, ts[i], at)
			if at.Sub(now) > s.MaxDelay() && try == 1 {
				s.stats.clamped.Add(1)
			}
		}
		confirms := s.conn.Publish(ctx, msgs)
		confirmed := time.Now()
		var failed []int
		for j, err := range confirms {
			i := todo[j]
			errs[i] = err
			if err == nil {
				if fixed[j] >= 0 {
					s.ledger.addFixed(fixed[j], now, confirmed)
					s.stats.fixed.Add(1)
				} else {
					s.ledger.add(units[j], now, confirmed)
				}
				s.stats.scheduled.Add(1)
				continue
			}
			if errors.Is(err, rabbit.ErrReturned) {
				s.checkNow() // part of the topology is missing
			}
			failed = append(failed, i)
		}
		if len(failed) == 0 || try == publishTries || ctx.Err() != nil || errors.Is(errs[failed[0]], rabbit.ErrClosed) {
			return errs
		}
		s.log.Debug("amqp timers: publish not confirmed; retrying", "timers", len(failed), "retry_in", wait, "err", errs[failed[0]])
		if sleep(ctx, wait) != nil {
			for _, i := range failed {
				errs[i] = fmt.Errorf("%w (after: %w)", ctx.Err(), errs[i])
			}
			return errs
		}
		todo, wait = failed, 2*wait
	}
}

// fixedFor is the index of the fixed queue a timer due in d from now
// waits in (see "Fixed delays"), or -1 when it rides the ladder: a queue
// whose TTL it outlasts by no more than Lead + Base, so that it leaves no
// later than its due time and no earlier than Run holds it for.
func (s *Scheduler) fixedFor(d time.Duration) int {
	for i, ttl := range s.names.fixed {
		if d >= ttl && d-ttl <= max(s.cfg.Lead, 0)+s.cfg.Base {
			return i
		}
	}
	return -1
}

// fixedMessage is the message of timer t, sent at now to the queue of
// fixed TTL i through the default exchange (which routes by queue name:
// one routing, then one dead-lettering into the ready exchange).
func (s *Scheduler) fixedMessage(now time.Time, t timer.Timer, i int) rabbit.Message {
	m, _ := s.message(now, t, now)
	m.Exchange, m.RoutingKey = "", s.names.fixedQueue(s.names.fixed[i])
	return m
}

// message is the message of timer t, sent at now to arrive at at (t.Due,
// or later for a retry), and the units it waits.
func (s *Scheduler) message(now time.Time, t timer.Timer, at time.Time) (rabbit.Message, uint64) {
	units := s.units(now, at)
	headers := amqp091.Table{hdrDue: t.Due.UTC().Format(time.RFC3339Nano)}
	if t.Attempt > 1 {
		headers[hdrAttempt] = int64(t.Attempt)
	}
	return rabbit.Message{
		Exchange:   s.names.entry(units),
		RoutingKey: s.names.routingKey(units, t.Key),
		Publishing: amqp091.Publishing{
			MessageId:    randomID(),
			Type:         msgType,
			Timestamp:    now,
			DeliveryMode: amqp091.Persistent,
			ContentType:  "text/plain",
			Headers:      headers,
			Body:         []byte(t.Key),
		},
	}, units
}

// units is how many Base units a timer sent at now waits to arrive at at:
// the delay rounded up, 0 for a time past, at most maxUnits.
func (s *Scheduler) units(now, at time.Time) uint64 {
	d := at.Sub(now)
	if d <= 0 {
		return 0
	}
	n := uint64(d / s.cfg.Base)
	if d%s.cfg.Base != 0 {
		n++
	}
	return min(n, s.maxUnits)
}

// checkNow asks the data-loss check to run now, if Run runs.
func (s *Scheduler) checkNow() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// sleep waits for d or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
