package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

// workFlags say where a work command (tasks, commands, refunds) reads and
// acts: the store itself (--store; tasks and commands, running lapse or
// not), or a running lapse through its API (--server, --api-token;
// refunds, whose retry wakes the refund dispatcher of that instance).
type workFlags struct {
	storeURL *string
	api      apiFlags
	viaAPI   bool
}

// addWorkFlags declares them, with --json (jsonUsage) when it is not "".
func addWorkFlags(fs *flagSet, viaAPI bool, jsonUsage string) (workFlags, *bool) {
	if viaAPI {
		f := addAPIFlags(fs, jsonUsage)
		return workFlags{api: f, viaAPI: true}, f.asJSON
	}
	f := workFlags{storeURL: fs.String("store", "sqlite://lapse.db", storeUsage)}
	if jsonUsage == "" {
		return f, nil
	}
	return f, fs.Bool("json", false, jsonUsage)
}

// workConn is the store or the API client the flags named.
type workConn struct {
	st    store.Store
	c     *client.Client
	where string // the store's URL, redacted, for messages
}

// open connects to what the flags named (the store read-only if asked).
func (f workFlags) open(ctx context.Context, stderr io.Writer, cmd string, readOnly bool) (workConn, error) {
	if f.viaAPI {
		c, err := f.api.client(stderr, cmd)
		return workConn{c: c}, err
	}
	st, err := openEventsStore(ctx, *f.storeURL, readOnly)
	if err != nil {
		return workConn{}, err
	}
	return workConn{st: st, where: redact.URL(*f.storeURL)}, nil
}

// Close closes the store, if one was opened.
func (w workConn) Close() {
	if w.st != nil {
		w.st.Close()
	}
}

// failed is the command's error when doing failed: the API's code and
// message (exit 1), or the store's error under its URL.
func (w workConn) failed(doing string, err error) error {
	if w.c != nil {
		return apiFailure(err)
	}
	return fmt.Errorf("%s: %s: %w", w.where, doing, err)
}

// workList is what `lapse tasks list`, `lapse commands list` and `lapse
// refunds list` share: work lapse sends another service until it answers
// (stock tasks, cancel commands, refunds), listed from the store or
// through the API — the same flags, paging, table or JSON lines and
// messages. Each supplies its words, its page reader and its row.
type workList[T any] struct {
	command    string // "tasks": the command's name
	noun       string // "task"
	what       string // "stock tasks": the list's name in messages
	deadHelp   string // who made them DEAD, for --dead's help
	jsonShape  string // the API's shape of one, for --json's help
	header     string // the table's header row, tab-separated
	notFoundOf string // why an order may have none, after "no <what> for order ID "
	viaAPI     bool   // read through a running lapse's API (workFlags)
	page       func(ctx context.Context, w workConn, p store.ListTasksParams) (items []T, nextAfter string, err error)
	status     func(T) order.TaskStatus
	row        func(io.Writer, T)
}

// run is `lapse <command> list`, reading pageSize items at a time.
func (l workList[T]) run(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	fs := newFlagSet(l.command+" list", stderr)
	wf, asJSON := addWorkFlags(fs, l.viaAPI, "one JSON object per line ("+l.jsonShape+") instead of a table")
	dead := fs.Bool("dead", false, "only DEAD "+l.noun+"s ("+l.deadHelp+")")
	orderID := fs.String("order", "", "every "+l.noun+" of this order, DONE ones too")
	fs.commandLineOnly("order")
	limit := fs.Int("limit", 0, "list at most this many "+l.noun+"s (0: all of them)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "lapse %s list: --limit %d: want 0 (all) or more\n", l.command, *limit)
		return errUsage
	}
	if *orderID != "" && (len(*orderID) > maxTaskOrderID || !plainID(*orderID)) {
		fmt.Fprintf(stderr, "lapse %s list: --order %q: want an order id (1 to %d characters, no control characters)\n", l.command, *orderID, maxTaskOrderID)
		return errUsage
	}
	w, err := wf.open(ctx, stderr, l.command+" list", true)
	if err != nil {
		return err
	}
	defer w.Close()

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
		items, next, err := l.page(ctx, w, p)
		if err != nil {
			return w.failed("list the "+l.what, err)
		}
		for _, it := range items {
			if *dead && l.status(it) != order.TaskDead {
				continue // --order with --dead: that order's DEAD ones
			}
			if *limit > 0 && listed == *limit {
				truncated = true
				break
			}
			if tw != nil {
				if listed == 0 {
					fmt.Fprintln(tw, l.header)
				}
				l.row(tw, it)
			} else if err := enc.Encode(it); err != nil {
				return fmt.Errorf("write the list: %w", err)
			}
			listed++
		}
		if truncated || next == "" {
			break
		}
		p.After = next
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write the list: %w", err)
		}
	}
	switch {
	case listed == 0:
		msg := "no " + l.what + " waiting (every " + l.noun + " is DONE)"
		switch {
		case *orderID != "" && *dead:
			msg = "no DEAD " + l.what + " for order " + *orderID
		case *orderID != "":
			msg = "no " + l.what + " for order " + *orderID + " " + l.notFoundOf
		case *dead:
			msg = "no DEAD " + l.what
		}
		fmt.Fprintln(stderr, msg)
	case truncated:
		fmt.Fprintf(stderr, "listed the first %d; more follow (raise --limit, or 0 for all)\n", listed)
	}
	return nil
}

// workWhen is the time a row shows for a task or command: for a PENDING one
// when it is due, for a DONE one when it was done, for a DEAD one when it
// died.
func workWhen(status order.TaskStatus, nextAt, doneAt, deadAt time.Time) string {
	switch {
	case status == order.TaskDead && !deadAt.IsZero():
		return order.FormatTime(deadAt)
	case status == order.TaskDone && !doneAt.IsZero():
		return order.FormatTime(doneAt)
	case status == order.TaskPending && !nextAt.IsZero():
		return order.FormatTime(nextAt)
	}
	return "-"
}

// workAction is `lapse tasks retry`, `lapse commands retry`, `lapse
// commands purge` and `lapse refunds retry`: DEAD work named by id, or
// every DEAD one, acted on in the store or through the API. Each supplies
// its words, the action and what to say after.
type workAction struct {
	command, verb string // "commands", "purge"
	noun, what    string // "command", "cancel commands"
	done          string // "purged": the past of verb
	since         string // what else may have become of an id: "DONE, retried or purged since"
	viaAPI        bool   // act through a running lapse's API (workFlags)
	act           func(ctx context.Context, w workConn, p store.RetryTasksParams) (int64, error)
	after         string // said on stderr when some were acted on
}

func (a workAction) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(a.command+" "+a.verb, stderr)
	fs.args = "[ID…]"
	wf, _ := addWorkFlags(fs, a.viaAPI, "")
	dead := fs.Bool("dead", false, a.verb+" every DEAD "+a.noun+", instead of naming "+a.noun+" ids (one of the two is required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids, err := deadSelection(stderr, a.command, a.verb, a.noun, fs.Args(), *dead)
	if err != nil {
		return err
	}
	w, err := wf.open(ctx, stderr, a.command+" "+a.verb, false)
	if err != nil {
		return err
	}
	defer w.Close()
	n, err := a.act(ctx, w, store.RetryTasksParams{IDs: ids, AllDead: *dead})
	if err != nil {
		return w.failed(a.verb+" the "+a.what, err)
	}
	fmt.Fprintf(stdout, "%s %d DEAD %s\n", a.done, n, plural(n, a.noun, a.noun+"s"))
	switch {
	case n == 0 && len(ids) > 0:
		fmt.Fprintf(stderr, "none of these ids names a DEAD %s: %s, or not a %s id (lapse %s list --dead shows them)\n", a.noun, a.since, a.noun, a.command)
	case n > 0:
		fmt.Fprintln(stderr, a.after)
	}
	return nil
}
