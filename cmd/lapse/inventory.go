package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/redact"
)

// serveInventoryAMQP consumes the stock commands from the RabbitMQ broker at
// url, applies them with a and publishes the answers, until ctx ends: the
// AMQP transport's server side.
func serveInventoryAMQP(ctx context.Context, url string, a inventory.Applier, logger *slog.Logger) error {
	broker, opts, err := inventoryAMQPURL(url)
	if err != nil {
		return err
	}
	return inventory.ServeAMQP(ctx, broker, a, append(opts, inventory.AMQPLogger(logger))...)
}

func runInventory(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("inventory", stderr)
	listen := fs.String("listen", "127.0.0.1:8091", "address of the inventory's HTTP API; a loopback one unless --allow-public")
	allowPublic := fs.Bool("allow-public", false, "let --listen name a non-loopback address: anyone who reaches it can set stock and flip the fault switches")
	var allowHosts listFlag
	fs.Var(&allowHosts, "allow-host", "a name the HTTP API may be addressed by (the Host header: name, or name:port) beside its address and localhost; repeatable. Other names are refused (DNS rebinding)")
	storeURL := fs.String("store", "sqlite://inventory.db", "the inventory's own store: sqlite://path, sqlite://:memory: or postgres://… (tables prefixed inv_)")
	fs.commandLineOnly("store") // LAPSE_STORE is lapse serve's store
	amqpURL := fs.String("amqp", "", "also take commands from this RabbitMQ broker (amqp://user:password@host:5672/vhost; ?prefix=NAME names the exchange and queues, as lapse serve's --inventory, default lapse.stock)")
	fail := fs.Bool("fail", false, "fault: answer every command 503 (AMQP: requeue) without applying it")
	delay := fs.Duration("delay", 0, none, "fault: hold every command this long before applying it")
	drop := fs.Bool("drop-answers", false, "fault: apply every command, then give no answer (HTTP: the connection is closed)")
	reject := fs.Bool("reject", false, "fault: answer every command REJECTED without applying it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// PUT /skus and POST /faults take no authentication: whoever reaches
	// the reference inventory can change its stock or make it fail.
	if !isLoopback(*listen) && !*allowPublic {
		fmt.Fprintf(stderr, "lapse inventory: refusing to listen on %s: the reference inventory's routes take no authentication, so anyone who reaches it could set stock or switch faults on; listen on 127.0.0.1, or pass --allow-public\n", *listen)
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := reference.Open(octx, *storeURL)
	cancel()
	if err != nil {
		return fmt.Errorf("--store %s: %w", redact.URL(*storeURL), err)
	}
	defer st.Close()

	srv := reference.NewServer(st, reference.Config{
		Faults:       reference.Faults{Fail: *fail, DelayMS: delay.Milliseconds(), DropAnswers: *drop, Reject: *reject},
		Logger:       logger,
		AllowedHosts: allowHosts,
	})
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 2)
	running := 1
	go func() { errc <- srv.ListenAndServe(ctx, *listen) }()
	if *amqpURL != "" {
		running++
		go func() {
			err := serveInventoryAMQP(ctx, *amqpURL, srv.Applier(), logger)
			if err != nil {
				err = fmt.Errorf("--amqp %s: %w", redact.URL(*amqpURL), err)
			}
			errc <- err
		}()
	}
	logger.Info("reference inventory serving", "addr", *listen, "store", redact.URL(*storeURL), "amqp", redact.URL(*amqpURL),
		"fail", *fail, "delay", *delay, "drop_answers", *drop, "reject", *reject)
	// The first to end (a failure, or both after ctx) ends the other.
	var first error
	for range running {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
		stop()
	}
	if errors.Is(first, context.Canceled) { // the signal, through AMQP
		first = nil
	}
	return first
}
