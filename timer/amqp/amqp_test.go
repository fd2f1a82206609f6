package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/timer"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
	"github.com/lapsehq/lapse/timer/timertest"
)

// The broker the tests run against. CI sets it and fails on a skip:
//
//	rabbitmq-server -detached
//	LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ go test -race ./timer/amqp/
const (
	env     = "LAPSE_TEST_AMQP"
	example = "amqp://guest:guest@127.0.0.1:5672/"
)

// brokerURL returns the broker's URL, skipping t when the variable is unset
// and failing it when the broker does not answer.
func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("set %s=%s to run", env, example)
	}
	return u
}

// admin returns a connection straight to the broker, closed when t ends:
// for looking at and damaging the queues apart from the code under test.
func admin(t testing.TB) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// newPrefix returns a prefix of t's own; its exchanges and queues (of
// levels levels) are deleted when t ends.
func newPrefix(t testing.TB, levels int) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lapsetest." + hex.EncodeToString(b)
	conn := admin(t)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("delete the topology of %s: %v", prefix, err)
			return
		}
		defer ch.Close()
		if err := amqptimer.DeleteTopologyOn(ch, prefix, levels); err != nil {
			t.Errorf("delete the topology of %s: %v", prefix, err)
		}
	})
	return prefix
}

// discard is the tests' logger.
var discard = slog.New(slog.DiscardHandler)

// mustOpen opens a scheduler on the test broker with cfg (its Prefix set by
// the caller), closed when t ends. Its logs are discarded unless cfg has a
// Logger.
func mustOpen(t testing.TB, cfg amqptimer.Config) *amqptimer.Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := amqptimer.Open(ctx, brokerURL(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the timertest suite on classic queues with the
// default Base (100 ms). It is not parallel with the other tests of the
// package: it runs first, alone, so that the CPU-heavy ones do not slow its
// timing-sensitive subtests on a small machine.
//
// Features: durable (persistent messages in durable queues) and shared by
// any number of consumers; no Unschedule (a message cannot be taken out of a
// queue); no Lease: a consumer that hangs holds its batch until its
// connection closes (or RabbitMQ's consumer_timeout, 30 min by default,
// closes its channel), so the killed-consumer test does not apply.
func TestConformance(t *testing.T) {
	exercise(t, amqptimer.QueueClassic, 3000)
}

// exercise runs the suite with queue type qt; every instance a test asks
// for has a connection of its own and shares that test's prefix.
func exercise(t *testing.T, qt string, largeN int) {
	exerciseWith(t, amqptimer.Config{QueueType: qt, BatchSize: 200}, largeN)
}

// exerciseWith runs the suite with cfg (its Prefix set per test).
func exerciseWith(t *testing.T, cfg amqptimer.Config, largeN int) {
	var (
		mu       sync.Mutex
		prefixes = map[*testing.T]string{}
	)
	timertest.Exercise(t, timertest.Features{
		Durable: true, MultiConsumer: true, CanUnschedule: false,
		BatchSize: 200, LargeN: largeN,
	}, func(t *testing.T) timer.Scheduler {
		mu.Lock()
		prefix, ok := prefixes[t]
		if !ok {
			prefix = fixedPrefix(t, cfg.Fixed...)
			prefixes[t] = prefix
		}
		mu.Unlock()
		c := cfg
		c.Prefix = prefix
		return mustOpen(t, c)
	})
}

// recorder records the deliveries of a test's Run loops and wakes waiters.
type recorder struct {
	mu      sync.Mutex
	got     map[string][]delivery
	changed chan struct{} // closed and replaced at every batch
	next    timer.Handler
}

type delivery struct {
	timer.Timer
	At       time.Time
	Consumer int
}

func newRecorder(next timer.Handler) *recorder {
	return &recorder{got: map[string][]delivery{}, changed: make(chan struct{}), next: next}
}

// handler is the recorder's timer.Handler for consumer c.
func (r *recorder) handler(c int) timer.Handler {
	return func(ctx context.Context, due []timer.Timer) error {
		// The wall clock, as the scheduler compares a timer's due time (a
		// due time decoded from a message has no monotonic reading): a
		// delivery compared by the monotonic clock to a due time taken
		// with one looked early by the wall clock's slew (40 µs in CI).
		at := time.Now().Round(0)
		r.mu.Lock()
		for _, tm := range due {
			r.got[tm.Key] = append(r.got[tm.Key], delivery{Timer: tm, At: at, Consumer: c})
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		if r.next == nil {
			return nil
		}
		return r.next(ctx, due)
	}
}

func (r *recorder) deliveries(key string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[key])
}

// waitFor waits until cond (called under r.mu) holds, failing t after timeout.
func (r *recorder) waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, changed := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}

// waitDelivered waits until every key was delivered at least once.
func (r *recorder) waitDelivered(t testing.TB, timeout time.Duration, keys ...string) {
	t.Helper()
	var missing []string
	r.waitFor(t, fmt.Sprintf("%d timers delivered", len(keys)), timeout, func() bool {
		missing = missing[:0]
		for _, k := range keys {
			if len(r.got[k]) == 0 {
				missing = append(missing, k)
			}
		}
		return len(missing) == 0
	})
}

// run is timertest.Run for this package's Scheduler.
func run(t testing.TB, s *amqptimer.Scheduler, h timer.Handler) (stop func()) {
	return timertest.Run(t, s, h)
}

// depth returns how many messages queue holds, by a passive declaration.
func depth(t testing.TB, conn *amqp091.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Messages
}
