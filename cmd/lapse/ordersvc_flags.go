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
	return &orderServiceFlags{
		url: fs.String("order-service", "", "the shop's order service owns the orders (docs/order-service.md): at each deadline lapse POSTs a signed "+
			"order.cancel_if_pending command to this URL (https://…, or http:// to a loopback address) and the answer decides; "+
			"lapse holds no stock, and orders need the order service's id"),
		secret: fs.String("order-service-secret", "", "Standard Webhooks secret(s) signing the commands (whsec_…; during a rotation the current and the previous one, "+
			"separated by spaces or commas: the receiver verifies with either)"),
		secretFile: fs.String("order-service-secret-file", "", "a file with the order-service secret(s), one per line (# comments allowed); instead of --order-service-secret"),
		insecure:   fs.Bool("order-service-insecure", false, "allow an http:// order-service URL off loopback (commands in clear text)"),
		timeout:    fs.Duration("order-service-timeout", 10*time.Second, span{min: time.Millisecond}, "how long one command waits for the order service's answer before it is retried"),
		maxAttempts: fs.Int("order-service-max-attempts", 20, "failed sends (no answer, 408, 409, 429, 5xx) after which a command is DEAD, "+
			"for an operator's lapse commands retry (1 to 10000)"),
		maxAge:      fs.Duration("order-service-max-age", 24*time.Hour, positive, "how long a command may keep failing before it is DEAD"),
		workers:     fs.Int("order-service-workers", 2, "batches of commands one instance sends at once (1 to 64)"),
		concurrency: fs.Int("order-service-concurrency", 16, "commands one batch has in flight at once, toward the order service (1 to 1000)"),
		retryMax: fs.Duration("order-service-retry-max", 5*time.Minute, span{min: 10 * time.Millisecond}, "the longest wait between two sends of a command that failed "+
			"(the wait doubles from 500 ms per failure, ±20%, up to this)"),
		lease: fs.Duration("order-service-lease", 30*time.Second, span{min: 100 * time.Millisecond}, "how long a claimed batch of commands is held by one instance: "+
			"a command whose instance died between sending and recording the answer goes again after it (with the same id)"),
	}
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
	secrets, err := webhook.ReadSecretsOf("--order-service-secret", *f.secret, *f.secretFile)
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
	if u, err := url.Parse(*f.url); err == nil && u.Scheme == "amqp" || err == nil && u.Scheme == "amqps" {
		return nil, fmt.Errorf("--order-service %s: the AMQP transport is not built yet; use http(s)://", redact.URL(*f.url))
	}
	return secrets, nil
}

// configure sets cfg's OrderService and Commands.
func (f *orderServiceFlags) configure(_ context.Context, cfg *lapse.Config, logger *slog.Logger) (func(), error) {
	secrets, err := f.check()
	if err != nil || !f.on() {
		return func() {}, err
	}
	c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: *f.url, Secrets: secrets, Timeout: *f.timeout, Insecure: *f.insecure})
	if err != nil {
		return nil, err
	}
	cfg.OrderService = c
	cfg.Commands = ordersvc.DispatcherConfig{
		MaxAttempts: *f.maxAttempts, MaxAge: *f.maxAge, Workers: *f.workers, SendTimeout: min(*f.timeout, *f.lease*4/5), Lease: *f.lease, Concurrency: *f.concurrency,
		RetryBase: min(500*time.Millisecond, *f.retryMax), RetryMax: *f.retryMax, Logger: logger,
	}
	return func() { c.Close() }, nil
}
