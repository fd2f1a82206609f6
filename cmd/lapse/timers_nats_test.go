package main

import (
	"context"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/lapsehq/lapse"
	natstimer "github.com/lapsehq/lapse/timer/nats"
)

// --timers nats://… opens NATS JetStream timers: on an embedded nats-server
// with JetStream, the scheduler is set and answers readiness checks; a URL
// that is refused says why without showing its password.
func TestOpenTimersNATS(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready within 10s")
	}

	var cfg lapse.Config
	opened, err := openTimers(&cfg, srv.ClientURL()+"?prefix=clitest&stream=clitest", "ignored")
	if err != nil {
		t.Fatalf("openTimers(nats://…): %v", err)
	}
	defer opened.close()
	s, ok := cfg.Scheduler.(*natstimer.Scheduler)
	if !ok {
		t.Fatalf("openTimers(nats://…) set Scheduler %T, want *nats.Scheduler", cfg.Scheduler)
	}
	if opened.ping == nil {
		t.Fatal("no readiness check for NATS timers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := opened.ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	if err := s.Schedule(ctx, "o-1", time.Now().Add(time.Hour)); err != nil {
		t.Errorf("Schedule: %v", err)
	}

	for _, spec := range []string{
		"nats://lapse:nats-pw-4669@" + freePort(t), // nobody listens there
		"nats://lapse:nats-pw-4669@127.0.0.1:4222?prefx=typo",
	} {
		_, err := openTimers(&lapse.Config{}, spec, "lapse")
		if err == nil || !strings.HasPrefix(err.Error(), "--timers") {
			t.Errorf("openTimers(%s): %v, want a --timers error", spec, err)
		} else if strings.Contains(err.Error(), "nats-pw-4669") {
			t.Errorf("openTimers: the error shows the password: %v", err)
		}
	}
}
