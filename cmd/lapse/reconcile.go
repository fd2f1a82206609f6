package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/redact"
)

// runReconcile is `lapse reconcile`: lapse's orders against another
// system's records — the payment gateway's (--gateway, --statement) or a
// remote inventory's ledger (--inventory). Exit 0 when they agree, 1 on a
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
	from := fs.String("from", "", "first created_at to compare (RFC 3339 or YYYY-MM-DD; default 24 h ago)")
	to := fs.String("to", "", "created_at bound, exclusive (RFC 3339 or YYYY-MM-DD; default now)")
	concurrency := fs.Int("concurrency", 8, "gateway queries (with --inventory: orders re-read) in flight")
	format := fs.Enum("format", "table", "table or json", "table", "json")
	asJSON := fs.Bool("json", false, "print the report as JSON (--format json)")
	examples := fs.Int("examples", 10, "with --inventory: mismatches listed per kind (all are counted)")
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
	if *inventoryURL != "" {
		if onCommandLine["gateway"] || onCommandLine["statement"] {
			fmt.Fprintln(stderr, "lapse reconcile: give one of --gateway URL, --statement FILE and --inventory URL")
			return errUsage
		}
	} else if (*gw.url == "") == (*statement == "") {
		fmt.Fprintln(stderr, "lapse reconcile: give exactly one of --gateway URL and --statement FILE (or --inventory URL for stock)")
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
	if *inventoryURL != "" {
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
	} else {
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

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
