// Package redis is the Redis timer backend: timers in sorted sets sharded by
// key, claimed by a Lua script, on a standalone Redis, a master with
// replicas that Redis Sentinel fails over, or a Redis Cluster
// (docs/architecture.md §1). Any number of lapse instances may share one Redis; each
// timer goes to one of them at a time.
//
// # Layout
//
// A timer lives in one of Config.Shards shards, chosen by a hash of its key.
// A shard is four keys on one Cluster slot (hash tag {sNN}, see keys.go):
// due, a ZSet of the timers waiting, scored by their due time in Unix
// milliseconds; lease, a ZSet of the claims (batches) consumers hold, scored
// by the lease deadline; claims, a hash from a claim to its timer keys; and
// meta, a hash holding, for a timer in flight or waiting to be redelivered
// only, "<attempts>:<original due ms>:<claim id>". A timer belongs to the
// claim its meta names. A timer scheduled and not yet delivered costs one
// ZSet member and nothing else; a claim costs one lease entry and one claims
// entry however many timers it holds, so that Redis's work per timer
// delivered is its due and meta entries'.
//
// # Scheduling
//
// A schedule is a script call (lua/schedule.lua) per shard: ZADD to due,
// and removal from meta, so a new schedule replaces the old one even while
// the timer is in a handler: the claim that holds it no longer does. Schedule sets one timer, ScheduleMany
// many (the orders of a create group, a page of a seed); calls made while
// another is written are written together (group commit): the timers of all
// of them go in one script call per shard, with many members each, all in
// one pipeline. What a timer costs Redis is then mostly its ZADD, not a
// script call and a round trip of its own.
//
// # Delivery
//
// Scores are due times rounded up to the millisecond, and a timer is claimed
// when its score is at most the current time floored to the millisecond, so
// a timer never fires before its due time (by the clock of the instance that
// claims it; instances' clocks should agree to well under a second, and the
// store's own guard keeps an early timer from cancelling anything).
//
// The claim script (lua/claim.lua) takes up to BatchSize due timers of a
// shard out of due in one step, so two consumers never both win a timer. It
// counts each delivery in meta and tags it with the claim's id, and leases
// the claim (one lease entry, its keys in claims). When the handler
// returns nil the batch is acknowledged (lua/ack.lua), in the round trip of
// the worker's next claim (one pipeline: the acknowledgements go first), or
// at once when the worker has nothing more to claim; when it fails the batch
// goes back to due after Config.Backoff (lua/retry.lua), keeping its attempt
// count and original due time. While a handler runs and Run's ctx is alive,
// its lease is extended every Lease/3 (lua/extend.lua); a consumer that dies
// stops extending, and every instance moves the timers of claims past their
// lease deadline back to due every Lease/2 (lua/recover.lua), so a dead consumer's batch is delivered
// again within about 1.5 × Lease, as a further attempt. Acknowledging,
// requeueing and extending act only on the timers the claim still holds: a
// Schedule or Unschedule of a timer in flight, or its recovery, voids the
// claim on it, so a new schedule always wins over the batch in hand.
//
// # Waking
//
// Run starts Config.Workers workers; each owns the shards whose number modulo
// Workers is its own. A worker knows the earliest due time of each of its
// shards (the claim script returns it) and sleeps until the earliest of them,
// for at most Config.MaxSleep; Schedule on this instance wakes it at once when
// it sets an earlier timer, and every MaxSleep it reads the earliest due time
// of all its shards again (one pipelined ZRANGE each) for timers other
// instances set. A waking worker claims from each of its due shards, up to
// BatchSize timers in all, and hands them to the handler in one call: under
// load that is one handler call (for lapse, one cancel transaction) per
// round instead of one per shard. Handlers run on the workers, so up to
// Workers batches are in hand at once.
//
// # Durability and data loss
//
// The scheduler is timer.Durable: a Redis that keeps its data (RDB or AOF)
// keeps the timers across a restart of lapse, and lapse does not seed it.
// Redis can still lose them (FLUSHALL, a restart without persistence), so the
// scheduler is also a timer.Seeder: after a complete seed from the store it
// sets a marker per shard (<prefix>:{sNN}:seeded), "ok:" and the run id of
// the Redis process that held the shard, and while Run runs it checks the
// markers every Config.LossCheck. When one is missing (at the first start
// too), or names another process than the one that holds its shard now,
// one instance takes the seed lock and runs the seed function in the
// background, without blocking Schedule or deliveries, then sets the markers
// again. The run id is what catches the losses a marker survives: a
// failover to a replica (Sentinel's, or a Cluster's) that had not received
// the master's last writes, since replication is asynchronous, or a restart
// that reloaded a snapshot older than them. The markers, written long
// before, came through; the timers of the last moments may not have, and a
// new process answering is taken for a loss of unknown extent. The seed is
// fenced by its lock's token: the markers hold it while the seed runs, and
// only a marker that still holds it at the end is set to "ok:<run id>"
// (lua/seeded.lua), so a loss during the seed, or another instance taking
// the seed over after the loss took the lock too, causes another seed; so
// does a failover during the seed, since the run id was read before it. The
// fallback sweep of the service (lapse.Config.SweepInterval) covers the
// seconds in between. A failover can also bring back what the old master
// had removed (a timer acknowledged, unscheduled or claimed): it is
// delivered again, and the store's guard makes that a no-op.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

// Config configures a Scheduler. Zero fields take the defaults named below.
// Every instance sharing a Prefix must use the same Shards.
type Config struct {
	// Prefix starts every key of the scheduler, so that several lapse
	// deployments (or tests) can share one Redis. It must not contain '{' or
	// '}'. Defaults to DefaultPrefix.
	Prefix string
	// Shards is how many shards (due/lease/claims/meta keys, each shard on its own
	// Cluster slot) the timers are spread over by a hash of their key. More
	// shards spread a Cluster's load over more nodes and keep each sorted set
	// smaller. Changing it for an existing Prefix strands the timers of the
	// shards that are dropped: delete the seed markers to reseed. Defaults to
	// 16; at most 1000.
	Shards int
	// Workers is how many goroutines of Run claim and deliver timers, each
	// owning a share of the shards; the handler may be called by all of them
	// at once. Defaults to 4 (at most Shards).
	Workers int
	// BatchSize is the most timers handed to the handler at once, and claimed
	// by one script call. Defaults to 200; at most 1000.
	BatchSize int
	// Lease is how long a claimed batch is held for its consumer before
	// another may take it, should the consumer die. A running handler's lease
	// is extended while Run's ctx is alive. Defaults to 10 s; at least 100 ms.
	Lease time.Duration
	// MaxSleep bounds how long a worker sleeps without looking at its shards,
	// and so how late a timer set by another instance, earlier than every
	// timer this instance knows of, can fire. Defaults to 250 ms.
	MaxSleep time.Duration
	// LossCheck is how often Run checks the seed markers to detect that Redis
	// lost its data. Defaults to 1 s.
	LossCheck time.Duration
	// Backoff is the delay before a failed batch is redelivered. Defaults to
	// timer.Backoff.
	Backoff func(attempt int) time.Duration
	// Logger receives the scheduler's logs: lost data, seeds, recovered
	// leases, Redis errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultPrefix is Config.Prefix's default.
const DefaultPrefix = "lapse"

// Limits of Config.
const (
	maxShards    = 1000
	maxBatchSize = 1000 // the claim script unpacks 2 × BatchSize arguments; Lua allows 8000
	minLease     = 100 * time.Millisecond
)

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Shards == 0 {
		c.Shards = 16
	}
	if c.Workers == 0 {
		c.Workers = min(4, max(c.Shards, 1))
	}
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
	}
	if c.MaxSleep == 0 {
		c.MaxSleep = 250 * time.Millisecond
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
		return fmt.Errorf("redis: Config.Prefix %q: %s", c.Prefix, msg)
	}
	if c.Shards < 1 || c.Shards > maxShards {
		return fmt.Errorf("redis: Config.Shards %d: want 1 to %d", c.Shards, maxShards)
	}
	if c.Workers < 1 || c.Workers > c.Shards {
		return fmt.Errorf("redis: Config.Workers %d: want 1 to Shards (%d)", c.Workers, c.Shards)
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatchSize {
		return fmt.Errorf("redis: Config.BatchSize %d: want 1 to %d", c.BatchSize, maxBatchSize)
	}
	if c.Lease < minLease {
		return fmt.Errorf("redis: Config.Lease %v: want at least %v", c.Lease, minLease)
	}
	if c.MaxSleep < time.Millisecond {
		return fmt.Errorf("redis: Config.MaxSleep %v: want at least 1ms", c.MaxSleep)
	}
	if c.LossCheck < 10*time.Millisecond {
		return fmt.Errorf("redis: Config.LossCheck %v: want at least 10ms", c.LossCheck)
	}
	return nil
}

// Scheduler is the Redis timer.Scheduler. It is safe for concurrent use; one
// Run at a time per Scheduler, any number of Schedulers (in any number of
// processes) on one Prefix.
type Scheduler struct {
	rdb  goredis.UniversalClient
	cfg  Config
	keys keys
	log  *slog.Logger

	// plans[i] is the Unix ms of the earliest due timer of shard i that this
	// instance knows of (math.MaxInt64: none). Schedule lowers it; the claim
	// script's answer sets it.
	plans []atomic.Int64
	wake  []chan struct{} // per worker, buffered(1): a plan was lowered

	id     string        // this instance, in claim ids and the seed lock's token
	claims atomic.Uint64 // claims made, for claim ids

	seedMu sync.Mutex
	seed   func(ctx context.Context) error
	// noRunID logs, once, that Redis tells no run id (seed.go).
	noRunID sync.Once

	commit committer // Schedule calls in flight, written together

	run sync.Mutex // one Run at a time
}

var (
	_ timer.Scheduler = (*Scheduler)(nil)
	_ timer.Durable   = (*Scheduler)(nil)
	_ timer.Seeder    = (*Scheduler)(nil)
)

// New returns a scheduler on rdb (a *goredis.Client or *goredis.ClusterClient;
// see ParseURL). It does not close rdb.
func New(rdb goredis.UniversalClient, cfg Config) (*Scheduler, error) {
	if rdb == nil {
		return nil, errors.New("redis: nil client")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		rdb:   rdb,
		cfg:   cfg,
		keys:  newKeys(cfg.Prefix, cfg.Shards),
		log:   cfg.Logger.With("timers", "redis", "prefix", cfg.Prefix),
		plans: make([]atomic.Int64, cfg.Shards),
		wake:  make([]chan struct{}, cfg.Workers),
		id:    randomID(),
	}
	for i := range s.wake {
		s.wake[i] = make(chan struct{}, 1)
	}
	return s, nil
}

// Ping checks that Redis answers — every master of a Cluster, since the
// shards are spread over all of them — for a readiness check: while it
// fails, timers can be neither set nor delivered.
func (s *Scheduler) Ping(ctx context.Context) error {
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		if err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return n.Ping(ctx).Err()
		}); err != nil {
			return fmt.Errorf("redis: ping: %w", err)
		}
		return nil
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Durable reports true: the timers live in Redis, not in the process. A
// Redis that loses them is detected and reseeded (see SetSeed).
func (s *Scheduler) Durable() bool { return true }

// SetSeed implements timer.Seeder: seed schedules every pending order again
// from the store. Run calls it, in the background, when it finds a shard
// without its seed marker: at the first start on an empty Redis, and after
// Redis lost its data. Without a seed function a loss goes undetected.
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

// Unschedule implements timer.Scheduler. A timer in a batch in hand is still
// delivered with it, but neither acknowledged nor requeued.
func (s *Scheduler) Unschedule(ctx context.Context, key string) error {
	k := s.keys.shards[s.keys.shard(key)]
	if err := unscheduleScript.Run(ctx, s.rdb, []string{k.due, k.meta}, key).Err(); err != nil {
		return fmt.Errorf("redis: unschedule timer %s: %w", key, err)
	}
	return nil
}

// lower lowers shard sh's plan to ms if it is later, and with nudge wakes the
// worker that owns the shard.
func (s *Scheduler) lower(sh int, ms int64, nudge bool) {
	p := &s.plans[sh]
	for {
		old := p.Load()
		if ms >= old {
			return
		}
		if p.CompareAndSwap(old, ms) {
			break
		}
	}
	if nudge {
		select {
		case s.wake[sh%len(s.wake)] <- struct{}{}:
		default:
		}
	}
}

// ceilMs is t in Unix milliseconds, rounded up: a timer's score, never before
// its due time.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli() // floored: Nanosecond is never negative
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ms++
	}
	return ms
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
