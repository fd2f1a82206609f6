package main

import (
	"context"
	"fmt"
	"io"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
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
		page: func(ctx context.Context, w workConn, p store.ListTasksParams) ([]order.Command, string, error) {
			page, err := lapse.PageCommands(ctx, w.st, p)
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
	return workAction{command: "commands", verb: "retry", done: "retried", noun: "command", what: "cancel commands",
		since: "DONE, retried or purged since",
		act: func(ctx context.Context, w workConn, p store.RetryTasksParams) (int64, error) {
			return w.st.RetryCommands(ctx, p)
		},
		after: "they are due now: a running lapse serve --order-service sends them (with the same command ids) within its dispatcher's interval",
	}.run(ctx, args, stdout, stderr)
}

func runCommandsPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workAction{command: "commands", verb: "purge", done: "purged", noun: "command", what: "cancel commands",
		since: "DONE, retried or purged since",
		act: func(ctx context.Context, w workConn, p store.RetryTasksParams) (int64, error) {
			return w.st.PurgeCommands(ctx, p)
		},
		after: "their orders stay CANCELLING: lapse no longer asks the order service about them, and lapse audit reports each (commanded_unanswered)",
	}.run(ctx, args, stdout, stderr)
}
