package reconcile

import (
	"slices"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// The decision table: every lapse status against every gateway answer.
func TestCompare(t *testing.T) {
	t.Parallel()
	lapse := map[string]order.Order{
		"PENDING":          {Status: order.Pending},
		"PAYING":           {Status: order.Paying},
		"PAID":             {Status: order.Paid, PaymentID: "p1"},
		"CANCELLED":        {Status: order.Cancelled, CancelReason: order.ReasonTimeout},
		"CANCELLED+refund": {Status: order.Cancelled, RefundRequired: true, PaymentID: "p1"},
	}
	gateway := map[string]payment.Status{
		"PAID":              {State: payment.StatePaid, PaymentID: "p1", AmountCents: 100},
		"PAID other amount": {State: payment.StatePaid, PaymentID: "p1", AmountCents: 120},
		"PAID other id":     {State: payment.StatePaid, PaymentID: "p2", AmountCents: 100},
		"PAID other both":   {State: payment.StatePaid, PaymentID: "p2", AmountCents: 1},
		"NOT_PAID":          {State: payment.StateNotPaid},
		"PENDING":           {State: payment.StatePending},
		"CLOSED":            {State: payment.StateClosed},
	}
	const refund = "+known_refund"
	want := map[[2]string][]Kind{}
	for g := range gateway {
		want[[2]string{"PENDING", g}] = nil
		want[[2]string{"PAYING", g}] = nil
		want[[2]string{"CANCELLED", g}] = nil
	}
	for _, l := range []string{"PENDING", "PAYING"} {
		for _, g := range []string{"PAID", "PAID other amount", "PAID other id", "PAID other both"} {
			want[[2]string{l, g}] = []Kind{KindPaidButOpen}
		}
	}
	for _, g := range []string{"PAID", "PAID other amount", "PAID other id", "PAID other both"} {
		want[[2]string{"CANCELLED", g}] = []Kind{KindCancelledButPaid}
	}
	want[[2]string{"CANCELLED", "PENDING"}] = []Kind{KindCancelledButPending}
	for _, l := range []string{"PAID", "CANCELLED+refund"} {
		extra := []Kind{}
		if l == "CANCELLED+refund" {
			extra = []Kind{refund}
		}
		want[[2]string{l, "PAID"}] = extra
		want[[2]string{l, "PAID other amount"}] = append([]Kind{KindAmountMismatch}, extra...)
		want[[2]string{l, "PAID other id"}] = append([]Kind{KindPaymentIDMismatch}, extra...)
		want[[2]string{l, "PAID other both"}] = append([]Kind{KindAmountMismatch, KindPaymentIDMismatch}, extra...)
		for _, g := range []string{"NOT_PAID", "PENDING", "CLOSED"} {
			want[[2]string{l, g}] = []Kind{KindPaidButNotAtGateway}
		}
	}
	if len(want) != len(lapse)*len(gateway) {
		t.Fatalf("the table has %d cells, want %d", len(want), len(lapse)*len(gateway))
	}
	for cell, kinds := range want {
		o := lapse[cell[0]]
		o.ID, o.AmountCents = "o", 100
		ms, r := compare(o, gateway[cell[1]], false)
		var got []Kind
		for _, m := range ms {
			got = append(got, m.Kind)
			if m.OrderID != "o" || m.LapseStatus != o.Status || m.GatewayStatus != gateway[cell[1]].State || m.Detail == "" {
				t.Errorf("lapse %s, gateway %s: row %+v", cell[0], cell[1], m)
			}
		}
		if r != nil {
			got = append(got, refund)
		}
		if !slices.Equal(got, kinds) && !(len(got) == 0 && len(kinds) == 0) {
			t.Errorf("lapse %s, gateway %s: %v, want %v", cell[0], cell[1], got, kinds)
		}
	}
}
