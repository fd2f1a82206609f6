// Command embedded is a small shop order service that embeds lapse as a
// library: lapse's tables and the shop's own orders table live in one
// database (PostgreSQL or MySQL/MariaDB), a checkout commits the shop's row
// and lapse's order in one transaction, and lapse's hooks move the shop's
// row in the very transaction where lapse cancels an unpaid order or records
// its payment. So the shop's table never disagrees with lapse's: no second
// service, no syncing by hand.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test WEBHOOK_SECRET=s3cret go run ./examples/embedded
//
// See README.md beside this file for the API and a walk-through.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lapsehq/lapse"
)

// product is one line of the demo catalogue.
type product struct {
	priceCents int64
	stock      int64 // what lapse starts with for the SKU, on first run
}

// catalogue is what the demo shop sells.
var catalogue = map[string]product{
	"tee": {priceCents: 1999, stock: 100},
	"mug": {priceCents: 1299, stock: 50},
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("shop stopped", "err", err)
		os.Exit(1)
	}
}

// run serves the shop until SIGINT or SIGTERM, or until lapse's timers stop.
func run(log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secret := os.Getenv("WEBHOOK_SECRET")
	if secret == "" {
		return errors.New("set WEBHOOK_SECRET, the secret the payment provider signs its callbacks with")
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	db, err := open(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.close()
	svc, err := lapse.New(lapse.Config{Store: db.lapseStore(), Logger: log})
	if err != nil {
		return fmt.Errorf("start lapse: %w", err)
	}
	prices := map[string]int64{}
	for sku, p := range catalogue {
		prices[sku] = p.priceCents
		if err := stockUp(ctx, svc, sku, p.stock); err != nil {
			return err
		}
	}
	s := &shop{db: db, lapse: svc, prices: prices, payWindow: 15 * time.Minute,
		webhookSecrets: [][]byte{[]byte(secret)}, log: log}

	// lapse's timers, cancels and outbox run beside the HTTP server; if
	// they stop, the shop stops too, rather than take orders nobody cancels.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lapseDone := make(chan error, 1)
	go func() {
		lapseDone <- svc.Run(ctx)
		cancel()
	}()
	srv := &http.Server{Addr: addr, Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown) // ListenAndServe returns once it is done
	}()
	log.Info("shop listening", "addr", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	cancel()
	if err := <-lapseDone; err != nil {
		return fmt.Errorf("lapse: %w", err)
	}
	return nil
}

// open connects to the shop's database by its URL's scheme.
func open(ctx context.Context, rawURL string) (database, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		db, err := openPostgres(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		return db, nil
	case strings.HasPrefix(rawURL, "mysql://"):
		c, err := mysqlConfig(rawURL)
		if err != nil {
			return nil, err
		}
		db, err := openMySQL(ctx, c)
		if err != nil {
			return nil, err
		}
		return db, nil
	default:
		return nil, errors.New("set DATABASE_URL to postgres://… or mysql://…")
	}
}

// stockUp gives a SKU lapse has never seen its starting stock. A SKU lapse
// knows keeps what it has: a restart must not reset what was sold.
func stockUp(ctx context.Context, svc *lapse.Service, sku string, stock int64) error {
	_, err := svc.GetSKU(ctx, sku)
	if !errors.Is(err, lapse.ErrNotFound) {
		if err != nil {
			return fmt.Errorf("read the stock of %s: %w", sku, err)
		}
		return nil
	}
	if _, err := svc.SetStock(ctx, sku, stock); err != nil {
		return fmt.Errorf("set the stock of %s: %w", sku, err)
	}
	return nil
}
