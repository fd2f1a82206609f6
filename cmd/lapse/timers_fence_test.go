package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// Two deployments (two stores) on one RabbitMQ timer prefix would take each
// other's timers: the second refuses to start, naming the prefix and the
// deployment that owns it. Two instances of one deployment share the
// prefix as before.
func TestServeRefusesASecondDeploymentOnOneAMQPTimerPrefix(t *testing.T) {
	t.Parallel()
	broker := os.Getenv("LAPSE_TEST_AMQP")
	if broker == "" {
		t.Skip("set LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ to run")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lapsetest.fence." + hex.EncodeToString(b)
	t.Cleanup(func() { deleteAMQPTimers(t, broker, prefix, amqptimer.DefaultLevels) })
	timers := broker + "?prefix=" + prefix
	storeA, storeB := postgresURL(t), postgresURL(t)
	for _, u := range []string{storeA, storeB} {
		if out, code := lapseCmd(t, nil, "migrate", "--store", u); code != 0 {
			t.Fatalf("migrate: %s", out)
		}
	}
	a1 := startServe(t, nil, "--store", storeA, "--timers", timers, "--no-migrate")
	a2 := startServe(t, nil, "--store", storeA, "--timers", timers, "--no-migrate")
	out, code := lapseRun(t, 60*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--store", storeB, "--timers", timers, "--no-migrate")
	if code <= 0 || !strings.Contains(out, prefix) || !strings.Contains(out, "deployment") || strings.Contains(out, "lapse serving") {
		t.Fatalf("a second deployment on the prefix: exit %d, want a refusal at start naming the prefix and the other deployment:\n%s", code, out)
	}
	a1.stop()
	a2.stop()
}
