package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

// runCommands is `lapse commands`: order-service mode's cancel commands
// (docs/order-service.md) as an operator needs them. list shows what the
// order service has not answered for good and the DEAD commands that wait
// for an operator; retry sends DEAD ones again; purge gives up on them.
// Like `lapse tasks`, the subcommands open the store directly, running
// lapse or not (the API has the same: GET /v1/commands, POST
// /v1/commands/retry, POST /v1/commands/purge).
func runCommands(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSubcommand(ctx, "commands", args, stdout, stderr, commandsUsage, map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"list":  runCommandsList,
		"retry": runCommandsRetry,
		"purge": runCommandsPurge,
	})
}

func commandsUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: lapse commands <subcommand> [flags]   (lapse commands <subcommand> -h for its flags)

The cancel commands of order-service mode (lapse serve --order-service URL): the
order.cancel_if_pending lapse sends the shop's order service at each deadline, until
it answers. A command the order service refused (a 4xx), or that kept failing, is
DEAD until an operator retries or purges it; its order stays CANCELLING meanwhile.

Subcommands:
  list   [--dead] [--order ID] [--limit N] [--json]
         the commands not DONE yet, in id order (--dead: only the DEAD ones;
         --order ID: every command of that order, DONE ones too)
  retry  (ID… | --dead)
         make DEAD commands PENDING and due at once, with the same command id:
         these command ids, or every DEAD one
  purge  (ID… | --dead)
         delete DEAD commands: these command ids, or every DEAD one. lapse gives up
         asking: their orders stay CANCELLING (lapse does not decide an order the
         order service owns), and lapse audit goes on reporting each
         (commanded_unanswered) until the order is settled another way

Each takes --store URL (LAPSE_STORE), like the other commands.
`)
}

func runCommandsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runCommandsListPaged(ctx, args, stdout, stderr, lapse.MaxCommandsLimit)
}

// runCommandsListPaged is commands list reading pageSize commands at a time.
func runCommandsListPaged(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	fs := newFlagSet("commands list", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", "store URL")
	dead := fs.Bool("dead", false, "only DEAD commands (refused by the order service, or failed too long)")
	orderID := fs.String("order", "", "every command of this order, DONE ones too")
	fs.commandLineOnly("order")
	limit := fs.Int("limit", 0, "list at most this many commands (0: all of them)")
	asJSON := fs.Bool("json", false, "one JSON object per line (GET /v1/commands's command shape) instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "lapse commands list: --limit %d: want 0 (all) or more\n", *limit)
		return errUsage
	}
	if *orderID != "" && (len(*orderID) > maxTaskOrderID || !plainID(*orderID)) {
		fmt.Fprintf(stderr, "lapse commands list: --order %q: want an order id (1 to %d characters, no control characters)\n", *orderID, maxTaskOrderID)
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
		page, err := lapse.PageCommands(ctx, st, p)
		if err != nil {
			return fmt.Errorf("%s: list the cancel commands: %w", redact.URL(*storeURL), err)
		}
		for _, c := range page.Commands {
			if *dead && c.Status != order.TaskDead {
				continue // --order with --dead: that order's DEAD commands
			}
			if *limit > 0 && listed == *limit {
				truncated = true
				break
			}
			if tw != nil {
				if listed == 0 {
					fmt.Fprintln(tw, "ID\tORDER\tCANCEL AFTER\tSTATUS\tATTEMPTS\tRESULT\tNEXT / DONE / DEAD AT\tLAST ERROR")
				}
				writeCommandRow(tw, c)
			} else if err := enc.Encode(c); err != nil {
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
		what := "no cancel commands waiting (every command is DONE)"
		switch {
		case *orderID != "" && *dead:
			what = "no DEAD cancel commands for order " + *orderID
		case *orderID != "":
			what = "no cancel commands for order " + *orderID + " (not past its deadline in order-service mode, or not an order lapse holds)"
		case *dead:
			what = "no DEAD cancel commands"
		}
		fmt.Fprintln(stderr, what)
	case truncated:
		fmt.Fprintf(stderr, "listed the first %d; more follow (raise --limit, or 0 for all)\n", listed)
	}
	return nil
}

// writeCommandRow prints one command for a person: for a PENDING one when
// it is due, for a DONE one when it was done, for a DEAD one when it died.
func writeCommandRow(w io.Writer, c order.Command) {
	when := "-"
	switch {
	case c.Status == order.TaskDead && !c.DeadAt.IsZero():
		when = order.FormatTime(c.DeadAt)
	case c.Status == order.TaskDone && !c.DoneAt.IsZero():
		when = order.FormatTime(c.DoneAt)
	case c.Status == order.TaskPending && !c.NextAt.IsZero():
		when = order.FormatTime(c.NextAt)
	}
	result, lastErr := "-", "-"
	if c.Result != "" {
		result = cell(c.Result)
	}
	if c.LastError != "" {
		lastErr = clip(cell(c.LastError), lastErrorWidth)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(c.ID), cell(c.OrderID), order.FormatTime(c.CancelAfter),
		c.Status, c.Attempts, result, when, lastErr)
}

func runCommandsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("commands retry", stderr)
	fs.args = "[ID…]"
	storeURL := fs.String("store", "sqlite://lapse.db", "store URL")
	dead := fs.Bool("dead", false, "retry every DEAD command, instead of naming command ids (one of the two is required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids, err := deadSelection(stderr, "commands", "retry", "command", fs.Args(), *dead)
	if err != nil {
		return err
	}
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.RetryCommands(ctx, store.RetryTasksParams{IDs: ids, AllDead: *dead})
	if err != nil {
		return fmt.Errorf("%s: retry the cancel commands: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "retried %d DEAD %s\n", n, plural(n, "command", "commands"))
	switch {
	case n == 0 && len(ids) > 0:
		fmt.Fprintln(stderr, "none of these ids names a DEAD command: DONE, retried or purged since, or not a command id (lapse commands list --dead shows them)")
	case n > 0:
		fmt.Fprintln(stderr, "they are due now: a running lapse serve --order-service sends them (with the same command ids) within its dispatcher's interval")
	}
	return nil
}

func runCommandsPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("commands purge", stderr)
	fs.args = "[ID…]"
	storeURL := fs.String("store", "sqlite://lapse.db", "store URL")
	dead := fs.Bool("dead", false, "purge every DEAD command, instead of naming command ids (one of the two is required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids, err := deadSelection(stderr, "commands", "purge", "command", fs.Args(), *dead)
	if err != nil {
		return err
	}
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.PurgeCommands(ctx, store.RetryTasksParams{IDs: ids, AllDead: *dead})
	if err != nil {
		return fmt.Errorf("%s: purge the cancel commands: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "purged %d DEAD %s\n", n, plural(n, "command", "commands"))
	switch {
	case n == 0 && len(ids) > 0:
		fmt.Fprintln(stderr, "none of these ids names a DEAD command: DONE, retried or purged since, or not a command id (lapse commands list --dead shows them)")
	case n > 0:
		fmt.Fprintln(stderr, "their orders stay CANCELLING: lapse no longer asks the order service about them, and lapse audit reports each (commanded_unanswered)")
	}
	return nil
}
