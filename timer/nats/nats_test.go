package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
	natstimer "github.com/lapsehq/lapse/timer/nats"
	"github.com/lapsehq/lapse/timer/timertest"
)

// serverURL is the embedded nats-server every test of the package shares;
// each test keeps its timers in a stream of its own (newPrefix).
var serverURL string

// TestMain runs a real nats-server, from its Go module, inside the test
// process: JetStream on, file storage in a temporary directory, a free port
// on the loopback interface.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "lapse-nats-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		srv, err := startServer(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Shutdown()
		serverURL = srv.ClientURL()
		return m.Run()
	}())
}

// startServer starts an embedded nats-server with JetStream storing under dir.
func startServer(dir string) (*server.Server, error) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats-server: not ready within 10s")
	}
	return srv, nil
}

// connect returns a connection to the embedded server, closed when t ends.
func connect(t testing.TB) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(serverURL)
	if err != nil {
		t.Fatalf("connect to the embedded nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newPrefix returns a subject prefix of t's own; its stream is deleted when
// t ends.
func newPrefix(t testing.TB) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lt" + hex.EncodeToString(b)
	t.Cleanup(func() {
		nc, err := natsgo.Connect(serverURL)
		if err != nil {
			t.Errorf("delete the stream of %s: %v", prefix, err)
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, prefix+"_timers"); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete the stream of %s: %v", prefix, err)
		}
	})
	return prefix
}

// mustNew returns a scheduler on a connection of its own.
func mustNew(t testing.TB, cfg natstimer.Config) *natstimer.Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := natstimer.New(connect(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the timertest suite on the embedded server. Every
// instance a test asks for has a connection of its own and shares that
// test's stream.
func TestConformance(t *testing.T) {
	const ackWait = time.Second
	var (
		mu       sync.Mutex
		prefixes = map[*testing.T]string{}
	)
	timertest.Exercise(t, timertest.Features{
		Durable: true, MultiConsumer: true, CanUnschedule: true,
		Lease: ackWait, BatchSize: 200, LargeN: 10_000,
	}, func(t *testing.T) timer.Scheduler {
		mu.Lock()
		prefix, ok := prefixes[t]
		if !ok {
			prefix = newPrefix(t)
			prefixes[t] = prefix
		}
		mu.Unlock()
		return mustNew(t, natstimer.Config{Prefix: prefix, AckWait: ackWait, BatchSize: 200})
	})
}

// recorder records the deliveries of a test's Run loops and wakes waiters.
type recorder struct {
	mu      sync.Mutex
	got     map[string][]delivery
	changed chan struct{} // closed and replaced at every batch
	next    func(ctx context.Context, due []timer.Timer) error
}

type delivery struct {
	timer.Timer
	At       time.Time
	Consumer int
}

func newRecorder(next func(context.Context, []timer.Timer) error) *recorder {
	return &recorder{got: map[string][]delivery{}, changed: make(chan struct{}), next: next}
}

// handler is the recorder's timer.Handler for consumer c.
func (r *recorder) handler(c int) timer.Handler {
	return func(ctx context.Context, due []timer.Timer) error {
		at := time.Now()
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
func (r *recorder) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
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
func (r *recorder) waitDelivered(t *testing.T, timeout time.Duration, keys ...string) {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("%d timers delivered", len(keys)), timeout, func() bool {
		for _, k := range keys {
			if len(r.got[k]) == 0 {
				return false
			}
		}
		return true
	})
}

// run is timertest.Run for this package's Scheduler.
func run(t *testing.T, s *natstimer.Scheduler, h timer.Handler) (stop func()) {
	return timertest.Run(t, s, h)
}

// stream returns a JetStream handle on the stream of prefix.
func stream(t *testing.T, prefix string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), prefix+"_timers")
	if err != nil {
		t.Fatalf("stream of %s: %v", prefix, err)
	}
	return st
}

// consumerInfo returns the shared consumer's state.
func consumerInfo(t *testing.T, prefix string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := context.Background()
	c, err := stream(t, prefix).Consumer(ctx, "lapse-timers")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
