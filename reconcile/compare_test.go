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

// compareAttempts, case by case: lapse's order and its attempts against
// the gateway's answer about each attempt.
func TestCompareAttempts(t *testing.T) {
	t.Parallel()
	paid := func(id string, cents int64) payment.Status {
		return payment.Status{State: payment.StatePaid, PaymentID: id, AmountCents: cents}
	}
	notPaid := payment.Status{State: payment.StateNotPaid}
	pending := payment.Status{State: payment.StatePending}
	closed := payment.Status{State: payment.StateClosed}
	a := func(id string, st order.PaymentStatus, cents int64, g payment.Status) attempt {
		return attempt{p: order.Payment{PaymentID: id, Status: st, AmountCents: cents}, g: g}
	}
	paidOrder := order.Order{Status: order.Paid, PaymentID: "p2"}
	cancelled := order.Order{Status: order.Cancelled, CancelReason: order.ReasonTimeout}
	cases := []struct {
		name        string
		o           order.Order
		as          []attempt
		want        []string // "kind payment_id gateway_status"
		wantRefunds []string
	}{
		{"paid, matched", paidOrder, []attempt{a("p1", order.PaymentSuperseded, 0, closed), a("p2", order.PaymentSucceeded, 100, paid("p2", 100))}, nil, nil},
		{"paid, its attempt not paid", paidOrder, []attempt{a("p2", order.PaymentSucceeded, 100, notPaid)},
			[]string{"paid_but_not_at_gateway p2 NOT_PAID"}, nil},
		{"paid, its attempt closed, another paid", paidOrder, []attempt{a("p1", order.PaymentSuperseded, 0, paid("p1", 100)), a("p2", order.PaymentSucceeded, 100, closed)},
			[]string{"payment_id_mismatch p1 PAID"}, nil},
		{"paid, another amount", paidOrder, []attempt{a("p2", order.PaymentSucceeded, 100, paid("p2", 90))},
			[]string{"amount_mismatch p2 PAID"}, nil},
		{"paid, the gateway names the attempt otherwise", paidOrder, []attempt{a("p2", order.PaymentSucceeded, 100, paid("px", 100))},
			[]string{"payment_id_mismatch px PAID"}, nil},
		{"paid twice", paidOrder, []attempt{a("p1", order.PaymentFailed, 0, paid("p1", 100)), a("p2", order.PaymentSucceeded, 100, paid("p2", 100))},
			[]string{"duplicate_payment p1 PAID"}, nil},
		{"paid twice, the second flagged", order.Order{Status: order.Paid, PaymentID: "p2", RefundRequired: true},
			[]attempt{a("p1", order.PaymentRefundRequired, 100, paid("p1", 100)), a("p2", order.PaymentSucceeded, 100, paid("p2", 100))},
			nil, []string{"known_refund p1 PAID"}},
		{"paid, no attempt recorded", paidOrder, nil, []string{"paid_but_not_at_gateway p2 "}, nil},
		{"paid by an attempt lapse has no row of", paidOrder, []attempt{a("p1", order.PaymentSuperseded, 0, closed)},
			[]string{"paid_but_not_at_gateway p2 "}, nil},
		{"cancelled, nothing paid", cancelled, []attempt{a("p1", order.PaymentSuperseded, 0, closed), a("p2", order.PaymentFailed, 0, notPaid)}, nil, nil},
		{"cancelled, no attempt", cancelled, nil, nil, nil},
		{"cancelled, a superseded attempt paid", cancelled, []attempt{a("p1", order.PaymentSuperseded, 0, paid("p1", 100)), a("p2", order.PaymentFailed, 0, closed)},
			[]string{"cancelled_but_paid p1 PAID"}, nil},
		{"cancelled, an attempt in progress", cancelled, []attempt{a("p1", order.PaymentFailed, 0, pending)},
			[]string{"cancelled_but_pending p1 PENDING"}, nil},
		{"cancelled, flagged, paid", order.Order{Status: order.Cancelled, RefundRequired: true},
			[]attempt{a("p1", order.PaymentRefundRequired, 100, paid("p1", 100))}, nil, []string{"known_refund p1 PAID"}},
		{"cancelled, flagged, another amount", order.Order{Status: order.Cancelled, RefundRequired: true},
			[]attempt{a("p1", order.PaymentRefundRequired, 100, paid("p1", 70))}, []string{"amount_mismatch p1 PAID"}, []string{"known_refund p1 PAID"}},
		{"cancelled, flagged, not at the gateway", order.Order{Status: order.Cancelled, RefundRequired: true},
			[]attempt{a("p1", order.PaymentRefundRequired, 100, closed)}, []string{"paid_but_not_at_gateway p1 CLOSED"}, nil},
		{"cancelled, flagged, and another paid", order.Order{Status: order.Cancelled, RefundRequired: true},
			[]attempt{a("p1", order.PaymentRefundRequired, 100, paid("p1", 100)), a("p2", order.PaymentSuperseded, 0, paid("p2", 100))},
			[]string{"cancelled_but_paid p2 PAID"}, []string{"known_refund p1 PAID"}},
		{"paying, paid at the gateway", order.Order{Status: order.Paying, PaymentID: "p1"}, []attempt{a("p1", order.PaymentPending, 0, paid("p1", 100))},
			[]string{"paid_but_open p1 PAID"}, nil},
		{"pending, a failed attempt paid", order.Order{Status: order.Pending}, []attempt{a("p1", order.PaymentFailed, 0, paid("p1", 100))},
			[]string{"paid_but_open p1 PAID"}, nil},
		{"paying, in progress", order.Order{Status: order.Paying, PaymentID: "p1"}, []attempt{a("p1", order.PaymentPending, 0, pending)}, nil, nil},
	}
	show := func(ms []Mismatch, o order.Order) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.Kind)+" "+m.PaymentID+" "+string(m.GatewayStatus))
			if m.OrderID != o.ID || m.LapseStatus != o.Status || m.LapseAmount != o.AmountCents || m.Detail == "" {
				t.Errorf("row %+v", m)
			}
		}
		return out
	}
	for _, c := range cases {
		c.o.ID, c.o.AmountCents = "o", 100
		ms, refunds := compareAttempts(c.o, c.as)
		if got := show(ms, c.o); !slices.Equal(got, c.want) {
			t.Errorf("%s: mismatches %q, want %q", c.name, got, c.want)
		}
		if got := show(refunds, c.o); !slices.Equal(got, c.wantRefunds) {
			t.Errorf("%s: known refunds %q, want %q", c.name, got, c.wantRefunds)
		}
	}
}

// A payment in another currency than the order's is a mismatch, as one of
// another amount is: 1299 JPY is not 1299 EUR. A gateway that does not say
// (Currency "") is read as the order's currency. A payment flagged for
// refund is money to give back in whatever currency it came in.
func TestCompareCurrency(t *testing.T) {
	t.Parallel()
	for _, o := range []order.Order{
		{ID: "o", Status: order.Paid, PaymentID: "p1", AmountCents: 1299, Currency: "EUR"},
		{ID: "o", Status: order.Cancelled, RefundRequired: true, PaymentID: "p1", AmountCents: 1299, Currency: "EUR"},
	} {
		for cur, want := range map[string]bool{"JPY": true, "USD": true, "EUR": false, "": false} {
			want = want && o.Status == order.Paid
			ms, _ := compare(o, payment.Status{State: payment.StatePaid, PaymentID: "p1", AmountCents: 1299, Currency: cur}, false)
			got := slices.ContainsFunc(ms, func(m Mismatch) bool { return m.Kind == KindCurrencyMismatch })
			if got != want || (want && len(ms) != 1) {
				t.Errorf("%s order in EUR, gateway paid in %q: %+v; want a currency mismatch %v (alone)", o.Status, cur, ms, want)
			}
		}
	}
}
