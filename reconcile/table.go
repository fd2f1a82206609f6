package reconcile

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// WriteTable writes the report for a person: a summary line, then the
// mismatches, the known refunds and the errors as aligned tables (sections
// with no rows are left out). For machines, encode the Report as JSON.
func WriteTable(w io.Writer, rep Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	span := func(t time.Time, zero string) string {
		if t.IsZero() {
			return zero
		}
		return t.UTC().Format(time.RFC3339)
	}
	verdict := "OK"
	if !rep.OK() {
		verdict = "NOT OK"
	}
	fmt.Fprintf(tw, "reconciliation of orders created %s .. %s against the %s: %s\n",
		span(rep.From, "(beginning)"), span(rep.To, "(now)"), rep.Source, verdict)
	fmt.Fprintf(tw, "%d lapse orders, %d gateway records, %d ignored; %d mismatches, %d known refunds, %d errors\n",
		rep.Orders, rep.GatewayRecords, rep.Ignored, len(rep.Mismatches), len(rep.KnownRefunds), len(rep.Errors))
	section := func(title string, ms []Mismatch) {
		if len(ms) == 0 {
			return
		}
		fmt.Fprintf(tw, "\n%s\n", title)
		fmt.Fprintln(tw, "KIND\tORDER\tLAPSE\tLAPSE CENTS\tGATEWAY\tGATEWAY CENTS\tPAYMENT\tDETAIL")
		for _, m := range ms {
			lapse, lapseAmount := string(m.LapseStatus), strconv.FormatInt(m.LapseAmount, 10)
			if lapse == "" {
				lapse, lapseAmount = "-", "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Kind, idCell(m.OrderID), lapse, lapseAmount,
				m.GatewayStatus, m.GatewayAmount, idCell(m.PaymentID), cell(m.Detail))
		}
	}
	section("MISMATCHES", rep.Mismatches)
	section("KNOWN REFUNDS (lapse flagged refund_required; refund them if not done yet)", rep.KnownRefunds)
	if len(rep.Errors) > 0 {
		fmt.Fprintf(tw, "\nERRORS (gateway state unknown; run again)\n")
		fmt.Fprintln(tw, "ORDER\tERROR")
		for _, e := range rep.Errors {
			fmt.Fprintf(tw, "%s\t%s\n", idCell(e.OrderID), cell(e.Error))
		}
	}
	return tw.Flush()
}

// idCell is an id's column: "-" for none, else the id as showID prints it.
func idCell(s string) string {
	if s == "" {
		return "-"
	}
	return showID(s)
}

// cell is a column of free text (a detail, an error): on one line, out of
// the column separators, with every other character a terminal would act
// on escaped, as in a Go string but without the quotes.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	s = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
	if printable(s) {
		return s
	}
	q := strconv.Quote(s)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}

// showID is an id as it may be shown to a person: unchanged when every
// character of it is printable, else Go-quoted ("o-\x1b[2J1"). Ids come from
// the gateway and its statements; printed raw, one with an escape sequence
// could clear the screen, retitle the terminal or hide the rows after it.
func showID(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether s is valid UTF-8 made of printable characters
// only (strconv.IsPrint: letters, marks, numbers, punctuation, symbols and
// the ASCII space).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
