// Package kafka is the Kafka timer backend: delay-level topics that any
// number of lapse instances forward timers through, in consumer groups, down
// to a due topic that they deliver from (docs/architecture.md §1). Kafka has
// no delayed delivery of its own; this is the field's design for it, "a delay
// queue plus timed re-delivery", with franz-go.
//
// # The ladder
//
// Config.Levels (1 s, 10 s, 100 s, 1,000 s and 10,000 s by default) are
// topics named <prefix>.delay.<duration> (lapse.delay.1s, lapse.delay.10s,
// …), plus <prefix>.due. A timer is a record keyed by its order id whose
// headers carry its due time (lapse-due, Unix nanoseconds), the time it may
// leave the ladder (lapse-at: its due time, or a retry's) and, in a level
// topic, the time it leaves that level (lapse-exit). Schedule produces it to
// the highest level not longer than its remaining delay less Config.Lead,
// with an exit of now + the level, or straight to the due topic.
//
// Every record of a level waits the same time, so a level's records leave it
// in the order they came in: its consumer reads each partition in order and,
// while the partition's head is not at its exit, pauses the partition
// (franz-go's PauseFetchPartitions) once it holds the next second's records,
// so a level holds no more than that in memory whatever it stores. At the
// exit, the record is produced again for what remains — to the highest level
// that fits, which may be the same one, or to the due topic — and only once
// that produce is acknowledged is the level's offset committed. A consumer
// that dies between the two leaves its records to be forwarded again by the
// next owner of the partition: twice, never lost. A short delay never waits
// behind a long one: the long one is in another topic, or ahead of it in
// time.
//
// # Precision
//
// A timer leaves the ladder Config.Lead (200 ms) before its due time, or
// earlier, and Run holds it in the process until its due time by this
// process's clock: it waits in the due topic up to the shortest level plus
// Lead. The lead hides the ladder's own lag — a fetch after a paused
// partition resumes, a forward's produce — so a timer is handed over on
// time to within milliseconds, and never before its Due.
//
// # Delivery
//
// Run consumes the level topics (consumer group <prefix>.ladder) and the due
// topic (group <prefix>.due), with manual offset commits. It hands the due
// timers, earliest first, to the handler in batches of up to
// Config.BatchSize, and commits a partition's offset past a timer only once
// the handler acknowledged it and every timer before it in the partition:
// a crash redelivers, never loses. A batch the handler refuses is produced
// again into the ladder with Attempt + 1 and a delay of timer.Backoff of the
// attempt (lapse-attempt), then committed, so the backoff holds nothing in
// the process and any instance gets the retry. When a partition of the due
// topic moves to another instance (a rebalance), Run first hands over the
// timers of it that it holds, as they come due (at most the shortest level
// plus Lead), and commits them, so a timer is delivered once even then; only
// a crash, or Run's end, delivers a timer twice.
//
// The producer is idempotent (franz-go's default) with acks from all
// in-sync replicas. Consumers' sessions time out after Config.SessionTimeout
// (10 s): the partitions of an instance that died wait that long before
// another instance takes them.
//
// # Unschedule
//
// A record cannot be taken out of a topic, so Unschedule removes nothing,
// and a Schedule that replaces a due time leaves the old timer in the
// ladder: both are harmless, because a timer only triggers the store's
// guarded cancel (as with RabbitMQ timers; timertest.Features.CanUnschedule
// is false).
//
// # Durability and data loss
//
// Timers live in the topics, so they outlive lapse's processes: the
// scheduler is timer.Durable. They can still be lost — topics deleted, a
// retention that ran out before a record was consumed (the topics keep the
// broker's retention; lapse down for longer than it loses timers), a broker
// that lost data — so the scheduler is also a timer.Seeder. Open creates the
// missing topics (Config.Partitions, Config.Replication, cleanup.policy
// delete), and while Run runs, a check every Config.LossCheck finds a loss:
//
//   - a topic missing, or recreated (its topic ID changed): the topics are
//     created again;
//   - a committed offset of the ladder's or the due topic's group below its
//     partition's start offset: records were deleted before they were read;
//   - an empty seed marker, <prefix>.seeded, which holds a record written
//     after a complete seed: a new cluster, new topics, or a seed that did
//     not finish.
//
// On a loss it empties the marker, runs the seed function (every pending
// order scheduled again from the store) and writes the marker. Timers that
// were not lost are then in the ladder twice: delivered twice, which the
// store's guard makes harmless. What is lost between two checks is cancelled
// by the seed or by the service's fallback sweep, late, never early.
//
// # Operations
//
// Instances sharing a Prefix must use the same Levels (other levels are
// other topics: their timers would be left in the old ones). Tests run on
// kfake, franz-go's in-process Kafka, with three brokers: no Kafka broker
// runs on the machine lapse is developed on.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/lapsehq/lapse/timer"
)

// DefaultPrefix starts every topic's and group's name when Config.Prefix is empty.
const DefaultPrefix = "lapse"

// DefaultLevels are the level durations when Config.Levels is empty.
var DefaultLevels = []time.Duration{time.Second, 10 * time.Second, 100 * time.Second, 1000 * time.Second, 10000 * time.Second}

const (
	maxLevels    = 32
	maxBatchSize = 10_000
	// ahead is how far past now a level consumer keeps a partition's
	// records in memory before pausing it: a resumed partition's next fetch
	// can wait for the one in flight, so the records due next are already
	// in hand when their exit comes.
	ahead = time.Second
	// maxQueued bounds the records a level consumer holds per partition.
	maxQueued = 10_000
	// settleTimeout bounds a commit or a produce made after Run's ctx ended.
	settleTimeout = 10 * time.Second
)

// Header names.
const (
	headerDue     = "lapse-due"
	headerAt      = "lapse-at"
	headerExit    = "lapse-exit"
	headerAttempt = "lapse-attempt"
)

// Config configures a Scheduler. Zero fields take the defaults named below.
type Config struct {
	// Brokers are the seed brokers, host:port each. Required.
	Brokers []string
	// Prefix starts every topic's and consumer group's name: letters,
	// digits, '.', '_' and '-'. Defaults to DefaultPrefix.
	Prefix string
	// Levels are the delay levels, increasing, whole milliseconds each.
	// Defaults to DefaultLevels (1 s to 10,000 s, ×10 each).
	Levels []time.Duration
	// Lead is how long before its due time a timer leaves the ladder, to be
	// held in the process until due; negative for none. Defaults to 200 ms.
	Lead time.Duration
	// BatchSize is the most timers one handler call receives. Defaults to 200.
	BatchSize int
	// Partitions of each topic Open creates. Defaults to 12.
	Partitions int32
	// Replication factor of each topic Open creates. Defaults to the
	// broker's default (-1).
	Replication int16
	// SessionTimeout is the consumer groups' session timeout: how long
	// the partitions of an instance that died wait for another. Defaults
	// to 10 s.
	SessionTimeout time.Duration
	// LossCheck is how often Run checks for lost timers. Defaults to 30 s.
	LossCheck time.Duration
	// ClientID is the Kafka client id. Defaults to "lapse".
	ClientID string
	// TLS, when set, is used to dial every broker.
	TLS *tls.Config
	// SASL, when set, authenticates every connection.
	SASL sasl.Mechanism
	// Logger receives what the scheduler has to say. Defaults to slog.Default().
	Logger *slog.Logger
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if len(c.Levels) == 0 {
		c.Levels = DefaultLevels
	}
	if c.Lead == 0 {
		c.Lead = 200 * time.Millisecond
	}
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.Replication == 0 {
		c.Replication = -1
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.LossCheck == 0 {
		c.LossCheck = 30 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = "lapse"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka timers: Config.Brokers: no broker")
	}
	if err := validLevels(c.Levels); err != nil {
		return fmt.Errorf("kafka timers: Config.Levels: %w", err)
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatchSize {
		return fmt.Errorf("kafka timers: Config.BatchSize %d: want 1 to %d", c.BatchSize, maxBatchSize)
	}
	for _, r := range c.Prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafka timers: Config.Prefix %q: Kafka allows only letters, digits, '.', '_' and '-'", c.Prefix)
		}
	}
	if len(c.Prefix) > 200 {
		return fmt.Errorf("kafka timers: Config.Prefix of %d characters; at most 200", len(c.Prefix))
	}
	return nil
}

// level is one delay level.
type level struct {
	d     time.Duration
	topic string
}

// Scheduler is the Kafka timer backend. It implements timer.Scheduler,
// timer.Durable, timer.Seeder, timer.BatchScheduler and timer.Counted.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	levels   []level // increasing
	dueTopic string
	marker   string // the seed marker's topic
	prod     *kgo.Client
	adm      *kadm.Client

	seed    atomic.Pointer[func(context.Context) error]
	running atomic.Bool
	wake    chan struct{} // wakes the loss check
	restart chan struct{} // the loss check created topics again: Run's consumers start afresh

	mu  sync.Mutex
	ids map[string]kadm.TopicID // the topics' IDs as last seen

	// killAfterForward, when set (tests), is asked after each forward's
	// produce was acknowledged; true makes the ladder stop there, as if
	// its process died before committing.
	killAfterForward func() bool

	stats struct {
		scheduled, forwarded, paused, delivered, retried, unscheduled, losses, sentBack atomic.Uint64
	}
}

// Open parses a --timers kafka:// URL (ParseURL), lays cfg's fields that
// the URL does not set under it (Logger, say), and returns a scheduler on it.
func Open(ctx context.Context, rawURL string, cfg Config) (*Scheduler, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Logger == nil {
		u.Logger = cfg.Logger
	}
	return New(ctx, u)
}

// New connects to the brokers and creates the topics that are missing.
func New(ctx context.Context, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:      cfg,
		log:      cfg.Logger,
		dueTopic: cfg.Prefix + ".due",
		marker:   cfg.Prefix + ".seeded",
		wake:     make(chan struct{}, 1),
		restart:  make(chan struct{}, 1),
		ids:      map[string]kadm.TopicID{},
	}
	for _, d := range cfg.Levels {
		s.levels = append(s.levels, level{d: d, topic: cfg.Prefix + ".delay." + d.String()})
	}
	prod, err := kgo.NewClient(s.clientOpts(
		// acks=all and idempotence (franz-go's default): an acknowledged
		// timer is on every in-sync replica, once.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// No linger: Schedule waits for its record. Records produced while
		// a request is in flight still go out together.
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka timers: %w", err)
	}
	s.prod, s.adm = prod, kadm.NewClient(prod)
	if err := s.ensureTopics(ctx); err != nil {
		prod.Close()
		return nil, err
	}
	return s, nil
}

// clientOpts are the options of every client of the scheduler, then extra.
func (s *Scheduler) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID(s.cfg.ClientID),
		kgo.WithLogger(slogLogger{s.log}),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(s.cfg.TLS))
	}
	if s.cfg.SASL != nil {
		opts = append(opts, kgo.SASL(s.cfg.SASL))
	}
	return append(opts, extra...)
}

// Close releases the scheduler's connections. Run must have returned.
func (s *Scheduler) Close() error {
	s.prod.Close()
	return nil
}

// Ping checks that the brokers answer.
func (s *Scheduler) Ping(ctx context.Context) error {
	if err := s.prod.Ping(ctx); err != nil {
		return fmt.Errorf("kafka timers: %w", err)
	}
	return nil
}

// Durable implements timer.Durable: the timers are in the topics.
func (s *Scheduler) Durable() bool { return true }

// SetSeed implements timer.Seeder.
func (s *Scheduler) SetSeed(seed func(ctx context.Context) error) { s.seed.Store(&seed) }

// Counters implements timer.Counted.
func (s *Scheduler) Counters() []timer.Counter {
	return []timer.Counter{
		{Name: "lapse_kafka_timers_forwarded_total", Help: "Timers the Kafka ladder forwarded from a level to the next level or to the due topic.", Value: s.stats.forwarded.Load()},
		{Name: "lapse_kafka_timers_retried_total", Help: "Timers of batches the handler refused, produced again into the Kafka ladder for a backoff.", Value: s.stats.retried.Load()},
		{Name: "lapse_kafka_timers_sent_back_total", Help: "Timers that reached the Kafka due topic too early (a clock ahead of this one) and were sent back into the ladder.", Value: s.stats.sentBack.Load()},
		{Name: "lapse_kafka_timers_losses_total", Help: "Losses of Kafka timers detected (missing or recreated topics, records deleted before they were read, no seed marker), each followed by a seed from the store.", Value: s.stats.losses.Load()},
	}
}

// Schedule produces key's timer into the ladder and returns once the broker
// acknowledged it. It does not remove an earlier schedule of key (see the
// package documentation).
func (s *Scheduler) Schedule(ctx context.Context, key string, due time.Time) error {
	if err := s.prod.ProduceSync(ctx, s.record(key, due, due, 1, time.Now())).FirstErr(); err != nil {
		return fmt.Errorf("kafka timers: schedule %s: %w", key, err)
	}
	s.stats.scheduled.Add(1)
	return nil
}

// ScheduleMany implements timer.BatchScheduler: one produce for all.
func (s *Scheduler) ScheduleMany(ctx context.Context, ts []timer.Timer) error {
	now := time.Now()
	recs := make([]*kgo.Record, len(ts))
	for i, t := range ts {
		recs[i] = s.record(t.Key, t.Due, t.Due, 1, now)
	}
	if err := s.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("kafka timers: schedule %d timers: %w", len(ts), err)
	}
	s.stats.scheduled.Add(uint64(len(ts)))
	return nil
}

// Unschedule implements timer.Scheduler; it removes nothing (see the
// package documentation).
func (s *Scheduler) Unschedule(context.Context, string) error {
	s.stats.unscheduled.Add(1)
	return nil
}

// record is the record of a timer due at due that may leave the ladder at
// at, sent at now: to the highest level not longer than at − now − Lead,
// or to the due topic.
func (s *Scheduler) record(key string, due, at time.Time, attempt int, now time.Time) *kgo.Record {
	r := &kgo.Record{Key: []byte(key), Value: []byte(key), Topic: s.dueTopic}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerDue, Value: nanos(due)})
	if !at.Equal(due) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerAt, Value: nanos(at)})
	}
	if attempt > 1 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerAttempt, Value: []byte(strconv.Itoa(attempt))})
	}
	remaining := at.Sub(now) - max(s.cfg.Lead, 0)
	for i := len(s.levels) - 1; i >= 0; i-- {
		if l := s.levels[i]; l.d <= remaining {
			r.Topic = l.topic
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerExit, Value: nanos(now.Add(l.d))})
			break
		}
	}
	return r
}

// produceEach produces recs and returns each one's error, in recs' order
// (ProduceSync's results come in the order the brokers answered).
func (s *Scheduler) produceEach(ctx context.Context, recs []*kgo.Record) []error {
	errs := make([]error, len(recs))
	if len(recs) == 0 {
		return errs
	}
	byRec := make(map[*kgo.Record]error, len(recs))
	for _, r := range s.prod.ProduceSync(ctx, recs...) {
		byRec[r.Record] = r.Err
	}
	for i, r := range recs {
		errs[i] = byRec[r]
	}
	return errs
}

// forward is the record that carries rec's timer on from its level at now.
func (s *Scheduler) forward(rec *kgo.Record, now time.Time) (*kgo.Record, error) {
	t, at, err := decode(rec)
	if err != nil {
		return nil, err
	}
	return s.record(t.Key, t.Due, at, t.Attempt, now), nil
}

// decode reads a timer's record: the timer and the time it may leave the ladder.
func decode(rec *kgo.Record) (t timer.Timer, at time.Time, err error) {
	t = timer.Timer{Key: string(rec.Key), Attempt: 1}
	var haveDue, haveAt bool
	for _, h := range rec.Headers {
		switch h.Key {
		case headerDue:
			t.Due, haveDue = fromNanos(h.Value)
		case headerAt:
			at, haveAt = fromNanos(h.Value)
		case headerAttempt:
			if n, err := strconv.Atoi(string(h.Value)); err == nil && n > 0 {
				t.Attempt = n
			}
		}
	}
	if !haveDue || t.Key == "" {
		return t, at, fmt.Errorf("kafka timers: record %s/%d@%d is not a timer (no key or no %s header)", rec.Topic, rec.Partition, rec.Offset, headerDue)
	}
	if !haveAt {
		at = t.Due
	}
	return t, at, nil
}

// exitOf is when a level's record leaves its level (its lapse-exit header;
// at once when it has none).
func exitOf(rec *kgo.Record) time.Time {
	for _, h := range rec.Headers {
		if h.Key == headerExit {
			if t, ok := fromNanos(h.Value); ok {
				return t
			}
		}
	}
	return time.Time{}
}

func nanos(t time.Time) []byte { return strconv.AppendInt(nil, t.UnixNano(), 10) }

func fromNanos(b []byte) (time.Time, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// levelTopics are the names of the level topics.
func (s *Scheduler) levelTopics() []string {
	ts := make([]string, len(s.levels))
	for i, l := range s.levels {
		ts[i] = l.topic
	}
	return ts
}

// topics are the names of every topic of the scheduler.
func (s *Scheduler) topics() []string {
	return append(slices.Clone(s.levelTopics()), s.dueTopic, s.marker)
}

// Run delivers due timers to h until ctx ends (see the package
// documentation), then returns ctx's error. It also forwards the ladder's
// timers and checks for lost ones meanwhile. One Run at a time per Scheduler.
func (s *Scheduler) Run(ctx context.Context, h timer.Handler) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kafka timers: Run is running already")
	}
	defer s.running.Store(false)
	var wg sync.WaitGroup
	defer wg.Wait()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Go(func() {
		timer.Watch(watchCtx, s.cfg.LossCheck, s.wake, s.checkLoss, func(err error, failures int, retryIn time.Duration) {
			s.log.Warn("kafka timers: loss check failed", "err", err, "failures", failures, "retry_in", retryIn)
		})
	})
	for {
		if err := s.consume(ctx, h); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("kafka timers: topics were created again; consuming them afresh")
	}
}

// consume runs the ladder's and the due topic's consumers until ctx ends,
// or until the loss check created topics again (a consumer group does not
// follow a topic deleted and created under it).
func (s *Scheduler) consume(ctx context.Context, h timer.Handler) error {
	select {
	case <-s.restart: // a restart asked before these consumers existed
	default:
	}
	lad, err := s.newLadder()
	if err != nil {
		return err
	}
	d, err := s.newDelivery(h)
	if err != nil {
		lad.close()
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { lad.run(runCtx) })
	wg.Go(func() {
		select {
		case <-s.restart:
			cancel()
		case <-runCtx.Done():
		}
	})
	d.run(runCtx)
	cancel()
	wg.Wait()
	lad.close()
	d.close()
	return nil
}

// slogLogger writes franz-go's warnings and errors to a slog.Logger.
type slogLogger struct{ l *slog.Logger }

func (slogLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelWarn
	if level == kgo.LogLevelError {
		l = slog.LevelError
	}
	s.l.Log(context.Background(), l, "kafka timers: "+msg, keyvals...)
}
