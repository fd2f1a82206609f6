package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/redact"
)

// inventoryFlags choose who holds the stock: lapse itself (--inventory
// local) or an inventory service that lapse sends stock tasks to.
type inventoryFlags struct {
	url         *string
	reserve     *bool
	timeout     *time.Duration
	maxAttempts *int
	maxAge      *time.Duration
	workers     *int
}

func addInventoryFlags(fs *flagSet) *inventoryFlags {
	return &inventoryFlags{
		url: fs.Enum("inventory", "local", "who holds the stock: local (lapse's own SKU counters), amqp://user:pass@host:5672/vhost "+
			"(an inventory service taking stock commands over RabbitMQ; ?prefix=NAME names its exchange and queues, default lapse.stock) or http://host:port (over HTTP); docs/sagas.md", "local"),
		reserve: fs.Bool("inventory-reserve", false, "lapse reserves each order's stock at the inventory itself (reservation id = order id) "+
			"instead of taking the reservation_id the caller made there; needs --inventory amqp://… or http://…"),
		timeout:     fs.Duration("inventory-timeout", 5*time.Second, span{min: time.Millisecond}, "how long one stock command waits for the inventory's answer before it is retried"),
		maxAttempts: fs.Int("task-max-attempts", 20, "failed sends after which a stock task is DEAD, for an operator's `lapse tasks retry` (1 to 10000)"),
		maxAge:      fs.Duration("task-max-age", 24*time.Hour, positive, "how long a stock task may keep failing before it is DEAD"),
		workers:     fs.Int("task-workers", 2, "batches of stock tasks one instance sends at once (1 to 64)"),
	}
}

// remote reports whether a remote inventory holds the stock.
func (f *inventoryFlags) remote() bool { return *f.url != "local" }

// check validates the flags without connecting anywhere. The counts are
// checked whatever --inventory says: a value out of range is a mistake even
// where it is not used yet.
func (f *inventoryFlags) check() error {
	if *f.maxAttempts < 1 || *f.maxAttempts > 10000 {
		return fmt.Errorf("--task-max-attempts %d: want 1 to 10000", *f.maxAttempts)
	}
	if *f.workers < 1 || *f.workers > 64 {
		return fmt.Errorf("--task-workers %d: want 1 to 64", *f.workers)
	}
	if !f.remote() {
		if *f.reserve {
			return fmt.Errorf("--inventory-reserve needs --inventory amqp://… or http://…: with --inventory local lapse holds the stock itself")
		}
		return nil
	}
	u, err := url.Parse(*f.url)
	if err != nil {
		return fmt.Errorf("--inventory %s: %w", redact.URL(*f.url), err)
	}
	switch u.Scheme {
	case "amqp", "amqps", "http", "https":
	default:
		return fmt.Errorf("--inventory %s: want local, amqp://…, amqps://…, http://… or https://…", redact.URL(*f.url))
	}
	if u.Host == "" {
		return fmt.Errorf("--inventory %s: no host", redact.URL(*f.url))
	}
	if u.Scheme == "amqp" || u.Scheme == "amqps" {
		if _, _, err := inventoryAMQPURL(*f.url); err != nil {
			return fmt.Errorf("--inventory %s: %w", redact.URL(*f.url), err)
		}
	}
	return nil
}

// configure connects to the inventory (a remote one) and sets cfg's
// Inventory and Tasks; the returned close releases the connection.
func (f *inventoryFlags) configure(ctx context.Context, cfg *lapse.Config, logger *slog.Logger) (func(), error) {
	if err := f.check(); err != nil || !f.remote() {
		return func() {}, err
	}
	var c inventory.Client
	switch {
	case strings.HasPrefix(*f.url, "amqp"):
		broker, opts, err := inventoryAMQPURL(*f.url)
		if err != nil {
			return nil, fmt.Errorf("--inventory %s: %w", redact.URL(*f.url), err)
		}
		ac, err := inventory.DialAMQP(ctx, broker, append(opts, inventory.AMQPTimeout(*f.timeout), inventory.AMQPLogger(logger))...)
		if err != nil {
			return nil, fmt.Errorf("--inventory %s: %w", redact.URL(*f.url), err)
		}
		c = ac
	default:
		c = inventory.NewHTTPClient(*f.url, inventory.WithTimeout(*f.timeout))
	}
	cfg.Inventory, cfg.InventoryReserve = c, *f.reserve
	cfg.Tasks = inventory.DispatcherConfig{
		MaxAttempts: *f.maxAttempts, MaxAge: *f.maxAge, Workers: *f.workers,
		SendTimeout: *f.timeout, Logger: logger,
	}
	return func() { c.Close() }, nil
}
