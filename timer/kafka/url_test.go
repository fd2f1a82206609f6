package kafka_test

import (
	"strings"
	"testing"
	"time"

	kafkatimer "github.com/lapsehq/lapse/timer/kafka"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := kafkatimer.ParseURL("kafka://127.0.0.1:9092,127.0.0.1:9093/lapse?levels=1s,1m,1h&lead=300ms&batch=500&partitions=24&replication=3&session_timeout=15s&loss_check=1m&client_id=shop")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Brokers, ","); got != "127.0.0.1:9092,127.0.0.1:9093" {
		t.Errorf("Brokers %s", got)
	}
	if cfg.Prefix != "lapse" || cfg.Lead != 300*time.Millisecond || cfg.BatchSize != 500 || cfg.Partitions != 24 ||
		cfg.Replication != 3 || cfg.SessionTimeout != 15*time.Second || cfg.LossCheck != time.Minute || cfg.ClientID != "shop" {
		t.Errorf("parsed %+v", cfg)
	}
	if want := []time.Duration{time.Second, time.Minute, time.Hour}; len(cfg.Levels) != 3 || cfg.Levels[0] != want[0] || cfg.Levels[2] != want[2] {
		t.Errorf("Levels %v, want %v", cfg.Levels, want)
	}

	cfg, err = kafkatimer.ParseURL("kafka://broker?lead=0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prefix != kafkatimer.DefaultPrefix || cfg.Brokers[0] != "broker:9092" || cfg.Lead >= 0 {
		t.Errorf("defaults: %+v", cfg)
	}

	for _, tt := range []struct{ url, want string }{
		{"kafka:///lapse", "names no broker"},
		{"kafka://", "names no broker"},
		{"kafka://user:secret@/lapse", "names no broker"},
		{"kafka://h:9092/lapse?levels=10s,1s", "want increasing durations"},
		{"kafka://h:9092/lapse?levels=1s,x", `"x" is not a duration`},
		{"kafka://h:9092/lapse?levels=1500us", "whole number of milliseconds"},
		{"kafka://h:9092/lapse?levels=", "not a duration"},
		{"kafka://h:9092/lapse?replication=0", "replication"},
		{"kafka://h:9092/lapse?partitions=x", "partitions"},
		{"kafka://h:9092/lapse?timeout=1s", "unknown"},
		{"kafka://h:9092/lapse?levels=1s&levels=2s", "given 2 times"},
		{"kafka://h:9092/a/b", "one path segment"},
		{"kafka://h:9092/bad*prefix", "Kafka allows only"},
		{"kafka://h:99999/lapse", "port"},
		{"amqp://h/lapse", "want a kafka://"},
		{"kafka://user:secret@h:9092/lapse", "no ?sasl="},
	} {
		_, err := kafkatimer.ParseURL(tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseURL(%q): %v, want an error saying %q", tt.url, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q): the error shows the password: %v", tt.url, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "kafka timers: ") {
			t.Errorf("ParseURL(%q): %v, want it to start with \"kafka timers: \"", tt.url, err)
		}
	}
}
