package reconcile

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Kind, cell(m.OrderID), lapse, lapseAmount,
				m.GatewayStatus, m.GatewayAmount, cell(m.PaymentID), cell(m.Detail))
		}
	}
	section("MISMATCHES", rep.Mismatches)
	section("KNOWN REFUNDS (lapse flagged refund_required; refund them if not done yet)", rep.KnownRefunds)
	if len(rep.Errors) > 0 {
		fmt.Fprintf(tw, "\nERRORS (gateway state unknown; run again)\n")
		fmt.Fprintln(tw, "ORDER\tERROR")
		for _, e := range rep.Errors {
			fmt.Fprintf(tw, "%s\t%s\n", cell(e.OrderID), cell(e.Error))
		}
	}
	return tw.Flush()
}

// cell keeps a value on one line and out of the column separators.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
