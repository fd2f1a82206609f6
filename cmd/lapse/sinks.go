package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
	natssink "github.com/lapsehq/lapse/outbox/nats"
	"github.com/lapsehq/lapse/outbox/rabbitmq"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/redact"
)

// listFlag is a repeatable string flag (--sink a --sink b). From the
// environment (LAPSE_SINK) it takes several values separated by spaces.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }

func (l *listFlag) Set(v string) error {
	for _, f := range strings.Fields(v) {
		*l = append(*l, f)
	}
	return nil
}

// sinkFlags are the flags of the outbox relay and its sinks.
type sinkFlags struct {
	sinks         listFlag
	format        *string
	webhookSecret secretFlag
	webhookInsec  *bool
	webhookMaxAge *time.Duration
	retention     *time.Duration
	outboxLease   *time.Duration
	outboxBatch   *int
	outboxWorkers *int
	outboxYield   *time.Duration
}

func addSinkFlags(fs *flagSet) *sinkFlags {
	f := &sinkFlags{}
	fs.Var(&f.sinks, "sink", "where events go; repeatable, each with its own progress: log (the default), https://… (a Standard Webhooks endpoint; http:// only on loopback or with --webhook-insecure), "+
		"amqp://user:pass@host:5672/vhost?exchange=lapse.events, kafka://host:9092/topic, nats://host:4222/prefix")
	f.format = fs.Enum("event-format", "json", "json (lapse's envelope) or cloudevents (CloudEvents 1.0: structured on webhooks, binary mode on AMQP, Kafka and NATS)", "json", "cloudevents")
	f.webhookSecret = addSecretFlag(fs, "webhook-secret", "the webhook signing secret, whsec_…; several separated by spaces while rotating (each request carries one signature per secret)")
	f.webhookInsec = fs.Bool("webhook-insecure", false, "allow http:// webhook endpoints that are not on loopback (events then travel unencrypted)")
	f.webhookMaxAge = fs.Duration("webhook-max-age", 72*time.Hour, positive, "how long a webhook endpoint may refuse an event before the event is dead for it")
	f.retention = fs.Duration("outbox-retention", 7*24*time.Hour, span{zero: "keep forever"}, "how long events published to every sink are kept before they are deleted")
	f.outboxLease = fs.Duration("outbox-lease", 30*time.Second, span{min: time.Second}, "how long a relay's claim on a batch of events lasts; a relay that dies holding one delays those events by this much")
	f.outboxBatch = fs.Int("outbox-batch", 500, "the most events a relay claims at once per sink (1 to 10000)")
	f.outboxWorkers = fs.Int("outbox-workers", 3, "batches per sink one instance has in flight at once (1 to 64): one is claimed or settled while another is published")
	f.outboxYield = fs.Duration("outbox-yield", time.Second, span{zero: "off", min: 10 * time.Millisecond}, "while this instance cancels a burst of due orders (cancel batches coming back full), each relay worker holds its next claim back for up to this long, then claims one batch: the cancels get the database first, events are delayed, never stopped")
	return f
}

// config is the relay's configuration from the flags.
func (f *sinkFlags) config(logger *slog.Logger) (outbox.Config, error) {
	if *f.outboxBatch < 1 || *f.outboxBatch > 10000 {
		return outbox.Config{}, fmt.Errorf("--outbox-batch %d: want 1 to 10000", *f.outboxBatch)
	}
	if *f.outboxWorkers < 1 || *f.outboxWorkers > 64 {
		return outbox.Config{}, fmt.Errorf("--outbox-workers %d: want 1 to 64", *f.outboxWorkers)
	}
	c := outbox.Config{Logger: logger, Lease: *f.outboxLease, BatchSize: *f.outboxBatch, Workers: *f.outboxWorkers, Retention: *f.retention,
		MaxYield: *f.outboxYield}
	if *f.outboxYield == 0 {
		c.MaxYield = -1 // never yield
	}
	if *f.retention == 0 {
		c.Retention = -1 // keep forever
	}
	return c, nil
}

// specs are the --sink values, in order (log when none is given).
func (f *sinkFlags) specs() []string {
	if len(f.sinks) == 0 {
		return []string{"log"}
	}
	return f.sinks
}

// open makes the sinks the flags name; close releases their connections.
func (f *sinkFlags) open(ctx context.Context, logger *slog.Logger) (sinks []outbox.Sink, close func(), err error) {
	format, err := outbox.ParseFormat(*f.format)
	if err != nil {
		return nil, nil, fmt.Errorf("--event-format: %w", err)
	}
	if err := f.checkNames(); err != nil {
		return nil, nil, err
	}
	var closers []io.Closer
	close = func() {
		for _, c := range closers {
			if err := c.Close(); err != nil {
				logger.Warn("closing a sink", "err", err)
			}
		}
	}
	for _, spec := range f.specs() {
		s, err := f.openOne(ctx, spec, format, logger)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("--sink %s: %w", redact.URL(spec), err)
		}
		sinks = append(sinks, s)
		if c, ok := s.(io.Closer); ok {
			closers = append(closers, c)
		}
	}
	return sinks, close, nil
}

func (f *sinkFlags) openOne(ctx context.Context, spec string, format outbox.Format, logger *slog.Logger) (outbox.Sink, error) {
	scheme, _, _ := strings.Cut(spec, "://")
	switch {
	case spec == "log":
		return outbox.LogSink{Logger: logger}, nil
	case scheme == "https" || scheme == "http":
		secrets, err := webhook.ReadSecrets(*f.webhookSecret.value, *f.webhookSecret.file)
		if err != nil {
			return nil, err
		}
		return webhook.New(webhook.Config{URL: spec, Secrets: secrets, Insecure: *f.webhookInsec, MaxAge: *f.webhookMaxAge, Format: format})
	case scheme == "amqp" || scheme == "amqps":
		return rabbitmq.New(ctx, spec, format, logger)
	case scheme == "kafka":
		cfg, err := kafka.ParseURL(spec)
		if err != nil {
			return nil, err
		}
		cfg.Format, cfg.Logger = format, logger
		return kafka.New(ctx, cfg)
	case scheme == "nats":
		cfg, err := natssink.ParseURL(spec)
		if err != nil {
			return nil, err
		}
		cfg.Format, cfg.Logger = format, logger
		return natssink.New(ctx, cfg)
	}
	return nil, errors.New("unsupported: want log, https://…, amqp://…, kafka://… or nats://…")
}

// checkNames refuses two --sink values that name one sink, before any is
// opened (a broker that is down would otherwise hold the refusal back). A
// sink's name is its progress in the store: two sinks of one name would
// share it, each event reaching only one of them, and the relay refuses
// them (outbox.Relay.Run). The message names the flags by position (their
// URLs may hold secrets) and the name, which holds none.
func (f *sinkFlags) checkNames() error {
	first := map[string]int{}
	for i, spec := range f.specs() {
		name, err := sinkName(spec)
		if err != nil {
			continue // open says what is wrong with it
		}
		if j, ok := first[name]; ok {
			return fmt.Errorf("--sink #%d and --sink #%d are one sink, %s: each sink keeps its progress under its name, so give each destination once "+
				"(URLs that differ only in a secret query parameter, or in connection parameters, are one destination)", j+1, i+1, name)
		}
		first[name] = i
	}
	return nil
}

// sinkName is the name the sink of spec has (openOne's), without opening it.
func sinkName(spec string) (string, error) {
	scheme, _, _ := strings.Cut(spec, "://")
	switch {
	case spec == "log":
		return outbox.LogSink{}.Name(), nil
	case scheme == "https" || scheme == "http":
		return webhook.SinkName(spec)
	case scheme == "amqp" || scheme == "amqps":
		return rabbitmq.SinkName(spec)
	case scheme == "kafka":
		return kafka.SinkName(spec)
	case scheme == "nats":
		return natssink.SinkName(spec)
	}
	return "", errors.New("unsupported")
}

func sinkNames(sinks []outbox.Sink) []string {
	out := make([]string, len(sinks))
	for i, s := range sinks {
		out[i] = s.Name()
	}
	return out
}
