package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/redact"
)

// benchInventoryTimeout is how long a command of the run waits for the
// inventory's answer: lapse serve's --inventory-timeout default.
const benchInventoryTimeout = 5 * time.Second

// checkBenchInventory validates --inventory and --inventory-api without
// connecting anywhere.
func checkBenchInventory(invURL, apiURL, reserveOver string, target bool) error {
	if invURL == "" {
		if apiURL != "" || reserveOver != "transport" {
			return fmt.Errorf("--inventory-api and --reserve-via go with --inventory")
		}
		return nil
	}
	switch {
	case reserveOver != "transport" && reserveOver != "api":
		return fmt.Errorf("--reserve-via %q: want transport or api", reserveOver)
	case reserveOver == "api" && apiURL == "" && !strings.HasPrefix(invURL, "http"):
		return fmt.Errorf("--reserve-via api needs --inventory-api (the inventory's HTTP API)")
	}
	if target {
		return fmt.Errorf("--inventory is the in-process service's; with --target the server's own runs (lapse serve --inventory)")
	}
	u, err := url.Parse(invURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--inventory %s: want amqp://user:pass@host:5672/vhost[?prefix=…] or http://host:port", redact.URL(invURL))
	}
	switch u.Scheme {
	case "amqp", "amqps", "http", "https":
	default:
		return fmt.Errorf("--inventory %s: want amqp://…, amqps://…, http://… or https://…", redact.URL(invURL))
	}
	if apiURL != "" {
		if a, err := url.Parse(apiURL); err != nil || (a.Scheme != "http" && a.Scheme != "https") || a.Host == "" {
			return fmt.Errorf("--inventory-api %s: want http://host:port", redact.URL(apiURL))
		}
	}
	return nil
}

// openBenchInventory connects to the inventory of --inventory twice — the
// service's dispatcher and the run's reserves each get a client, over the
// same transport — and returns the run's bench.Inventory (its Probe and
// Client set), the dispatcher's client, and what closes them. The SKUs'
// stock is set through apiURL's PUT /skus/{sku} (the reference inventory's
// API; for an http:// inventory its own URL by default); with no such URL
// the inventory must hold the stock already. With reserveOverAPI the
// reserves go to apiURL's POST /reservations instead of the transport.
func openBenchInventory(ctx context.Context, invURL, apiURL string, reserveOverAPI bool, logger *slog.Logger) (*bench.Inventory, inventory.Client, func(), error) {
	dial := func() (inventory.Client, error) {
		if strings.HasPrefix(invURL, "amqp") {
			broker, opts, err := inventoryAMQPURL(invURL)
			if err != nil {
				return nil, err
			}
			dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			return inventory.DialAMQP(dctx, broker, append(opts, inventory.AMQPTimeout(benchInventoryTimeout), inventory.AMQPLogger(logger))...)
		}
		return inventory.NewHTTPClient(invURL, inventory.WithTimeout(benchInventoryTimeout)), nil
	}
	dispatch, err := dial()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--inventory %s: %w", redact.URL(invURL), err)
	}
	reserve, err := dial()
	if err != nil {
		dispatch.Close()
		return nil, nil, nil, fmt.Errorf("--inventory %s: %w", redact.URL(invURL), err)
	}
	if apiURL == "" && strings.HasPrefix(invURL, "http") {
		apiURL = invURL
	}
	if reserveOverAPI {
		// The shop's checkout reserves through the inventory's own API, as
		// the end-to-end tests do; lapse's stock tasks still go over
		// --inventory's transport.
		reserve.Close()
		reserve = inventory.NewHTTPClient(apiURL, inventory.WithTimeout(benchInventoryTimeout))
	}
	inv := &bench.Inventory{Client: reserve, Probe: &bench.TaskProbe{}}
	if apiURL != "" {
		api := strings.TrimSuffix(apiURL, "/")
		hc := &http.Client{Timeout: 10 * time.Second}
		inv.SetStock = func(ctx context.Context, sku string, available int64) error {
			body, _ := json.Marshal(map[string]int64{"available": available})
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, api+"/skus/"+url.PathEscape(sku), bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("the inventory's PUT /skus/%s: %w", sku, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
				return fmt.Errorf("the inventory's PUT /skus/%s: %s: %s", sku, resp.Status, bytes.TrimSpace(b))
			}
			return nil
		}
	}
	return inv, dispatch, func() { reserve.Close(); dispatch.Close() }, nil
}

// withBenchInventory makes c send its stock tasks to the run's inventory,
// its dispatcher reporting to the run's probe.
func withBenchInventory(c *lapse.Config, inv *bench.Inventory, client inventory.Client, workers int) {
	if inv == nil {
		return
	}
	c.Inventory = client
	c.Tasks = inventory.DispatcherConfig{SendTimeout: benchInventoryTimeout, Workers: workers, Logger: c.Logger, OnDone: inv.Probe.OnDone}
}

// printBenchInventory prints the stock tasks of a run with --inventory.
func printBenchInventory(w io.Writer, res bench.Result) {
	if p := res.ReserveMS; p != nil {
		fmt.Fprintf(w, "reserve ms    p50 %.1f  p99 %.1f  max %.1f (the run's reserve commands, before each create)\n", p.P50, p.P99, p.Max)
	}
	for _, t := range res.Tasks {
		fmt.Fprintf(w, "task lag ms   %s: %d tasks, commit → DONE p50 %.1f  p90 %.1f  p99 %.1f  max %.1f"+
			" (commit → claim p50 %.1f p99 %.1f; claim → DONE p50 %.1f p99 %.1f)\n",
			t.Action, t.Tasks, t.LagMS.P50, t.LagMS.P90, t.LagMS.P99, t.LagMS.Max,
			t.ClaimMS.P50, t.ClaimMS.P99, t.SendMS.P50, t.SendMS.P99)
	}
	if res.TaskBatches > 0 {
		n := 0
		for _, t := range res.Tasks {
			n += t.Tasks
		}
		fmt.Fprintf(w, "task batches  %d, %.1f tasks each", res.TaskBatches, float64(n)/float64(res.TaskBatches))
		if p := res.TaskSettleMS; p != nil {
			fmt.Fprintf(w, "; last answer → settled p50 %.1f  p99 %.1f ms", p.P50, p.P99)
		}
		fmt.Fprintln(w)
	}
	if res.TasksNotDone > 0 || res.TasksDead > 0 || res.TasksDoneTwice > 0 {
		fmt.Fprintf(w, "tasks         %d orders without a DONE task at the end, %d DEAD, %d settled DONE twice\n",
			res.TasksNotDone, res.TasksDead, res.TasksDoneTwice)
	}
}
