package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/redact"
)

// runReconcile is `lapse reconcile`: lapse's orders against another
// system's records — the payment gateway's (--gateway, --statement), a
// remote inventory's ledger (--inventory), or the order service that owns
// the orders in order-service mode (--order-service). Exit 0 when they agree, 1 on a
// mismatch, 2 when it could not compare (a bad flag, a store or a service
// that failed): a reconciliation that did not run must not pass for clean,
// nor for a mismatch, to a script or a cron job.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reconcile", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	gw := addGatewayFlags(fs)
	statement := fs.String("statement", "", "gateway statement file (CSV order_id,payment_id,status,amount_cents; - for stdin) instead of --gateway")
	inventoryURL := fs.String("inventory", "", "compare the orders' stock with this inventory's ledger (http://host:port, its HTTP API: docs/inventory.md) instead of payments")
	fs.commandLineOnly("inventory") // LAPSE_INVENTORY is lapse serve's mode (local, amqp://…)
	osvc := addOrderServiceEndpointFlags(fs, "compare the orders with the order service that owns them (order-service mode, docs/order-service.md): "+
		"a signed GET URL?order_id=ID per order, the same https:// URL as lapse serve's, instead of payments",
		"how long one status request waits for the order service's answer")
	fs.commandLineOnly("order-service") // LAPSE_ORDER_SERVICE is lapse serve's mode; the secrets may come from the environment
	from := fs.String("from", "", "first created_at to compare (RFC 3339 or YYYY-MM-DD; default 24 h ago)")
	to := fs.String("to", "", "created_at bound, exclusive (RFC 3339 or YYYY-MM-DD; default now)")
	concurrency := fs.Int("concurrency", 8, "gateway queries (with --inventory: orders re-read; with --order-service: status requests) in flight")
	format := fs.Enum("format", "table", "table or json", "table", "json")
	asJSON := fs.Bool("json", false, "print the report as JSON (--format json)")
	examples := fs.Int("examples", 10, "with --inventory or --order-service: mismatches listed per kind (all are counted)")
	checkItems := fs.Bool("check-items", false, "with --inventory: also compare each order's items with its reservation's at the inventory (one GET /reservations/{id} per order)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	if *checkItems && *inventoryURL == "" {
		fmt.Fprintln(stderr, "lapse reconcile: --check-items needs --inventory URL")
		return errUsage
	}
	switch {
	case *inventoryURL != "" || osvc.on():
		if onCommandLine["gateway"] || onCommandLine["statement"] || (*inventoryURL != "" && osvc.on()) {
			fmt.Fprintln(stderr, "lapse reconcile: give one of --gateway URL, --statement FILE, --inventory URL and --order-service URL")
			return errUsage
		}
	case (*gw.url == "") == (*statement == ""):
		fmt.Fprintln(stderr, "lapse reconcile: give exactly one of --gateway URL and --statement FILE (or --inventory URL for stock, --order-service URL for the orders' owner)")
		return errUsage
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintln(stderr, "lapse reconcile: --format is table or json")
		return errUsage
	}
	if *asJSON {
		*format = "json"
	}
	if *concurrency < 1 || *concurrency > 256 {
		fmt.Fprintf(stderr, "lapse reconcile: --concurrency %d: want 1 to 256\n", *concurrency)
		return errUsage
	}
	if *examples < 1 {
		fmt.Fprintf(stderr, "lapse reconcile: --examples %d: want at least 1\n", *examples)
		return errUsage
	}
	now := time.Now().UTC()
	fromT, toT := now.Add(-24*time.Hour), now
	var err error
	if *from != "" {
		if fromT, err = parseWhen(*from); err != nil {
			fmt.Fprintf(stderr, "lapse reconcile: --from %v\n", err)
			return errUsage
		}
	}
	if *to != "" {
		if toT, err = parseWhen(*to); err != nil {
			fmt.Fprintf(stderr, "lapse reconcile: --to %v\n", err)
			return errUsage
		}
	}
	if !fromT.Before(toT) {
		fmt.Fprintln(stderr, "lapse reconcile: --from must be before --to")
		return errUsage
	}
	if *inventoryURL != "" {
		u, err := url.Parse(*inventoryURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(stderr, "lapse reconcile: --inventory %s: want the inventory's HTTP API, http://host:port or https://… (its ledger is read over HTTP whatever carries the commands)\n", redact.URL(*inventoryURL))
			return errUsage
		}
	}

	var shop *ordersvc.HTTP
	if osvc.on() {
		if osvc.amqp() {
			fmt.Fprintf(stderr, "lapse reconcile: --order-service %s: reconcile needs the order service's HTTP status route (GET URL?order_id=, docs/order-service.md), "+
				"which AMQP does not carry: give the receiver's https:// URL\n", redact.URL(*osvc.url))
			return errUsage
		}
		secrets, err := osvc.readSecrets()
		if err == nil && secrets == nil {
			err = errors.New("--order-service needs a signing secret: set --order-service-secret or --order-service-secret-file")
		}
		if err == nil {
			shop, err = osvc.newHTTP(secrets)
		}
		if err != nil {
			fmt.Fprintf(stderr, "lapse reconcile: %v\n", err)
			return errUsage
		}
		defer shop.Close()
	}

	if err := gw.checkRetries(); err != nil {
		fmt.Fprintf(stderr, "lapse reconcile: %v\n", err)
		return errUsage
	}

	couldNotRun := func(err error) error { return exitError{code: 2, err: err} }
	st, err := openExistingStore(ctx, *storeURL)
	if err != nil {
		return couldNotRun(err)
	}
	defer st.Close()
	var write func() error
	var ok bool
	switch {
	case shop != nil:
		rep, err := reconcile.ReconcileOrderService(ctx, reconcile.OrderServiceParams{
			Orders: st, OrderService: shop, From: fromT, To: toT, MaxExamples: *examples, Concurrency: *concurrency,
			Progress: progressEvery(stderr, 5*time.Second, "asked the order service about"),
		})
		if err != nil {
			return couldNotRun(err)
		}
		rep.OrderService = redact.URL(*osvc.url)
		ok = rep.OK()
		write = func() error {
			if *format == "json" {
				return writeIndented(stdout, rep)
			}
			return reconcile.WriteOrderServiceTable(stdout, rep)
		}
	case *inventoryURL != "":
		rep, err := reconcile.ReconcileStock(ctx, reconcile.StockParams{
			Orders: st, Ledger: reconcile.NewHTTPLedger(*inventoryURL, nil),
			From: fromT, To: toT, MaxExamples: *examples, Concurrency: *concurrency, CheckItems: *checkItems,
		})
		if err != nil {
			return couldNotRun(err)
		}
		rep.Inventory = redact.URL(*inventoryURL)
		ok = rep.OK()
		write = func() error {
			if *format == "json" {
				return writeIndented(stdout, rep)
			}
			return reconcile.WriteStockTable(stdout, rep)
		}
	default:
		p := reconcile.Params{Orders: st, From: fromT, To: toT, Concurrency: *concurrency}
		if *statement != "" {
			f := os.Stdin
			if *statement != "-" {
				if f, err = os.Open(*statement); err != nil {
					return couldNotRun(err)
				}
				defer f.Close()
			}
			p.Statement = f
		} else {
			g, _, err := gw.open(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
			if err != nil {
				return couldNotRun(err)
			}
			// A gateway that keeps a trade per payment attempt (Stripe,
			// Alipay, WeChat Pay) is asked about each attempt of an order.
			p.Gateway = g
		}
		rep, err := reconcile.Run(ctx, p)
		if err != nil {
			return couldNotRun(err)
		}
		ok = rep.OK()
		write = func() error {
			if *format == "json" {
				return writeIndented(stdout, rep)
			}
			return reconcile.WriteTable(stdout, rep)
		}
	}
	if err := write(); err != nil {
		return couldNotRun(fmt.Errorf("write the report: %w", err))
	}
	if !ok {
		return exitError{code: 1}
	}
	return nil
}

// progressEvery returns a Progress callback that tells stderr how far a
// long run has got, at most once per interval and never for a run that
// ends sooner: "<what> 1200 of 5000 orders".
func progressEvery(stderr io.Writer, interval time.Duration, what string) func(done, total int) {
	var mu sync.Mutex
	next := time.Now().Add(interval)
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); done < total && now.After(next) {
			fmt.Fprintf(stderr, "%s %d of %d orders\n", what, done, total)
			next = now.Add(interval)
		}
	}
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
