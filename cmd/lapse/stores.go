package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/sqlite"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
	"github.com/lapsehq/lapse/timer/memory"
	natstimer "github.com/lapsehq/lapse/timer/nats"
	"github.com/lapsehq/lapse/timer/redis"
)

// storeUsage is the help of every --store flag: the stores lapse opens.
const storeUsage = "store URL: sqlite://path (a file, created if missing; sqlite://:memory: for a throwaway one), " +
	"postgres://user:pass@host:5432/db?sslmode=… (or postgresql://) or mysql://user:pass@host:3306/db"

// checkStoreURL says what is wrong with a --store URL itself, without
// opening anything: a usageError.
func checkStoreURL(url string) error {
	scheme, _, _ := strings.Cut(url, "://")
	var err error
	switch scheme {
	case "sqlite":
		_, err = sqlite.ParseURL(url)
	case "postgres", "postgresql":
		if _, e := neturl.Parse(url); e != nil {
			err = errors.New("malformed URL") // url.Parse's error repeats the URL, password included
		}
	case "mysql":
		_, err = mysql.ParseURL(url)
	default:
		return badFlag(fmt.Errorf("--store %q: unsupported scheme %q (want sqlite://path, postgres://… or mysql://…)", redact.URL(url), scheme))
	}
	if err != nil {
		return badFlag(fmt.Errorf("--store %s: %w", redact.URL(url), err))
	}
	return nil
}

// openStore opens the store a URL names; it does not migrate. A URL wrong
// in itself is a usageError.
func openStore(ctx context.Context, url string) (store.Store, error) {
	if err := checkStoreURL(url); err != nil {
		return nil, err
	}
	switch scheme, _, _ := strings.Cut(url, "://"); scheme {
	case "sqlite":
		path, err := sqlite.ParseURL(url)
		if err != nil {
			return nil, err
		}
		return sqlite.Open(ctx, sqlite.Config{Path: path})
	case "postgres", "postgresql":
		return postgres.Open(ctx, postgres.Config{URL: url})
	default:
		return mysql.Open(ctx, mysql.Config{URL: url})
	}
}

// openExistingStore is openStore for a command that only reads (audit): a
// SQLite file that does not exist is an error, where opening it would create
// an empty database (a typo in the path would then audit clean), and an
// existing one is opened read-only (sqlite.Config.ReadOnly).
func openExistingStore(ctx context.Context, url string) (store.Store, error) {
	st, err := openExistingStoreUnchecked(ctx, url)
	if err != nil {
		return nil, err
	}
	return checkMigrated(ctx, url, st)
}

// checkMigrated returns st if its database holds the schema this lapse
// expects, and otherwise closes it and says to run lapse migrate: a command
// that does not migrate would fail on the first table that is not there
// (an earlier lapse's unprefixed tables, or none), with a message that says
// less.
func checkMigrated(ctx context.Context, url string, st store.Store) (store.Store, error) {
	c, ok := st.(store.SchemaChecker)
	if !ok {
		return st, nil
	}
	if err := c.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("%s: %w", redact.URL(url), err)
	}
	return st, nil
}

func openExistingStoreUnchecked(ctx context.Context, url string) (store.Store, error) {
	if strings.HasPrefix(url, "sqlite://") {
		path, err := sqlite.ParseURL(url)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--store %s: no such database file (it is not created for an audit: check the path, or create it with lapse migrate)", redact.URL(url))
		} else if err != nil {
			return nil, fmt.Errorf("--store %s: %w", redact.URL(url), err)
		}
		return sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true})
	}
	return openStore(ctx, url)
}

// setTimers configures the timer backend a --timers value names, for a
// short-lived command that lets the process exit release its connections.
func setTimers(cfg *lapse.Config, spec string) error {
	_, err := openTimers(cfg, spec, redis.DefaultPrefix)
	return err
}

// openedTimers is a timer backend openTimers configured.
type openedTimers struct {
	// close releases its connections (a no-op for in-process timers).
	close func() error
	// ping checks that a backend outside the process answers, for
	// readiness; nil when there is none beyond the store.
	ping func(context.Context) error
	// claim fences a backend shared between deployments by the
	// deployment's identity (claimTimers); nil when it needs none.
	claim func(ctx context.Context, deployment string) error
}

// claimTimers fences the timer backend by deployment, once the store is
// open and migrated: RabbitMQ timers record the store's identity at their
// prefix, and a second deployment on the same prefix is refused here, at
// start, instead of taking the first one's timers.
func claimTimers(ctx context.Context, opened openedTimers, st store.Store) error {
	id, ok := st.(store.Identified)
	if opened.claim == nil || !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	deployment, err := id.Identity(ctx)
	if err != nil {
		return fmt.Errorf("--timers: the deployment's identity: %w", err)
	}
	if err := opened.claim(ctx, deployment); err != nil {
		return fmt.Errorf("--timers: %w", err)
	}
	return nil
}

// checkTimers says what is wrong with a --timers value itself, without
// connecting anywhere: a usageError.
func checkTimers(spec string) error {
	scheme, _, _ := strings.Cut(spec, "://")
	var err error
	switch {
	case spec == "memory", spec == "sql":
	case redisTimers(scheme):
		var client interface{ Close() error }
		if client, err = redis.ParseURL(spec); err == nil {
			_ = client.Close() // never connected: parsing only
		}
	case scheme == "nats":
		_, _, _, err = natstimer.ParseURL(spec)
	case scheme == "amqp" || scheme == "amqps":
		_, _, err = amqptimer.ParseURL(spec)
	case scheme == "kafka":
		_, err = kafkatimer.ParseURL(spec)
	default:
		return badFlag(fmt.Errorf("--timers %q: unsupported (want memory, sql, redis://host:6379/0, redis-cluster://h1:7000,h2:7001,…, redis-sentinel://h1:26379,h2:26379/0?master=NAME, nats://host:4222, amqp://user:password@host:5672/vhost or kafka://host:9092,host:9092/prefix)", redact.URL(spec)))
	}
	if err != nil {
		return badFlag(fmt.Errorf("--timers: %w", err))
	}
	return nil
}

// redisTimers reports whether lapse serve takes a --timers URL of this
// scheme for Redis timers: standalone, Sentinel-managed or Cluster.
func redisTimers(scheme string) bool {
	switch scheme {
	case "redis", "rediss", "unix", "redis-cluster", "rediss-cluster", "redis-sentinel", "rediss-sentinel":
		return true
	}
	return false
}

// openTimers configures the timer backend a --timers value names; Redis
// timers keep their keys under prefix. A value wrong in itself is a
// usageError.
func openTimers(cfg *lapse.Config, spec, prefix string) (openedTimers, error) {
	opened := openedTimers{close: func() error { return nil }}
	if err := checkTimers(spec); err != nil {
		return opened, err
	}
	scheme, _, _ := strings.Cut(spec, "://")
	switch {
	case spec == "memory":
		cfg.Scheduler = memory.New(memory.Config{Gather: memory.DefaultGather})
	case spec == "sql":
		cfg.PollStore = true
	case redisTimers(scheme):
		client, err := redis.ParseURL(spec)
		if err != nil {
			return opened, fmt.Errorf("--timers: %w", err)
		}
		s, err := redis.New(client, redis.Config{Prefix: prefix, Logger: cfg.Logger})
		if err != nil {
			client.Close()
			return opened, fmt.Errorf("--timers: %w", err)
		}
		cfg.Scheduler = s
		opened.close, opened.ping = client.Close, s.Ping
	case scheme == "nats":
		// Its prefix and stream come from the URL (?prefix=&stream=), not
		// from the Redis prefix.
		s, err := natstimer.Open(spec, natstimer.Config{Logger: cfg.Logger})
		if err != nil {
			return opened, fmt.Errorf("--timers: %w", err)
		}
		cfg.Scheduler = s
		opened.close, opened.ping = s.Close, s.Ping
	case scheme == "amqp" || scheme == "amqps":
		// Its prefix, base, levels, queue type and batch size come from
		// the URL (?prefix=&base=&levels=&queue_type=&batch=), not from
		// the Redis prefix. A broker that does not answer within 15 s
		// fails the start, as a Redis that does not would.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// Most timers are due the default payment window from when they
		// are set: those take the fast path, one queue of that delay.
		acfg := amqptimer.Config{Logger: cfg.Logger}
		if cfg.DefaultTimeout > 0 {
			acfg.PaymentWindow = cfg.DefaultTimeout + cfg.Grace
		}
		s, err := amqptimer.Open(ctx, spec, acfg)
		if err != nil {
			return opened, fmt.Errorf("--timers: %w", err)
		}
		cfg.Scheduler = s
		opened.close, opened.ping, opened.claim = s.Close, s.Ping, s.Claim
	case scheme == "kafka":
		// Its brokers, prefix, levels and topics' partitions and
		// replication come from the URL (kafka://h1:9092,h2:9092/prefix?
		// levels=&partitions=&replication=…). Brokers that do not answer
		// within 15 s fail the start.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		s, err := kafkatimer.Open(ctx, spec, kafkatimer.Config{Logger: cfg.Logger})
		if err != nil {
			return opened, fmt.Errorf("--timers: %w", err)
		}
		cfg.Scheduler = s
		opened.close, opened.ping = s.Close, s.Ping
	default:
		return opened, fmt.Errorf("--timers %q: unsupported (want memory, sql, redis://host:6379/0, redis-cluster://h1:7000,h2:7001,…, redis-sentinel://h1:26379,h2:26379/0?master=NAME, nats://host:4222, amqp://user:password@host:5672/vhost or kafka://host:9092,host:9092/prefix)", redact.URL(spec))
	}
	return opened, nil
}

// readyStore is the store as GET /readyz sees it. httpapi answers /readyz
// by pinging the service's store; lapse serve gives the service this
// wrapper, whose Ping asks the timer backend too, so that an instance whose
// Redis does not answer — it would take orders it cannot cancel on time —
// says it is not ready, and a load balancer sends the orders elsewhere.
type readyStore struct {
	store.Store
	timers func(context.Context) error
}

// readyTimeout bounds the timer backend's answer to a readiness check: a
// Redis that does not answer at all would otherwise hold /readyz for the
// client's whole dial timeout.
const readyTimeout = 2 * time.Second

// Ping implements store.Store: the store answers, and so does the timer backend.
func (s readyStore) Ping(ctx context.Context) error {
	if err := s.Store.Ping(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.timers(ctx); err != nil {
		return fmt.Errorf("timer backend: %w", err)
	}
	return nil
}
