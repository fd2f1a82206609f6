// Package nats is the NATS JetStream timer backend: each timer is a
// JetStream message schedule (ADR-51, nats-server 2.12 or later), fired by
// the server into the same stream and consumed by a durable pull consumer
// that any number of lapse instances share (docs/architecture.md §1).
//
// # Layout
//
// One stream, Config.Stream, holds three kinds of subjects under
// Config.Prefix (written <p> below):
//
//	<p>.sched.<k>  the schedule of the timer whose key encodes to <k>
//	<p>.due.<k>    the timer once the server fired it, until it is acknowledged
//	<p>.seeded     the seed marker (see "Durability and data loss")
//
// <k> is the key in unpadded base64url, so that any key (order ids hold '.',
// a subject separator) is one subject token. The key itself travels as the
// message body and the original due time in the Lapse-Due header.
//
// The stream is a work queue (acknowledged timers are deleted), keeps one
// message per subject, lives in file storage with Config.Replicas replicas,
// and has AllowMsgSchedules set. After creating or updating it the scheduler
// reads its configuration back: a server that does not know message
// schedules stores the schedules and never fires them, so a stream that does
// not keep AllowMsgSchedules is refused, as is a server older than
// MinServerVersion.
//
// # Scheduling
//
// Schedule publishes one message to <p>.sched.<k> with the headers
//
//	Nats-Schedule: @at <due − Config.Lead, rounded up to the millisecond, RFC 3339 UTC>
//	Nats-Schedule-Target: <p>.due.<k>
//
// and waits for the stream's acknowledgement. The server stores every
// schedule as a subject roll-up, so a new schedule of a key replaces the old
// one; Unschedule purges both subjects of the key, which removes a schedule
// that has not fired and a fired timer not yet acknowledged.
//
// nats.go's WithScheduleAt formats whole seconds, truncated: a schedule set
// that way fires up to a second early. The header is written here instead,
// with milliseconds and rounded up. The server parses the time with its
// fraction and fires a schedule once its clock reaches that instant, so a
// timer never fires before its due time by the server's clock. It checks its
// schedules at most every 250 ms: a timer set to fire at its due time came
// 130 ms late at the median and 255 ms at p99. So the schedule is set
// Config.Lead (400 ms) before the due time, and Run holds the fired timer —
// leased, extended every AckWait/3 — until its due time by this process's
// clock, then hands it over: 1 ms late at p99 in TestLateness, 25 ms end to
// end at 1,000 cancels/s (lapse bench). An Unschedule or a replacing
// Schedule drops a timer this instance holds; one another instance holds may
// still be delivered, and the store's guard skips it. Clocks of the server
// and of lapse's instances should agree to well under a second; the store's
// own guard keeps an early timer from cancelling anything.
//
// # Delivery
//
// The fired message lands on <p>.due.<k>, which the durable pull consumer
// (AckExplicit, unlimited redeliveries) filters. Run pulls a batch of up to
// Config.BatchSize timers with a no-wait request, and when none is there
// waits for the next one with a one-message request, then takes whatever
// else is there; so an instance only ever holds the timers it hands to its
// handler. Several instances share the consumer and the server gives each
// message to one of them.
//
// A batch is acknowledged after the handler returns nil, and negatively
// acknowledged with a delay of Config.Backoff(attempt) when it fails. While
// the handler runs and Run's ctx is alive, the batch's acknowledgement
// deadline (Config.AckWait, the lease) is pushed back every AckWait/3; a
// consumer that dies stops pushing, and the server delivers its batch again
// after AckWait as a further attempt. Timer.Attempt is the server's delivery
// count.
//
// # Durability and data loss
//
// The scheduler is timer.Durable: its timers are in the stream, which
// outlives lapse's processes. The stream can still be lost (deleted,
// purged), so the scheduler is also a timer.Seeder: after a complete seed
// from the store it writes "ok" to <p>.seeded, and while Run runs it reads
// the marker every Config.LossCheck. When it is missing (at the first start
// too) one instance takes the seed over with a compare-and-set on the
// marker's subject sequence, runs the seed function in the background, and
// sets "ok" with a compare-and-set on its own marker: a loss during the seed,
// or another instance taking over a seed that looked abandoned, makes that
// fail, and the seed runs again. A deleted stream is created again by the
// next call that finds it missing.
//
// # Known gaps
//
// A Schedule of a key whose previous schedule is being fired at that very
// moment can be purged by the server along with the old schedule (the
// server purges a fired schedule's subject when it stores the fired
// message). The fired message is then delivered with the old due time;
// lapse checks the store, and a timer that is early for it is scheduled
// again. A Schedule also leaves a timer that has already fired (in a
// handler, or waiting for its redelivery) in place: it is delivered with its
// own Due, and lapse checks the store likewise.
package nats

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
)

// Config configures a Scheduler. Zero fields take the defaults named below.
// Every instance sharing a Stream must use the same Prefix.
type Config struct {
	// Prefix starts every subject of the scheduler, so that several lapse
	// deployments (or tests) can share one NATS account. It is one or more
	// subject tokens of A-Z a-z 0-9 _ - separated by dots. Defaults to
	// DefaultPrefix.
	Prefix string
	// Stream is the name of the JetStream stream holding the timers.
	// Defaults to the Prefix with dots replaced by underscores, followed by
	// "_timers" ("lapse_timers"). An existing stream with other subjects is
	// refused, never taken over.
	Stream string
	// BatchSize is the most timers handed to the handler at once, and pulled
	// by one request. The consumer lets 50 × BatchSize timers be delivered
	// and not yet acknowledged (batches in hand, failed ones waiting for
	// their backoff) before it holds back the rest. Defaults to 200; at most
	// 1000.
	BatchSize int
	// AckWait is the lease: how long a batch delivered to a consumer that
	// died (or hangs past the end of Run) takes to be delivered again. A
	// running handler's lease is extended while Run's ctx is alive. Defaults
	// to 10 s; at least 300 ms.
	AckWait time.Duration
	// Lead is how long before its due time the server fires a timer; the
	// scheduler then holds it in the process (leased) and hands it over at
	// its due time. The server re-arms its schedule timer at most every 250
	// ms, so a timer fired at its due time arrives up to ~260 ms late; a
	// lead above that makes the process's clock, not the server's tick, set
	// the lateness. Defaults to 400 ms; negative means none (fire at due).
	Lead time.Duration
	// Replicas is the stream's replica count on a NATS cluster: 1, 3 or 5.
	// Defaults to 1.
	Replicas int
	// LossCheck is how often Run reads the seed marker to detect that the
	// stream lost its data. Defaults to 1 s.
	LossCheck time.Duration
	// Backoff is the delay before a failed batch is redelivered. Defaults to
	// timer.Backoff.
	Backoff func(attempt int) time.Duration
	// Logger receives the scheduler's logs: lost data, seeds, server errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultLead is Config.Lead's default.
const DefaultLead = 400 * time.Millisecond

// DefaultPrefix is Config.Prefix's default.
const DefaultPrefix = "lapse"

// MinServerVersion is the oldest nats-server the scheduler runs on: message
// schedules came with 2.12. An older server accepts the stream setting and
// the schedules, and never fires them.
const MinServerVersion = "2.12.0"

// minServerVersion is MinServerVersion as numbers.
var minServerVersion = [3]int{2, 12, 0}

// Limits of Config and of keys.
const (
	maxBatchSize = 1000
	minAckWait   = 300 * time.Millisecond
	// MaxKeyLen bounds a timer key, so that its subjects stay far below the
	// server's limit on a protocol line (4 KiB by default).
	MaxKeyLen = 1024
)

// consumerName is the durable pull consumer every instance shares.
const consumerName = "lapse-timers"

// Headers of a schedule message. The Nats-* ones are the server's (ADR-51);
// hdrDue is lapse's and is copied by the server to the fired message.
const (
	hdrSchedule = "Nats-Schedule"
	hdrTarget   = "Nats-Schedule-Target"
	hdrDue      = "Lapse-Due"
	// atLayout is RFC 3339 in UTC with milliseconds, as Nats-Schedule's
	// "@at" takes it.
	atLayout = "2006-01-02T15:04:05.000Z07:00"
)

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Stream == "" {
		c.Stream = strings.ReplaceAll(c.Prefix, ".", "_") + "_timers"
	}
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.AckWait == 0 {
		c.AckWait = 10 * time.Second
	}
	if c.Lead == 0 {
		c.Lead = DefaultLead
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.LossCheck == 0 {
		c.LossCheck = time.Second
	}
	if c.Backoff == nil {
		c.Backoff = timer.Backoff
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if msg := validPrefix(c.Prefix); msg != "" {
		return fmt.Errorf("nats: Config.Prefix %q: %s", c.Prefix, msg)
	}
	if msg := validStream(c.Stream); msg != "" {
		return fmt.Errorf("nats: Config.Stream %q: %s", c.Stream, msg)
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatchSize {
		return fmt.Errorf("nats: Config.BatchSize %d: want 1 to %d", c.BatchSize, maxBatchSize)
	}
	if c.AckWait < minAckWait {
		return fmt.Errorf("nats: Config.AckWait %v: want at least %v", c.AckWait, minAckWait)
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		return fmt.Errorf("nats: Config.Replicas %d: want 1, 3 or 5", c.Replicas)
	}
	if c.LossCheck < 10*time.Millisecond {
		return fmt.Errorf("nats: Config.LossCheck %v: want at least 10ms", c.LossCheck)
	}
	return nil
}

// validPrefix returns why p is not a subject prefix, or "".
func validPrefix(p string) string {
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" {
			return "empty subject token (want tokens separated by single dots)"
		}
		if !plainName(tok) {
			return "want subject tokens of A-Z a-z 0-9 _ - separated by dots"
		}
	}
	return ""
}

// validStream returns why n is not a stream name, or "".
func validStream(n string) string {
	if n == "" || len(n) > 255 || !plainName(n) {
		return "want 1-255 characters of A-Z a-z 0-9 _ -"
	}
	return ""
}

func plainName(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// subjects are the scheduler's subjects, each with a trailing dot where a
// key token follows.
type subjects struct {
	sched, due, seeded string
}

func newSubjects(prefix string) subjects {
	return subjects{sched: prefix + ".sched.", due: prefix + ".due.", seeded: prefix + ".seeded"}
}

// token is key as one subject token.
func token(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// Scheduler is the NATS JetStream timer.Scheduler. It is safe for
// concurrent use; one Run at a time per Scheduler, any number of Schedulers
// (in any number of processes) on one stream.
type Scheduler struct {
	nc   *natsgo.Conn
	js   jetstream.JetStream
	cfg  Config
	subj subjects
	log  *slog.Logger
	id   string // this instance, in seed tokens

	// minVersion is minServerVersion; a test of the stream read-back
	// lowers it to get past the version check on an old server.
	minVersion [3]int
	// ownConn is set by Open: Close closes the connection.
	ownConn bool

	// mu guards stream and cons: handles of the stream and consumer once
	// they are known to exist with the right configuration; nil when not
	// checked yet, or after an error that may mean they are gone.
	mu     sync.Mutex
	stream jetstream.Stream
	cons   jetstream.Consumer

	seedMu sync.Mutex
	seed   func(ctx context.Context) error

	run sync.Mutex // one Run at a time
	// held is Run's hold of fired timers waiting for their due time.
	held atomic.Pointer[hold]
}

var (
	_ timer.Scheduler      = (*Scheduler)(nil)
	_ timer.Durable        = (*Scheduler)(nil)
	_ timer.Seeder         = (*Scheduler)(nil)
	_ timer.BatchScheduler = (*Scheduler)(nil)
)

// New returns a scheduler on nc, a connection to a nats-server with
// JetStream. It refuses a server older than MinServerVersion. It does not
// create the stream (the first Schedule or Run does), and it does not close
// nc.
func New(nc *natsgo.Conn, cfg Config) (*Scheduler, error) {
	if nc == nil {
		return nil, errors.New("nats: nil connection")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := newScheduler(nc, cfg, minServerVersion)
	if err != nil {
		return nil, err
	}
	if err := s.checkServer(); err != nil {
		return nil, err
	}
	return s, nil
}

// newScheduler is New without the server check, which minVersion (always
// minServerVersion outside tests) sets for later calls.
func newScheduler(nc *natsgo.Conn, cfg Config, minVersion [3]int) (*Scheduler, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("nats: JetStream context: %w", err)
	}
	return &Scheduler{
		nc:         nc,
		js:         js,
		cfg:        cfg,
		subj:       newSubjects(cfg.Prefix),
		log:        cfg.Logger.With("timers", "nats", "stream", cfg.Stream),
		id:         randomID(),
		minVersion: minVersion,
	}, nil
}

// Close closes the connection if Open made it; a scheduler from New leaves
// its connection to the caller.
func (s *Scheduler) Close() error {
	if s.ownConn {
		s.nc.Close()
	}
	return nil
}

// Ping checks that the server answers JetStream requests, for a readiness
// check: while it fails, timers can be neither set nor delivered.
func (s *Scheduler) Ping(ctx context.Context) error {
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: ping: %w", err)
	}
	return nil
}

// Durable reports true: the timers live in a file-backed stream, not in the
// process. A stream that loses them is detected and reseeded (see SetSeed).
func (s *Scheduler) Durable() bool { return true }

// SetSeed implements timer.Seeder: seed schedules every pending order again
// from the store. Run calls it, in the background, when it finds the seed
// marker missing: at the first start on a new stream, and after the stream
// lost its data. Without a seed function a loss goes undetected.
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

// Schedule implements timer.Scheduler: one publish, acknowledged by the
// stream, that replaces any schedule of key.
func (s *Scheduler) Schedule(ctx context.Context, key string, due time.Time) error {
	m, err := s.scheduleMsg(key, due)
	if err != nil {
		return err
	}
	seq, err := s.publish(ctx, m)
	if err != nil {
		return fmt.Errorf("nats: schedule timer %s: %w", key, err)
	}
	// A fired timer of key this instance holds is superseded.
	if h := s.held.Load(); h != nil {
		h.unbury(key)
		h.drop(key, seq)
	}
	return nil
}

// ScheduleMany implements timer.BatchScheduler: Schedule for many timers,
// with up to 1000 publishes in flight at once, for seeding. Each timer's Key
// and Due are used (Attempt is ignored). A bad key is an error and schedules
// nothing; an error from the server may leave some timers scheduled.
func (s *Scheduler) ScheduleMany(ctx context.Context, timers []timer.Timer) error {
	msgs := make([]*natsgo.Msg, len(timers))
	for i, t := range timers {
		m, err := s.scheduleMsg(t.Key, t.Due)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	if _, err := s.ensureStream(ctx); err != nil {
		return fmt.Errorf("nats: schedule %d timers: %w", len(timers), err)
	}
	const window = 1000
	for start := 0; start < len(msgs); start += window {
		part := msgs[start:min(start+window, len(msgs))]
		futures := make([]jetstream.PubAckFuture, 0, len(part))
		var err error
		for _, m := range part {
			var f jetstream.PubAckFuture
			if f, err = s.js.PublishMsgAsync(m, jetstream.WithExpectStream(s.cfg.Stream)); err != nil {
				break
			}
			futures = append(futures, f)
		}
		// Wait for every publish sent, even after an error, so that none is
		// still in flight when ScheduleMany returns.
		for _, f := range futures {
			select {
			case <-f.Ok():
			case ferr := <-f.Err():
				err = firstErr(err, ferr)
			case <-ctx.Done():
				return fmt.Errorf("nats: schedule %d timers: %w", len(timers), ctx.Err())
			}
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				s.forget() // the stream is gone: the next call creates it again
			}
			return fmt.Errorf("nats: schedule %d timers: %w", len(timers), err)
		}
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Unschedule implements timer.Scheduler: it purges the key's schedule and
// its fired timer, if any. A timer in a batch in hand is still delivered
// with it; its acknowledgement then changes nothing.
func (s *Scheduler) Unschedule(ctx context.Context, key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	st, err := s.ensureStream(ctx)
	if err == nil {
		// One purge for both subjects: <p>.*.<k> is <p>.sched.<k> and <p>.due.<k>.
		err = st.Purge(ctx, jetstream.WithPurgeSubject(s.cfg.Prefix+".*."+token(key)))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s.forget()
			err = nil // nothing left to unschedule; the stream is created again when next needed
		}
	}
	if err != nil {
		return fmt.Errorf("nats: unschedule timer %s: %w", key, err)
	}
	// A fired timer of key this instance holds until its due time is gone
	// too. (One another instance holds may still be delivered: the store's
	// guard skips it.)
	if h := s.held.Load(); h != nil {
		h.bury(key)
		h.drop(key, math.MaxUint64)
	}
	return nil
}

// scheduleMsg is the schedule message that sets key to fire at due.
func (s *Scheduler) scheduleMsg(key string, due time.Time) (*natsgo.Msg, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	tok := token(key)
	m := natsgo.NewMsg(s.subj.sched + tok)
	m.Header.Set(hdrSchedule, "@at "+fireAt(due.Add(-max(s.cfg.Lead, 0))).Format(atLayout))
	m.Header.Set(hdrTarget, s.subj.due+tok)
	m.Header.Set(hdrDue, due.UTC().Format(time.RFC3339Nano))
	m.Data = []byte(key)
	return m, nil
}

func validKey(key string) error {
	if key == "" {
		return errors.New("nats: empty timer key")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("nats: timer key of %d bytes: at most %d", len(key), MaxKeyLen)
	}
	return nil
}

// fireAt is when a timer due at t is set to fire: t rounded up to the
// millisecond, in UTC, never before t.
func fireAt(t time.Time) time.Time {
	f := t.Truncate(time.Millisecond)
	if f.Before(t) {
		f = f.Add(time.Millisecond)
	}
	return f.UTC()
}

// publish publishes m to the stream and waits for its acknowledgement. When
// the stream is gone (deleted) it creates it again and publishes once more.
func (s *Scheduler) publish(ctx context.Context, m *natsgo.Msg) (uint64, error) {
	if _, err := s.ensureStream(ctx); err != nil {
		return 0, err
	}
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.cfg.Stream))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return seqOf(ack), err
	}
	s.forget()
	if _, err := s.ensureStream(ctx); err != nil {
		return 0, err
	}
	ack, err = s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.cfg.Stream))
	return seqOf(ack), err
}

func seqOf(ack *jetstream.PubAck) uint64 {
	if ack == nil {
		return 0
	}
	return ack.Sequence
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
