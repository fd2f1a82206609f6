package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// --timers amqp://… opens RabbitMQ timers on the broker LAPSE_TEST_AMQP
// names (CI sets it; unset, the test is skipped): the scheduler is set with
// the URL's parameters and answers readiness checks; a URL that is refused
// says why without showing its password.
func TestOpenTimersAMQP(t *testing.T) {
	t.Parallel()
	broker := os.Getenv("LAPSE_TEST_AMQP")
	if broker == "" {
		t.Skip("set LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ to run")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "lapsetest.cli." + hex.EncodeToString(b)
	const levels = 2
	t.Cleanup(func() { deleteAMQPTimers(t, broker, prefix, levels) })

	// The default payment window (15 m + 60 s) is a fixed delay: its
	// queue, <prefix>.fixed.<TTL ms> (the window less the lead and base),
	// is declared, and a timer of the window takes it.
	cfg := lapse.Config{DefaultTimeout: 15 * time.Minute, Grace: time.Minute}
	fixedQueue := fmt.Sprintf("%s.fixed.%d", prefix, (16*time.Minute - amqptimer.DefaultLead - 50*time.Millisecond).Milliseconds())
	t.Cleanup(func() { deleteAMQPQueue(t, broker, fixedQueue) })
	spec := fmt.Sprintf("%s?prefix=%s&levels=%d&base=50ms&batch=10&heartbeat=5", broker, prefix, levels)
	opened, err := openTimers(&cfg, spec, "ignored")
	if err != nil {
		t.Fatalf("openTimers(amqp://…): %v", err)
	}
	defer opened.close()
	s, ok := cfg.Scheduler.(*amqptimer.Scheduler)
	if !ok {
		t.Fatalf("openTimers(amqp://…) set Scheduler %T, want *amqp.Scheduler", cfg.Scheduler)
	}
	if got, want := s.MaxDelay(), 150*time.Millisecond; got != want {
		t.Errorf("MaxDelay %v, want %v (the URL's 2 levels of 50 ms)", got, want)
	}
	if opened.ping == nil {
		t.Fatal("no readiness check for RabbitMQ timers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := opened.ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	if err := s.Schedule(ctx, "o-1", time.Now().Add(time.Hour)); err != nil {
		t.Errorf("Schedule: %v", err)
	}
	if err := s.Schedule(ctx, "o-2", time.Now().Add(16*time.Minute)); err != nil {
		t.Errorf("Schedule: %v", err)
	}
	if st := s.Stats(); st.Fixed != 1 {
		t.Errorf("%d timers took the fast path, want the one due the payment window from now", st.Fixed)
	}

	u, err := url.Parse(broker)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("lapse-nobody", "amqp-pw-4669") // refused at once: no retries
	for _, spec := range []string{
		u.String(),
		u.String() + "?prefx=typo",
	} {
		_, err := openTimers(&lapse.Config{}, spec, "lapse")
		if err == nil || !strings.HasPrefix(err.Error(), "--timers") {
			t.Errorf("openTimers(%s): %v, want a --timers error", spec, err)
		} else if strings.Contains(err.Error(), "amqp-pw-4669") {
			t.Errorf("openTimers: the error shows the password: %v", err)
		}
	}
}

// deleteAMQPTimers deletes the exchanges and queues of RabbitMQ timers with
// prefix and levels (timer/amqp's names).
func deleteAMQPTimers(t *testing.T, broker, prefix string, levels int) {
	conn, err := amqp091.Dial(broker)
	if err != nil {
		t.Errorf("delete the timers of %s: %v", prefix, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete the timers of %s: %v", prefix, err)
		return
	}
	defer ch.Close()
	for k := range levels {
		name := fmt.Sprintf("%s.delay.%02d", prefix, k)
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
		if err := ch.ExchangeDelete(name, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", name, err)
		}
	}
	for _, q := range []string{".ready", ".seeded", ".seed-lock", ".deployment", ".deployment-lock"} {
		if _, err := ch.QueueDelete(prefix+q, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", prefix+q, err)
		}
	}
	if err := ch.ExchangeDelete(prefix+".ready", false, false); err != nil {
		t.Errorf("delete exchange %s.ready: %v", prefix, err)
	}
}

// deleteAMQPQueue deletes queue q.
func deleteAMQPQueue(t *testing.T, broker, q string) {
	conn, err := amqp091.Dial(broker)
	if err != nil {
		t.Errorf("delete queue %s: %v", q, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete queue %s: %v", q, err)
		return
	}
	defer ch.Close()
	if n, err := ch.QueueDelete(q, false, false, false); err != nil || n != 1 {
		t.Errorf("delete queue %s: %d timers in it, %v; want the one", q, n, err)
	}
}
