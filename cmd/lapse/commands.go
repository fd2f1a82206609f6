package main

import (
	"context"
	"fmt"
	"io"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

func runCommandsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runCommandsListPaged(ctx, args, stdout, stderr, lapse.MaxCommandsLimit)
}

// runCommandsListPaged is commands list reading pageSize commands at a time.
func runCommandsListPaged(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	return workList[order.Command]{
		command: "commands", noun: "command", what: "cancel commands",
		deadHelp:   "refused by the order service, or failed too long",
		jsonShape:  "GET /v1/commands's command shape",
		header:     "ID\tORDER\tCANCEL AFTER\tSTATUS\tATTEMPTS\tRESULT\tNEXT / DONE / DEAD AT\tLAST ERROR",
		notFoundOf: "(not past its deadline in order-service mode, or not an order lapse holds)",
		page: func(ctx context.Context, st store.Store, p store.ListTasksParams) ([]order.Command, string, error) {
			page, err := lapse.PageCommands(ctx, st, p)
			return page.Commands, page.NextAfter, err
		},
		status: func(c order.Command) order.TaskStatus { return c.Status },
		row:    writeCommandRow,
	}.run(ctx, args, stdout, stderr, pageSize)
}

// writeCommandRow prints one command for a person.
func writeCommandRow(w io.Writer, c order.Command) {
	result, lastErr := "-", "-"
	if c.Result != "" {
		result = cell(c.Result)
	}
	if c.LastError != "" {
		lastErr = clip(cell(c.LastError), lastErrorWidth)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(c.ID), cell(c.OrderID), order.FormatTime(c.CancelAfter),
		c.Status, c.Attempts, result, workWhen(c.Status, c.NextAt, c.DoneAt, c.DeadAt), lastErr)
}

func runCommandsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("commands retry", stderr)
	fs.args = "[ID…]"
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
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
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
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
