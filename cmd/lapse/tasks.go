package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

// maxTaskOrderID bounds --order: lapse's order ids are at most 64
// characters (a longer one names no order).
const maxTaskOrderID = 64

// maxTaskID bounds a task id given to retry.
const maxTaskID = 255

func runTasksList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTasksListPaged(ctx, args, stdout, stderr, lapse.MaxTasksLimit)
}

// runTasksListPaged is tasks list reading pageSize tasks at a time.
func runTasksListPaged(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	fs := newFlagSet("tasks list", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	dead := fs.Bool("dead", false, "only DEAD tasks (rejected by the inventory, or failed too long)")
	orderID := fs.String("order", "", "every task of this order, DONE ones too")
	fs.commandLineOnly("order")
	limit := fs.Int("limit", 0, "list at most this many tasks (0: all of them)")
	asJSON := fs.Bool("json", false, "one JSON object per line (GET /v1/tasks's task shape) instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "lapse tasks list: --limit %d: want 0 (all) or more\n", *limit)
		return errUsage
	}
	if *orderID != "" && (len(*orderID) > maxTaskOrderID || !plainID(*orderID)) {
		fmt.Fprintf(stderr, "lapse tasks list: --order %q: want an order id (1 to %d characters, no control characters)\n", *orderID, maxTaskOrderID)
		return errUsage
	}
	st, err := openEventsStore(ctx, *storeURL, true)
	if err != nil {
		return err
	}
	defer st.Close()

	var tw *tabwriter.Writer
	enc := json.NewEncoder(stdout)
	if !*asJSON {
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	}
	listed, truncated := 0, false
	p := store.ListTasksParams{Dead: *dead && *orderID == "", OrderID: *orderID}
	for {
		p.Limit = pageSize
		if *limit > 0 && *limit-listed < p.Limit {
			// One more than wanted says whether the list was cut.
			p.Limit = *limit - listed + 1
		}
		page, err := lapse.PageTasks(ctx, st, p)
		if err != nil {
			return fmt.Errorf("%s: list the stock tasks: %w", redact.URL(*storeURL), err)
		}
		for _, t := range page.Tasks {
			if *dead && t.Status != order.TaskDead {
				continue // --order with --dead: that order's DEAD tasks
			}
			if *limit > 0 && listed == *limit {
				truncated = true
				break
			}
			if tw != nil {
				if listed == 0 {
					fmt.Fprintln(tw, "ID\tORDER\tACTION\tRESERVATION\tSTATUS\tATTEMPTS\tRESULT\tNEXT / DONE / DEAD AT\tLAST ERROR")
				}
				writeTaskRow(tw, t)
			} else if err := enc.Encode(t); err != nil {
				return fmt.Errorf("write the list: %w", err)
			}
			listed++
		}
		if truncated || page.NextAfter == "" {
			break
		}
		p.After = page.NextAfter
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write the list: %w", err)
		}
	}
	switch {
	case listed == 0:
		what := "no stock tasks waiting (every task is DONE)"
		switch {
		case *orderID != "" && *dead:
			what = "no DEAD stock tasks for order " + *orderID
		case *orderID != "":
			what = "no stock tasks for order " + *orderID + " (not an order whose stock a remote inventory holds, or not cancelled or paid yet)"
		case *dead:
			what = "no DEAD stock tasks"
		}
		fmt.Fprintln(stderr, what)
	case truncated:
		fmt.Fprintf(stderr, "listed the first %d; more follow (raise --limit, or 0 for all)\n", listed)
	}
	return nil
}

// writeTaskRow prints one task for a person: for a PENDING one when it is
// due, for a DONE one when it was done, for a DEAD one when it died.
func writeTaskRow(w io.Writer, t order.StockTask) {
	when := "-"
	switch {
	case t.Status == order.TaskDead && !t.DeadAt.IsZero():
		when = order.FormatTime(t.DeadAt)
	case t.Status == order.TaskDone && !t.DoneAt.IsZero():
		when = order.FormatTime(t.DoneAt)
	case t.Status == order.TaskPending && !t.NextAt.IsZero():
		when = order.FormatTime(t.NextAt)
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return cell(s)
	}
	lastErr := "-"
	if t.LastError != "" {
		lastErr = clip(cell(t.LastError), lastErrorWidth)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(t.ID), cell(t.OrderID), t.Action, dash(t.ReservationID),
		t.Status, t.Attempts, dash(t.Result), when, lastErr)
}

func runTasksRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tasks retry", stderr)
	fs.args = "[ID…]"
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	dead := fs.Bool("dead", false, "retry every DEAD task, instead of naming task ids (one of the two is required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids := fs.Args()
	switch {
	case len(ids) == 0 && !*dead:
		fmt.Fprintln(stderr, "lapse tasks retry: name the tasks to retry (their ids, as lapse tasks list --dead shows them), or give --dead to retry every DEAD one")
		return errUsage
	case len(ids) > 0 && *dead:
		fmt.Fprintln(stderr, "lapse tasks retry: give task ids or --dead, not both")
		return errUsage
	}
	for _, id := range ids {
		if len(id) > maxTaskID || !plainID(id) {
			fmt.Fprintf(stderr, "lapse tasks retry: %q: want a task id (1 to %d characters, no control characters), as lapse tasks list shows it\n", id, maxTaskID)
			return errUsage
		}
	}
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.RetryTasks(ctx, store.RetryTasksParams{IDs: ids, AllDead: *dead})
	if err != nil {
		return fmt.Errorf("%s: retry the stock tasks: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "retried %d DEAD %s\n", n, plural(n, "task", "tasks"))
	switch {
	case n == 0 && len(ids) > 0:
		fmt.Fprintln(stderr, "none of these ids names a DEAD task: DONE or retried since, or not a task id (lapse tasks list --dead shows them)")
	case n > 0:
		fmt.Fprintln(stderr, "they are due now: a running lapse serve sends them within its dispatcher's interval")
	}
	return nil
}

// plainID reports whether s can be an id: not empty, UTF-8, no control
// characters (it would be printed, and no store holds such an id).
func plainID(s string) bool {
	return s != "" && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
