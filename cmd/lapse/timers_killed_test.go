package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// twoInstancesOneKilled runs two lapse serve on one PostgreSQL with timers,
// kills one (SIGKILL) while deadlines fall due, and checks that every order
// is cancelled exactly once, none early, and that the audit holds.
func twoInstancesOneKilled(t *testing.T, timers string, orders int, within time.Duration) {
	t.Helper()
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	var servers []*server
	for range 2 {
		servers = append(servers, startServe(t, nil, "--store", storeURL, "--timers", timers, "--grace", "0s",
			"--sweep-interval", "0", "--no-migrate"))
	}
	must(servers[0].api().SetStock(t.Context(), "hot", 1000))(t)
	first := time.Now().Add(placeAhead + 2*time.Second)
	placeOrders(t, servers, "k", orders, first, 3*time.Second)
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(first.Add(1500 * time.Millisecond))) // half the deadlines have passed
	if err := servers[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-servers[1].done
	late := settled(t, servers[0], within)
	if len(late) != orders {
		t.Fatalf("%d orders cancelled for timeout, want %d", len(late), orders)
	}
	for _, l := range late {
		if l < 0 {
			t.Fatalf("an order was cancelled %s before its deadline", -l)
		}
	}
	servers[0].stop()
	out, code := lapseCmd(t, nil, "audit", "--store", storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
}

// RabbitMQ timers: the killed instance's unacknowledged deliveries go back
// to the ready queue when its connection drops, and the survivor cancels
// them.
func TestTwoInstancesOnAMQPOneKilled(t *testing.T) {
	t.Parallel()
	broker := os.Getenv("LAPSE_TEST_AMQP")
	if broker == "" {
		t.Skip("set LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ to run")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lapsetest.killed." + hex.EncodeToString(b)
	const levels = 8 // 100 ms × 255: 25 s, enough for these deadlines
	t.Cleanup(func() { deleteAMQPTimers(t, broker, prefix, levels) })
	twoInstancesOneKilled(t, fmt.Sprintf("%s?prefix=%s&levels=%d", broker, prefix, levels), 200, 40*time.Second)
}

// NATS timers on an embedded nats-server 2.15 (message schedules need
// 2.12+): the killed instance's fired timers are delivered again after the
// consumer's AckWait.
func TestTwoInstancesOnNATSOneKilled(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready in 10 s")
	}
	t.Cleanup(srv.Shutdown)
	twoInstancesOneKilled(t, srv.ClientURL(), 200, 40*time.Second)
}
