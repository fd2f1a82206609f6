package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// maxTaskOrderID bounds --order: lapse's order ids are at most 64
// characters (a longer one names no order).
const maxTaskOrderID = 64

// maxTaskID bounds an id given to retry or purge (a task's, a command's).
const maxTaskID = 255

func runTasksList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTasksListPaged(ctx, args, stdout, stderr, lapse.MaxTasksLimit)
}

// runTasksListPaged is tasks list reading pageSize tasks at a time.
func runTasksListPaged(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	return workList[order.StockTask]{
		command: "tasks", noun: "task", what: "stock tasks",
		deadHelp:   "rejected by the inventory, or failed too long",
		jsonShape:  "GET /v1/tasks's task shape",
		header:     "ID\tORDER\tACTION\tRESERVATION\tSTATUS\tATTEMPTS\tRESULT\tNEXT / DONE / DEAD AT\tLAST ERROR",
		notFoundOf: "(not an order whose stock a remote inventory holds, or not cancelled or paid yet)",
		page: func(ctx context.Context, w workConn, p store.ListTasksParams) ([]order.StockTask, string, error) {
			page, err := lapse.PageTasks(ctx, w.st, p)
			return page.Tasks, page.NextAfter, err
		},
		status: func(t order.StockTask) order.TaskStatus { return t.Status },
		row:    writeTaskRow,
	}.run(ctx, args, stdout, stderr, pageSize)
}

// writeTaskRow prints one task for a person.
func writeTaskRow(w io.Writer, t order.StockTask) {
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
		t.Status, t.Attempts, dash(t.Result), workWhen(t.Status, t.NextAt, t.DoneAt, t.DeadAt), lastErr)
}

func runTasksRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workAction{command: "tasks", verb: "retry", done: "retried", noun: "task", what: "stock tasks",
		since: "DONE or retried since",
		act: func(ctx context.Context, w workConn, p store.RetryTasksParams) (int64, error) {
			return w.st.RetryTasks(ctx, p)
		},
		after: "they are due now: a running lapse serve sends them within its dispatcher's interval",
	}.run(ctx, args, stdout, stderr)
}

// deadSelection checks what `lapse <command> <verb>` (tasks retry,
// commands retry, commands purge) names: the ids given, or with dead every
// DEAD one, never both nor neither; a usage message on stderr otherwise.
func deadSelection(stderr io.Writer, command, verb, noun string, ids []string, dead bool) ([]string, error) {
	switch {
	case len(ids) == 0 && !dead:
		fmt.Fprintf(stderr, "lapse %s %s: name the %ss to %s (their ids, as lapse %s list --dead shows them), or give --dead to %s every DEAD one\n",
			command, verb, noun, verb, command, verb)
		return nil, errUsage
	case len(ids) > 0 && dead:
		fmt.Fprintf(stderr, "lapse %s %s: give %s ids or --dead, not both\n", command, verb, noun)
		return nil, errUsage
	}
	for _, id := range ids {
		if len(id) > maxTaskID || !plainID(id) {
			fmt.Fprintf(stderr, "lapse %s %s: %q: want a %s id (1 to %d characters, no control characters), as lapse %s list shows it\n",
				command, verb, id, noun, maxTaskID, command)
			return nil, errUsage
		}
	}
	return ids, nil
}

// plainID reports whether s can be an id: not empty, UTF-8, no control
// characters (it would be printed, and no store holds such an id).
func plainID(s string) bool {
	return s != "" && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
