package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/internal/money"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// lapse refunds and lapse payments refund: the money lapse owes back, as
// an operator handles it, through a running lapse's API (GET /v1/refunds,
// POST /v1/refunds/retry, POST /v1/payments/{payment_id}/refund). Unlike
// lapse tasks and lapse commands they do not open the store: a retry wakes
// the refund dispatcher of the instance asked, and a refund goes through
// its gateway.

func runRefundsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRefundsListPaged(ctx, args, stdout, stderr, lapse.MaxRefundsLimit)
}

// runRefundsListPaged is refunds list reading pageSize refunds at a time.
func runRefundsListPaged(ctx context.Context, args []string, stdout, stderr io.Writer, pageSize int) error {
	return workList[order.Refund]{
		command: "refunds", noun: "refund", what: "refunds", viaAPI: true,
		deadHelp:   "refused by the gateway, or failed too long",
		jsonShape:  "GET /v1/refunds's refund shape",
		header:     "PAYMENT ID\tORDER\tAMOUNT\tSTATUS\tATTEMPTS\tREFUND ID\tNEXT / DONE / DEAD AT\tLAST ERROR / NOTE",
		notFoundOf: "(no attempt of it owed money back, or not an order lapse holds)",
		page: func(ctx context.Context, w workConn, p store.ListTasksParams) ([]order.Refund, string, error) {
			page, err := w.c.ListRefunds(ctx, client.ListRefunds{Dead: p.Dead, OrderID: p.OrderID, Limit: p.Limit, After: p.After})
			return page.Refunds, page.NextAfter, err
		},
		status: func(r order.Refund) order.TaskStatus { return r.Status },
		row:    writeRefundRow,
	}.run(ctx, args, stdout, stderr, pageSize)
}

// writeRefundRow prints one refund for a person: a refund recorded by hand
// shows its note and who recorded it where others show their last error.
func writeRefundRow(w io.Writer, r order.Refund) {
	last := "-"
	switch {
	case r.Manual:
		last = clip(cell("by hand ("+r.Actor+"): "+r.Note), lastErrorWidth)
	case r.LastError != "":
		last = clip(cell(r.LastError), lastErrorWidth)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(r.PaymentID), cell(r.OrderID), money.Format(r.AmountCents, cell(r.Currency)),
		r.Status, r.Attempts, dash(cell(r.RefundID)), workWhen(r.Status, r.NextAt, r.DoneAt, r.DeadAt), last)
}

func runRefundsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return workAction{command: "refunds", verb: "retry", done: "retried", noun: "refund", what: "refunds", viaAPI: true,
		since: "DONE or retried since",
		act: func(ctx context.Context, w workConn, p store.RetryTasksParams) (int64, error) {
			return w.c.RetryRefunds(ctx, client.DeadRefunds{IDs: p.IDs, AllDead: p.AllDead})
		},
		after: "they are due now: the lapse serve --auto-refund asked refunds them within moments (others within their dispatcher's interval), each under its attempt's key",
	}.run(ctx, args, stdout, stderr)
}

// runPaymentsRefund is `lapse payments refund PAYMENT_ID`: the attempt's
// money given back now through the gateway, or with --manual a refund made
// by hand recorded (POST /v1/payments/{payment_id}/refund); then the order.
func runPaymentsRefund(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("payments refund", stderr)
	f := addAPIFlags(fs, "the answer as JSON ({order, pending, refund_id}: POST /v1/payments/{payment_id}/refund's) instead of a table")
	manual := fs.Bool("manual", false, "record a refund made outside lapse (the gateway's console): the gateway is not asked; needs --note")
	note := fs.String("note", "", "how the money went back (required with --manual; recorded in order.refunded with who and when)")
	refundID := fs.String("refund-id", "", "with --manual: the gateway's id of the refund made by hand")
	// One payment's money: never from the environment.
	fs.commandLineOnly("manual")
	fs.commandLineOnly("note")
	fs.commandLineOnly("refund-id")
	fs.args = "PAYMENT_ID"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		fmt.Fprintf(stderr, "lapse payments refund: want one payment id, got %d arguments\n", fs.NArg())
		return errUsage
	case *manual && strings.TrimSpace(*note) == "":
		fmt.Fprintln(stderr, "lapse payments refund: --manual needs --note saying how the money went back")
		return errUsage
	case *refundID != "" && !*manual:
		fmt.Fprintln(stderr, "lapse payments refund: --refund-id goes with --manual (a refund lapse makes has the gateway's id)")
		return errUsage
	}
	paymentID := fs.Arg(0)
	c, err := f.client(stderr, "payments refund")
	if err != nil {
		return err
	}
	a, err := c.RefundPayment(ctx, paymentID, client.Refund{Manual: *manual, Note: *note, RefundID: *refundID})
	if err != nil {
		return apiFailure(err)
	}
	if *f.asJSON {
		return encodeJSON(stdout, a)
	}
	switch {
	case a.Pending:
		fmt.Fprintf(stdout, "the gateway is processing the refund of %s (refund %s): it stays REFUND_REQUIRED until the gateway says it is done\n",
			cell(paymentID), dash(cell(a.RefundID)))
	case *manual:
		fmt.Fprintf(stdout, "recorded the refund of %s made by hand\n", cell(paymentID))
	default:
		fmt.Fprintf(stdout, "refunded %s (refund %s)\n", cell(paymentID), dash(cell(a.RefundID)))
	}
	fmt.Fprintln(stdout)
	return writeOrder(stdout, a.Order, false)
}
