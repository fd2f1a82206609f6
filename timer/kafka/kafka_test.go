// The Kafka timer tests run against kfake, franz-go's in-process Kafka, with
// three brokers: no Kafka broker runs on the machine lapse is developed on.
package kafka_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lapsehq/lapse/timer"
	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
	"github.com/lapsehq/lapse/timer/timertest"
)

// testLevels are short levels, so that the suite's timers (due within
// seconds) walk the ladder instead of going straight to the due topic.
var testLevels = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

// newCluster starts a three-broker kfake cluster, closed when t ends.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// testConfig is the configuration of the tests' schedulers on c.
func testConfig(c *kfake.Cluster) kafkatimer.Config {
	return kafkatimer.Config{
		Brokers: c.ListenAddrs(), Prefix: "lapse-test", Levels: testLevels, Lead: 50 * time.Millisecond,
		BatchSize: 200, Partitions: 3, Replication: 3, SessionTimeout: 6 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// mustNew returns a scheduler on cfg, closed when t ends.
func mustNew(t testing.TB, cfg kafkatimer.Config) *kafkatimer.Scheduler {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := kafkatimer.New(ctx, cfg)
	if err != nil {
		t.Fatalf("kafka timers: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the timertest suite, each test on a cluster of its
// own. Features: durable (records in topics) and shared by any number of
// consumers (consumer groups); no Unschedule (a record cannot be taken out
// of a topic); no Lease: a consumer that hangs holds its partitions while
// its client heartbeats, so the killed-consumer test does not apply.
func TestConformance(t *testing.T) {
	var (
		mu       sync.Mutex
		clusters = map[*testing.T]*kfake.Cluster{}
	)
	timertest.Exercise(t, timertest.Features{
		Durable: true, MultiConsumer: true, CanUnschedule: false,
		BatchSize: 200, LargeN: 2000,
	}, func(t *testing.T) timer.Scheduler {
		mu.Lock()
		c, ok := clusters[t]
		if !ok {
			c = newCluster(t)
			clusters[t] = c
		}
		mu.Unlock()
		return mustNew(t, testConfig(c))
	})
}
