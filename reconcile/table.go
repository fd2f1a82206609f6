package reconcile

import (
	"fmt"
	"io"
	"slices"
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
	writeHead(tw, "reconciliation", rep.From, rep.To, "the "+rep.Source, rep.OK())
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
			gateway := string(m.GatewayStatus)
			if gateway == "" { // not asked: lapse recorded no attempt to ask about
				gateway = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Kind, idCell(m.OrderID), lapse, lapseAmount,
				gateway, m.GatewayAmount, idCell(m.PaymentID), cell(m.Detail))
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

// WriteStockTable writes a stock reconciliation for a person: a summary,
// the count of each kind of mismatch, then the examples as an aligned table
// (left out when clean). For machines, encode the StockReport as JSON.
func WriteStockTable(w io.Writer, rep StockReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	against := "the inventory's ledger"
	if rep.Inventory != "" {
		against = "the ledger of " + showID(rep.Inventory)
	}
	writeHead(tw, "stock reconciliation", rep.From, rep.To, against, rep.OK())
	fmt.Fprintf(tw, "%d lapse orders with a reservation (%d open), %d ledger rows (%d of other reservations), %d rechecked; %d orders mismatched\n",
		rep.Orders, rep.Open, rep.LedgerRows, rep.OtherRows, rep.Rechecked, rep.MismatchedOrders)
	if rep.ItemsChecked > 0 {
		fmt.Fprintf(tw, "items of %d reservations compared with their orders'\n", rep.ItemsChecked)
	}
	if rep.OK() {
		return tw.Flush()
	}
	kinds := make([]Kind, 0, len(rep.Counts))
	for k := range rep.Counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(tw, "\nKIND\tCOUNT\n")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t%d\n", k, rep.Counts[k])
	}
	fmt.Fprintf(tw, "\nMISMATCHES (examples of each kind)\n")
	fmt.Fprintln(tw, "KIND\tORDER\tRESERVATION\tLAPSE\tTASKS\tLEDGER\tDETAIL")
	for _, m := range rep.Mismatches {
		var tasks []string
		for _, t := range m.Tasks {
			tasks = append(tasks, string(t.Action)+" "+string(t.Status))
		}
		var ledger []string
		for _, a := range []string{"reserve", "release", "confirm"} {
			if n := m.Ledger[a]; n > 0 {
				ledger = append(ledger, fmt.Sprintf("%s×%d", a, n))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Kind, idCell(m.OrderID), idCell(m.ReservationID), m.LapseStatus,
			cell(strings.Join(tasks, ", ")), cell(strings.Join(ledger, " ")), cell(m.Detail))
	}
	return tw.Flush()
}

// WriteOrderServiceTable writes an order-service reconciliation for a
// person: a summary, the count of each kind of mismatch, the examples and
// the errors as aligned tables (left out when there are none). For
// machines, encode the OrderServiceReport as JSON.
func WriteOrderServiceTable(w io.Writer, rep OrderServiceReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	against := "the order service"
	if rep.OrderService != "" {
		against = "the order service " + showID(rep.OrderService)
	}
	writeHead(tw, "reconciliation", rep.From, rep.To, against, rep.OK())
	mismatched := 0
	for _, n := range rep.Counts {
		mismatched += n
	}
	fmt.Fprintf(tw, "%d lapse orders, %d answered (%d cancels in flight); %d orders mismatched, %d errors\n",
		rep.Orders, rep.Asked, rep.InFlight, mismatched, len(rep.Errors))
	if len(rep.Counts) > 0 {
		kinds := make([]Kind, 0, len(rep.Counts))
		for k := range rep.Counts {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		fmt.Fprintf(tw, "\nKIND\tCOUNT\n")
		for _, k := range kinds {
			fmt.Fprintf(tw, "%s\t%d\n", k, rep.Counts[k])
		}
		fmt.Fprintf(tw, "\nMISMATCHES (examples of each kind)\n")
		fmt.Fprintln(tw, "KIND\tORDER\tLAPSE\tSHOP\tCOMMAND\tDETAIL")
		for _, m := range rep.Mismatches {
			command := "-"
			if m.Command != nil {
				command = showID(m.Command.ID) + " " + string(m.Command.Status)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Kind, idCell(m.OrderID), m.LapseStatus, m.ShopStatus, command, cell(m.Detail))
		}
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintf(tw, "\nERRORS (the order service could not tell; run again)\n")
		fmt.Fprintln(tw, "ORDER\tERROR")
		for _, e := range rep.Errors {
			fmt.Fprintf(tw, "%s\t%s\n", idCell(e.OrderID), cell(e.Error))
		}
	}
	return tw.Flush()
}

// writeHead is the first line of every reconciliation's table: what it
// compared, over which window of created_at (zero: open), and the verdict.
func writeHead(w io.Writer, what string, from, to time.Time, against string, ok bool) {
	span := func(t time.Time, zero string) string {
		if t.IsZero() {
			return zero
		}
		return t.UTC().Format(time.RFC3339)
	}
	verdict := "OK"
	if !ok {
		verdict = "NOT OK"
	}
	fmt.Fprintf(w, "%s of orders created %s .. %s against %s: %s\n", what, span(from, "(beginning)"), span(to, "(now)"), against, verdict)
}
