package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/internal/money"
	"github.com/lapsehq/lapse/order"
)

// apiFlags are the flags of the commands that talk to a running lapse.
type apiFlags struct {
	server *string
	token  secretFlag
	asJSON *bool
}

// addAPIFlags declares them; --json only when jsonUsage is not "" (asJSON
// is nil then).
func addAPIFlags(fs *flagSet, jsonUsage string) apiFlags {
	f := apiFlags{
		server: fs.String("server", "http://127.0.0.1:8080", "the lapse server's URL"),
		token:  addSecretFlag(fs, "api-token", "the bearer token lapse serve was started with (--api-token)"),
	}
	if jsonUsage != "" {
		f.asJSON = fs.Bool("json", false, jsonUsage)
	}
	return f
}

// client returns a client of the server; a bad URL or token flag is a
// usage error.
func (f apiFlags) client(stderr io.Writer, cmd string) (*client.Client, error) {
	token, err := f.token.get()
	if err != nil {
		fmt.Fprintf(stderr, "lapse %s: %v\n", cmd, err)
		return nil, errUsage
	}
	c, err := client.New(*f.server, client.WithToken(token))
	if err != nil {
		fmt.Fprintf(stderr, "lapse %s: --server: %v\n", cmd, err)
		return nil, errUsage
	}
	return c, nil
}

// apiFailure makes err the command's exit 1, its message the API's code and
// message (or the transport's error) without the client's wrapping.
func apiFailure(err error) error {
	var ae *client.Error
	if errors.As(err, &ae) {
		if ae.Code == "" {
			return exitError{1, fmt.Errorf("HTTP %d: %s", ae.Status, cell(ae.Message))}
		}
		return exitError{1, fmt.Errorf("%s: %s", cell(ae.Code), cell(ae.Message))}
	}
	return exitError{1, printable{err}}
}

// printable is an error whose message is printed with cell's escapes: a
// transport or decoding error may quote what the server sent.
type printable struct{ err error }

func (p printable) Error() string { return cell(p.err.Error()) }
func (p printable) Unwrap() error { return p.err }

// oneID parses a subcommand that takes exactly one order id.
func oneID(fs *flagSet, args []string) (string, error) {
	fs.args = "ID"
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(fs.Output(), "%s: want one order id, got %d arguments\n", fs.Name(), fs.NArg())
		return "", errUsage
	}
	return fs.Arg(0), nil
}

func runOrdersGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("orders get", stderr)
	f := addAPIFlags(fs, "the order as JSON (GET /v1/orders/{id}'s answer) instead of a table")
	id, err := oneID(fs, args)
	if err != nil {
		return err
	}
	c, err := f.client(stderr, "orders get")
	if err != nil {
		return err
	}
	o, err := c.GetOrder(ctx, id)
	if err != nil {
		return apiFailure(err)
	}
	return writeOrder(stdout, o, *f.asJSON)
}

func runOrdersCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("orders cancel", stderr)
	f := addAPIFlags(fs, "the cancelled order as JSON instead of a table")
	force := fs.Bool("force", false, "an operator's cancel (with --reason operator): a PENDING or PAYING order, past its deadline or not, its trade closed at the gateway first")
	reason := fs.String("reason", "", "with --force: operator (the only reason an operator gives)")
	noClose := fs.Bool("no-close", false, "with --force: do not close the trade at the gateway — you closed it by hand (or there is none)")
	// One order's fate: never from the environment.
	fs.commandLineOnly("force")
	fs.commandLineOnly("reason")
	fs.commandLineOnly("no-close")
	id, err := oneID(fs, args)
	if err != nil {
		return err
	}
	switch {
	case !*force && (*reason != "" || *noClose):
		fmt.Fprintln(stderr, "lapse orders cancel: --reason and --no-close go with --force (an operator's cancel)")
		return errUsage
	case *force && *reason != string(order.ReasonOperator):
		fmt.Fprintf(stderr, "lapse orders cancel: --force needs --reason operator, got %s\n", strconv.Quote(*reason))
		return errUsage
	}
	c, err := f.client(stderr, "orders cancel")
	if err != nil {
		return err
	}
	var o order.Order
	if *force {
		o, err = c.CancelAsOperator(ctx, id, client.OperatorCancel{NoClose: *noClose})
	} else {
		o, err = c.Cancel(ctx, id)
	}
	if err != nil {
		return apiFailure(err)
	}
	return writeOrder(stdout, o, *f.asJSON)
}

// runOrdersCheck is `lapse orders check ID`: the gateway check of a PAYING
// order now (POST /v1/orders/{id}/check), what the gateway said, then the
// order after it.
func runOrdersCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("orders check", stderr)
	f := addAPIFlags(fs, "the answer as JSON ({gateway, order}: POST /v1/orders/{id}/check's) instead of a table")
	id, err := oneID(fs, args)
	if err != nil {
		return err
	}
	c, err := f.client(stderr, "orders check")
	if err != nil {
		return err
	}
	res, err := c.Check(ctx, id)
	if err != nil {
		return apiFailure(err)
	}
	if *f.asJSON {
		return encodeJSON(stdout, res)
	}
	g := res.Gateway
	said := "the gateway says " + cell(g.State)
	if g.PaymentID != "" {
		said += " (payment " + cell(g.PaymentID)
		if g.AmountCents != 0 {
			said += ", " + money.Format(g.AmountCents, cell(cmp.Or(g.Currency, res.Order.Currency)))
		}
		said += ")"
	}
	fmt.Fprintln(stdout, said)
	fmt.Fprintln(stdout)
	return writeOrder(stdout, res.Order, false)
}

func runOrdersExtend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("orders extend", stderr)
	f := addAPIFlags(fs, "the extended order as JSON instead of a table")
	expiresAt := fs.String("expires-at", "", "the new end of the payment window, RFC 3339 (2030-01-02T15:04:05Z)")
	timeout := fs.Duration("timeout", 0, positive, "the new payment window, from the server's now (30m, 2h)")
	// One order's deadline: never from an environment that may hold
	// another command's LAPSE_TIMEOUT.
	fs.commandLineOnly("expires-at")
	fs.commandLineOnly("timeout")
	id, err := oneID(fs, args)
	if err != nil {
		return err
	}
	if (*expiresAt == "") == (*timeout == 0) {
		fmt.Fprintln(stderr, "lapse orders extend: give exactly one of --expires-at and --timeout")
		return errUsage
	}
	var at time.Time
	if *expiresAt != "" {
		if at, err = time.Parse(time.RFC3339Nano, *expiresAt); err != nil {
			fmt.Fprintf(stderr, "lapse orders extend: --expires-at %s: want an RFC 3339 time such as 2030-01-02T15:04:05Z\n", strconv.Quote(*expiresAt))
			return errUsage
		}
	}
	c, err := f.client(stderr, "orders extend")
	if err != nil {
		return err
	}
	var o order.Order
	if *timeout != 0 {
		o, err = c.ExtendFor(ctx, id, *timeout)
	} else {
		o, err = c.Extend(ctx, id, at)
	}
	if err != nil {
		return apiFailure(err)
	}
	return writeOrder(stdout, o, *f.asJSON)
}

func runOrdersList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("orders list", stderr)
	f := addAPIFlags(fs, "one JSON object per line (an order of GET /v1/orders) instead of a table")
	status := fs.Enum("status", "", "only orders in this status: PENDING, PAYING, PAID or CANCELLED (any case)",
		string(order.Pending), string(order.Paying), string(order.Paid), string(order.Cancelled))
	limit := fs.Int("limit", 50, "most orders listed (read 500 a page)")
	cursor := fs.String("cursor", "", "list from here: the cursor a previous list printed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *status != "" && !order.Status(*status).Valid() {
		fmt.Fprintf(stderr, "lapse orders list: --status %q: want PENDING, PAYING, PAID or CANCELLED\n", *status)
		return errUsage
	}
	if *limit < 1 {
		fmt.Fprintf(stderr, "lapse orders list: --limit %d: want at least 1\n", *limit)
		return errUsage
	}
	c, err := f.client(stderr, "orders list")
	if err != nil {
		return err
	}
	var orders []order.Order
	p := client.ListOrders{Status: order.Status(*status), Cursor: *cursor}
	for {
		p.Limit = min(*limit-len(orders), 500)
		page, err := c.ListOrders(ctx, p)
		if err != nil {
			return apiFailure(err)
		}
		orders = append(orders, page.Orders...)
		p.Cursor = page.NextCursor
		if p.Cursor == "" || len(orders) >= *limit {
			break
		}
	}
	if err := writeOrders(stdout, orders, *f.asJSON); err != nil {
		return fmt.Errorf("write the list: %w", err)
	}
	if len(orders) == 0 {
		fmt.Fprintln(stderr, "no orders")
	}
	if p.Cursor != "" {
		fmt.Fprintf(stderr, "more: run again with --cursor %s\n", cell(p.Cursor))
	}
	return nil
}

func writeOrders(w io.Writer, orders []order.Order, asJSON bool) error {
	if asJSON {
		for _, o := range orders {
			if err := encodeJSON(w, o); err != nil {
				return err
			}
		}
		return nil
	}
	if len(orders) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tAMOUNT\tITEMS\tCREATED\tEXPIRES\tENDED")
	for _, o := range orders {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(o.ID), cell(string(o.Status)), amount(o), clip(cell(items(o.Items)), 40),
			order.FormatTime(o.CreatedAt), order.FormatTime(o.ExpiresAt), ended(o))
	}
	return tw.Flush()
}

// writeOrder prints one order: its fields, then its payment attempts and
// stock tasks when it has any.
func writeOrder(w io.Writer, o order.Order, asJSON bool) error {
	if asJSON {
		return encodeJSON(w, o)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", cell(o.ID))
	row("status", cell(string(o.Status)))
	row("amount", amount(o))
	row("items", cell(items(o.Items)))
	row("created_at", order.FormatTime(o.CreatedAt))
	row("expires_at", order.FormatTime(o.ExpiresAt))
	row("cancel_after", order.FormatTime(o.CancelAfter))
	if !o.PaidAt.IsZero() {
		row("paid_at", order.FormatTime(o.PaidAt))
	}
	if !o.CancelledAt.IsZero() {
		row("cancelled_at", order.FormatTime(o.CancelledAt)+" ("+cell(string(o.CancelReason))+")")
	}
	if o.PaymentID != "" {
		row("payment_id", cell(o.PaymentID))
	}
	row("payment_attempts", strconv.Itoa(o.PaymentAttempts)+" failed")
	if o.RefundRequired {
		row("refund_required", "yes: a payment succeeded that did not pay the order")
	}
	if o.ReservationID != "" {
		row("reservation_id", cell(o.ReservationID))
	}
	row("version", strconv.FormatInt(o.Version, 10))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(o.Payments) > 0 {
		fmt.Fprintln(w, "\npayments:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PAYMENT ID\tSTATUS\tAMOUNT\tCREATED\tUPDATED")
		for _, p := range o.Payments {
			amt := "-"
			if p.AmountCents != 0 {
				amt = money.Format(p.AmountCents, cell(cmp.Or(p.Currency, o.Currency)))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", cell(p.PaymentID), cell(string(p.Status)), amt, order.FormatTime(p.CreatedAt), order.FormatTime(p.UpdatedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(o.Tasks) > 0 {
		fmt.Fprintln(w, "\nstock tasks:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TASK ID\tACTION\tSTATUS\tATTEMPTS\tRESULT\tLAST ERROR")
		for _, tk := range o.Tasks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", cell(tk.ID), cell(string(tk.Action)), cell(string(tk.Status)), tk.Attempts, dash(cell(tk.Result)), dash(clip(cell(tk.LastError), lastErrorWidth)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// amount is an order's amount as the dashboard shows it: "19.99 USD",
// "1,299 JPY" (money.Format).
func amount(o order.Order) string {
	return money.Format(o.AmountCents, cell(o.Currency))
}

// items is "tee×2, cap×1".
func items(its []order.Item) string {
	parts := make([]string, len(its))
	for i, it := range its {
		parts[i] = it.SKU + "×" + strconv.FormatInt(it.Qty, 10)
	}
	return strings.Join(parts, ", ")
}

// ended says how an order ended, "-" while it is open.
func ended(o order.Order) string {
	switch {
	case !o.PaidAt.IsZero():
		return "paid " + order.FormatTime(o.PaidAt)
	case !o.CancelledAt.IsZero():
		return "cancelled (" + cell(string(o.CancelReason)) + ") " + order.FormatTime(o.CancelledAt)
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runEventsTail is `lapse events tail`: it follows a running lapse's outbox
// through GET /v1/events, polling. What the API shows is what waits — an
// event's delivery to a sink while that sink has not taken it — so the tail
// prints each delivery when it first appears in that list (pending) and
// again if it dies (dead: a sink refused it for good). An event a sink
// takes between two polls is never seen: this is a window on what is stuck
// or slow, not a feed of every event (a sink is that).
func runEventsTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events tail", stderr)
	f := addAPIFlags(fs, "one JSON object per line (GET /v1/events's shape) instead of table lines")
	sink := addSinkFilter(fs, "only this sink's deliveries")
	interval := fs.Duration("interval", time.Second, span{min: 50 * time.Millisecond}, "how often the outbox is polled")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := f.client(stderr, "events tail")
	if err != nil {
		return err
	}
	t := &tail{c: c, sink: *sink, out: stdout, asJSON: *f.asJSON, dead: map[delivery]bool{}}
	// What is dead already is known, not news: `lapse events list --dead`
	// shows it. The pending list is followed from its end.
	n, err := t.poll(ctx, false)
	if err != nil {
		return apiFailure(err)
	}
	fmt.Fprintf(stderr, "following %s (after seq %d, %d dead already); Ctrl-C stops\n", c.URL(), t.after, n)
	if !*f.asJSON {
		fmt.Fprintf(stdout, tailFormat, "STATE", "SEQ", "EVENT ID", "TYPE", "ORDER ID", "SINK", "ATTEMPTS", "LAST ERROR")
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := t.poll(ctx, true); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return apiFailure(err)
		}
	}
}

const tailFormat = "%-7s  %6s  %-36s  %-21s  %-24s  %-10s  %8s  %s\n"

type delivery struct {
	seq  int64
	sink string
}

type tail struct {
	c      *client.Client
	sink   string
	out    io.Writer
	asJSON bool
	after  int64             // the last seq listed as pending
	dead   map[delivery]bool // the dead deliveries seen
}

// poll reads the pending list after t.after and the whole dead list,
// printing (when print) what is new in each; it returns the number of dead
// deliveries.
func (t *tail) poll(ctx context.Context, print bool) (int, error) {
	for {
		page, err := t.c.ListEvents(ctx, client.ListEvents{Sink: t.sink, After: t.after, Limit: 500})
		if err != nil {
			return 0, err
		}
		for _, ev := range page.Events {
			t.after = max(t.after, ev.Seq)
			if print && !ev.Dead {
				if err := t.print("pending", ev); err != nil {
					return 0, err
				}
			}
		}
		if page.NextAfter == 0 {
			break
		}
	}
	seen := map[delivery]bool{}
	for p := (client.ListEvents{Dead: true, Sink: t.sink, Limit: 500}); ; {
		page, err := t.c.ListEvents(ctx, p)
		if err != nil {
			return 0, err
		}
		for _, ev := range page.Events {
			d := delivery{ev.Seq, ev.Sink}
			seen[d] = true
			if !t.dead[d] && print {
				if err := t.print("dead", ev); err != nil {
					return 0, err
				}
			}
		}
		if p.After = page.NextAfter; p.After == 0 {
			break
		}
	}
	t.dead = seen // a retried delivery leaves the dead list; if it dies again, it is news
	return len(seen), nil
}

func (t *tail) print(state string, ev client.Event) error {
	if t.asJSON {
		return encodeJSON(t.out, ev)
	}
	_, err := fmt.Fprintf(t.out, tailFormat, state, strconv.FormatInt(ev.Seq, 10), cell(ev.ID), cell(ev.Type), clip(cell(ev.OrderID), 24),
		cell(ev.Sink), strconv.Itoa(ev.Attempts), dash(clip(cell(ev.LastError), lastErrorWidth)))
	return err
}
