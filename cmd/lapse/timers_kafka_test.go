package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lapsehq/lapse"
	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
)

// --timers kafka://… opens Kafka timers on the brokers it names (here
// kfake, franz-go's in-process Kafka, with three brokers): the scheduler
// answers readiness checks and takes timers; a URL that is wrong in itself
// is a --timers error that does not show its password.
func TestOpenTimersKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cfg lapse.Config
	spec := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "/lapse-cli?levels=1s,1m&partitions=3&replication=3"
	opened, err := openTimers(&cfg, spec, "ignored")
	if err != nil {
		t.Fatalf("openTimers(kafka://…): %v", err)
	}
	defer opened.close()
	s, ok := cfg.Scheduler.(*kafkatimer.Scheduler)
	if !ok {
		t.Fatalf("openTimers(kafka://…) set Scheduler %T, want *kafka.Scheduler", cfg.Scheduler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if opened.ping == nil {
		t.Fatal("no readiness check for Kafka timers")
	}
	if err := opened.ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	if err := s.Schedule(ctx, "o-1", time.Now().Add(time.Hour)); err != nil {
		t.Errorf("Schedule: %v", err)
	}

	for _, spec := range []string{
		"kafka://user:kafka-pw-4669@/lapse",
		"kafka://127.0.0.1:1/lapse?levels=1s,1s",
		"kafka://127.0.0.1:1/lapse?levls=1s",
	} {
		_, err := openTimers(&lapse.Config{}, spec, "lapse")
		if err == nil || !strings.HasPrefix(err.Error(), "--timers") {
			t.Errorf("openTimers(%s): %v, want a --timers error", spec, err)
		} else if strings.Contains(err.Error(), "kafka-pw-4669") {
			t.Errorf("openTimers: the error shows the password: %v", err)
		}
	}
}
