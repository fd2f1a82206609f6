package reconcile_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/reconcile"
)

// raw reports the first byte of s a terminal would act on (a control
// character other than the newline, or DEL), or -1.
func raw(s string) int {
	for i := 0; i < len(s); i++ {
		if (s[i] < 0x20 && s[i] != '\n') || s[i] == 0x7f {
			return i
		}
	}
	return -1
}

// The ids in a report come from the gateway or its statement: an id with
// control characters (an escape sequence that clears the screen, retitles
// the terminal, or hides the rows after it) is printed escaped, Go-quoted,
// and every row stays on one line.
func TestTableEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	const (
		orderID   = "o-\x1b[2J1"
		paymentID = "pay\x07\x7f"
	)
	rep := reconcile.Report{
		From: from, To: to, Source: "gateway",
		Mismatches: []reconcile.Mismatch{{
			Kind: reconcile.KindUnknownToLapse, OrderID: orderID, GatewayStatus: payment.StatePaid,
			GatewayAmount: 100, PaymentID: paymentID, Detail: "gateway said \x1b]0;pwned\x07 and\tthis",
		}},
		KnownRefunds: []reconcile.Mismatch{{
			Kind: reconcile.KindCancelledButPaid, OrderID: "ok-1", LapseStatus: order.Cancelled, PaymentID: "tab\there",
		}},
		Errors: []reconcile.OrderError{{OrderID: "e\r1", Error: "payment: query order \"e\\r1\":\nboom\x1b[0m"}},
	}
	var b bytes.Buffer
	if err := reconcile.WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if i := raw(out); i >= 0 {
		t.Fatalf("a raw control character %q at byte %d:\n%q", out[i], i, out)
	}
	for _, want := range []string{`"o-\x1b[2J1"`, `"pay\a\x7f"`, `"tab\there"`, `"e\r1"`, `gateway said \x1b]0;pwned\a and this`, `boom\x1b[0m`} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"ok-1"`) {
		t.Errorf("a plain id is quoted:\n%s", out)
	}
}

func TestStatementErrorsEscapeIDs(t *testing.T) {
	t.Parallel()
	_, err := reconcile.ParseStatement(strings.NewReader("o\x1b]0;pwned\x07,p\x1b1,PAID,1\no\x1b]0;pwned\x07,p\x1b1,PAID,2\n"))
	if err == nil {
		t.Fatal("a payment listed with two amounts was accepted")
	}
	if i := raw(err.Error()); i >= 0 || !strings.Contains(err.Error(), `order "o\x1b]0;pwned\a": payment "p\x1b1"`) {
		t.Errorf("error %q: want the ids escaped", err)
	}
}
