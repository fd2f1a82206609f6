package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/redact"
)

// orderServiceFlags choose order-service mode (docs/order-service.md): the
// shop's order service owns the orders, and lapse commands their cancel.
type orderServiceFlags struct {
	url         *string
	secret      *string
	secretFile  *string
	insecure    *bool
	timeout     *time.Duration
	maxAttempts *int
	maxAge      *time.Duration
	workers     *int
	lease       *time.Duration
	retryMax    *time.Duration
	concurrency *int
}

func addOrderServiceFlags(fs *flagSet) *orderServiceFlags {
	f := addOrderServiceEndpointFlags(fs, "the shop's order service owns the orders (docs/order-service.md): at each deadline lapse sends a signed "+
		"order.cancel_if_pending command and the answer decides; https://… (or http:// to a loopback address): a POST to this URL; "+
		"amqp[s]://user:pass@host:5672/vhost: published to RabbitMQ, answered on a reply queue (?prefix=NAME names the exchange NAME "+
		"and the order service's queue NAME.commands, default lapse.orders); lapse holds no stock, and orders need the order service's id",
		"how long one command waits for the order service's answer before it is retried")
	f.maxAttempts = fs.Int("order-service-max-attempts", 20, "failed sends (no answer, 408, 409, 429, 5xx) after which a command is DEAD, "+
		"for an operator's lapse commands retry (1 to 10000)")
	f.maxAge = fs.Duration("order-service-max-age", 24*time.Hour, positive, "how long a command may keep failing before it is DEAD")
	f.workers = fs.Int("order-service-workers", 2, "batches of commands one instance sends at once (1 to 64)")
	f.concurrency = fs.Int("order-service-concurrency", 16, "commands one batch has in flight at once, toward the order service (1 to 1000)")
	f.retryMax = fs.Duration("order-service-retry-max", 5*time.Minute, span{min: 10 * time.Millisecond}, "the longest wait between two sends of a command that failed "+
		"(the wait doubles from 500 ms per failure, ±20%, up to this)")
	f.lease = fs.Duration("order-service-lease", 30*time.Second, span{min: 100 * time.Millisecond}, "how long a claimed batch of commands is held by one instance: "+
		"a command whose instance died between sending and recording the answer goes again after it (with the same id)")
	return f
}

// addOrderServiceEndpointFlags defines how the order service is reached
// and how lapse signs what it sends it — --order-service and its secret,
// insecure and timeout flags — for lapse serve (addOrderServiceFlags adds
// the dispatcher's) and lapse reconcile (which asks the status route).
func addOrderServiceEndpointFlags(fs *flagSet, urlUsage, timeoutUsage string) *orderServiceFlags {
	return &orderServiceFlags{
		url: fs.String("order-service", "", urlUsage),
		secret: fs.String("order-service-secret", "", "Standard Webhooks secret(s) signing the requests to the order service (whsec_…; during a rotation the current and the previous one, "+
			"separated by spaces or commas: the receiver verifies with either)"),
		secretFile: fs.String("order-service-secret-file", "", "a file with the order-service secret(s), one per line (# comments allowed); instead of --order-service-secret"),
		insecure:   fs.Bool("order-service-insecure", false, "allow an http:// order-service URL off loopback (requests in clear text; not for amqp:// URLs)"),
		timeout:    fs.Duration("order-service-timeout", 10*time.Second, span{min: time.Millisecond}, timeoutUsage),
	}
}

// readSecrets reads the signing secrets from --order-service-secret or
// --order-service-secret-file (nil when neither is set); an error never
// shows a secret.
func (f *orderServiceFlags) readSecrets() ([]string, error) {
	return webhook.ReadSecretsOf("--order-service-secret", *f.secret, *f.secretFile)
}

// newHTTP is the HTTP client of the order service at --order-service.
func (f *orderServiceFlags) newHTTP(secrets []string) (*ordersvc.HTTP, error) {
	return ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: *f.url, Secrets: secrets, Timeout: *f.timeout, Insecure: *f.insecure})
}

// on reports whether order-service mode is chosen.
func (f *orderServiceFlags) on() bool { return *f.url != "" }

// check validates the flags without connecting anywhere; secrets are read
// (a file) and checked, never shown in errors.
func (f *orderServiceFlags) check() ([]string, error) {
	if *f.maxAttempts < 1 || *f.maxAttempts > 10000 {
		return nil, fmt.Errorf("--order-service-max-attempts %d: want 1 to 10000", *f.maxAttempts)
	}
	if *f.workers < 1 || *f.workers > 64 {
		return nil, fmt.Errorf("--order-service-workers %d: want 1 to 64", *f.workers)
	}
	if *f.concurrency < 1 || *f.concurrency > 1000 {
		return nil, fmt.Errorf("--order-service-concurrency %d: want 1 to 1000", *f.concurrency)
	}
	secrets, err := f.readSecrets()
	if err != nil {
		return nil, err
	}
	if !f.on() {
		if secrets != nil {
			return nil, errors.New("--order-service-secret needs --order-service URL")
		}
		return nil, nil
	}
	if secrets == nil {
		return nil, errors.New("--order-service needs a signing secret: set --order-service-secret or --order-service-secret-file")
	}
	if f.amqp() {
		if *f.insecure {
			return nil, errors.New("--order-service-insecure concerns http:// URLs; an amqp:// URL is used as given")
		}
		if err := ordersvc.CheckAMQPURL(*f.url); err != nil {
			return nil, fmt.Errorf("--order-service %s: %w", redact.URL(*f.url), err)
		}
	}
	return secrets, nil
}

// amqp reports whether the order service is reached over RabbitMQ.
func (f *orderServiceFlags) amqp() bool {
	u, err := url.Parse(*f.url)
	return err == nil && (u.Scheme == "amqp" || u.Scheme == "amqps")
}

// configure sets cfg's OrderService and Commands. Over AMQP it connects to
// the broker, trying until ctx ends (and giving up at once on refused
// credentials or vhost); the returned close releases the connection.
func (f *orderServiceFlags) configure(ctx context.Context, cfg *lapse.Config, logger *slog.Logger) (func(), error) {
	secrets, err := f.check()
	if err != nil || !f.on() {
		return func() {}, err
	}
	var c ordersvc.Client
	switch {
	case f.amqp():
		ac, err := ordersvc.DialAMQP(ctx, *f.url, ordersvc.AMQPSecrets(secrets...), ordersvc.AMQPTimeout(*f.timeout), ordersvc.AMQPLogger(logger))
		if err != nil {
			return nil, fmt.Errorf("--order-service %s: %w", redact.URL(*f.url), err)
		}
		c = ac
	default:
		hc, err := f.newHTTP(secrets)
		if err != nil {
			return nil, err
		}
		c = hc
	}
	cfg.OrderService = c
	cfg.Commands = ordersvc.DispatcherConfig{
		MaxAttempts: *f.maxAttempts, MaxAge: *f.maxAge, Workers: *f.workers, SendTimeout: min(*f.timeout, *f.lease*4/5), Lease: *f.lease, Concurrency: *f.concurrency,
		RetryBase: min(500*time.Millisecond, *f.retryMax), RetryMax: *f.retryMax, Logger: logger,
	}
	return func() { c.Close() }, nil
}
