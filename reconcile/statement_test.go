package reconcile_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/reconcile"
)

func paid(id string, amount int64) payment.Status {
	return payment.Status{State: payment.StatePaid, PaymentID: id, AmountCents: amount}
}

func TestParseStatement(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		want     map[string]reconcile.Record
	}{
		{"a header line and every status spelling", "order_id,payment_id,status,amount_cents\n" +
			"a,p1,PAID,100\nb,p2,succeeded,200\nc,,NOT_PAID,\nd,p4,Failed,50\ne,,CLOSED,0\nf,p6,pending,70\n",
			map[string]reconcile.Record{
				"a": {OrderID: "a", Status: paid("p1", 100)},
				"b": {OrderID: "b", Status: paid("p2", 200)},
				"c": {OrderID: "c", Status: payment.Status{State: payment.StateNotPaid}},
				"d": {OrderID: "d", Status: payment.Status{State: payment.StateNotPaid, PaymentID: "p4", AmountCents: 50}},
				"e": {OrderID: "e", Status: payment.Status{State: payment.StateClosed}},
				"f": {OrderID: "f", Status: payment.Status{State: payment.StatePending, PaymentID: "p6", AmountCents: 70}},
			}},
		{"no header, a BOM, CRLF, comments, blank lines and spaces", "\uFEFFa, p1, PAID, 100\r\n\r\n# a comment\nb,p2,PAID,2\n",
			map[string]reconcile.Record{"a": {OrderID: "a", Status: paid("p1", 100)}, "b": {OrderID: "b", Status: paid("p2", 2)}}},
		{"concatenated files repeat the header", "order_id,payment_id,status,amount_cents\na,p1,PAID,1\nORDER_ID,payment_id,status,amount_cents\nb,p2,PAID,2\n",
			map[string]reconcile.Record{"a": {OrderID: "a", Status: paid("p1", 1)}, "b": {OrderID: "b", Status: paid("p2", 2)}}},
		{"quoted fields", "\"shop,42\",\"p\"\"1\",PAID,5\n",
			map[string]reconcile.Record{"shop,42": {OrderID: "shop,42", Status: paid("p\"1", 5)}}},
		{"a success outweighs a failure before or after it", "a,p0,FAILED,1\na,p1,PAID,1\nb,p1,PAID,1\nb,p2,FAILED,1\nc,,CLOSED,\nc,p3,PENDING,1\n",
			map[string]reconcile.Record{
				"a": {OrderID: "a", Status: paid("p1", 1)},
				"b": {OrderID: "b", Status: paid("p1", 1)},
				"c": {OrderID: "c", Status: payment.Status{State: payment.StatePending, PaymentID: "p3", AmountCents: 1}},
			}},
		{"the same payment twice counts once; another payment is extra", "a,p1,PAID,1\na,p1,PAID,1\na,p2,PAID,3\na,p2,SUCCEEDED,3\n",
			map[string]reconcile.Record{"a": {OrderID: "a", Status: paid("p1", 1), ExtraPayments: []payment.Status{paid("p2", 3)}}}},
		{"empty", "", map[string]reconcile.Record{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := reconcile.ParseStatement(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseStatementRefusesMalformedLines(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ in, line string }{
		"three fields":                   {"a,p1,PAID,1\nb,p2,PAID\n", ""},
		"an unknown status":              {"a,p1,PAID,1\nb,p2,REFUNDED,1\n", "line 2"},
		"an amount that is not a number": {"a,p1,PAID,1.50\n", "line 1"},
		"a negative amount":              {"a,p1,NOT_PAID,-1\n", "line 1"},
		"a paid line without payment id": {"a,,PAID,1\n", "line 1"},
		"a paid line without amount":     {"a,p1,PAID,\n", "line 1"},
		"no order id":                    {"x,p0,PAID,1\n,p1,PAID,1\n", "line 2"},
		"one payment, two amounts":       {"a,p1,PAID,1\n\na,p1,PAID,2\n", "line 3"},
		"a stray quote":                  {"a,\"p1,PAID,1\n", ""},
	}
	for name, c := range cases {
		_, err := reconcile.ParseStatement(strings.NewReader(c.in))
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), c.line) {
			t.Errorf("%s: %v, want it to name %s", name, err, c.line)
		}
	}
}

func FuzzParseStatement(f *testing.F) {
	f.Add("order_id,payment_id,status,amount_cents\na,p1,PAID,100\nb,,NOT_PAID,\n")
	f.Add("a,p1,PAID,1\na,p2,PAID,2\na,p0,FAILED,1\n")
	f.Add("\uFEFF\"a\"\"b\",p,closed,0\r\n# c\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := reconcile.ParseStatement(strings.NewReader(in))
		if err != nil {
			return
		}
		for id, r := range recs {
			if id == "" || r.OrderID != id {
				t.Fatalf("record %q: %+v", id, r)
			}
			switch r.Status.State {
			case payment.StatePaid:
				if r.Status.PaymentID == "" || r.Status.AmountCents < 0 {
					t.Fatalf("paid record without payment: %+v", r)
				}
			case payment.StateNotPaid, payment.StateClosed, payment.StatePending:
				if len(r.ExtraPayments) > 0 {
					t.Fatalf("extra payments on an unpaid record: %+v", r)
				}
			default:
				t.Fatalf("record %q has state %q", id, r.Status.State)
			}
			for _, x := range r.ExtraPayments {
				if x.State != payment.StatePaid || x.PaymentID == r.Status.PaymentID {
					t.Fatalf("extra payment %+v of %+v", x, r)
				}
			}
		}
	})
}
