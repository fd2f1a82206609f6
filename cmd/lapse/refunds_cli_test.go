package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// lapse refunds list|retry and lapse payments refund against lapse serve
// --auto-refund with lapse's mock gateway: refunds of payments the gateway
// does not know are DEAD and listed (table and JSON lines); one is retried
// by its payment id once the gateway holds the money, one refunded now
// with payments refund, one recorded as made by hand with its note; the
// API's refusals exit 1 with its code, usage errors 2, nothing changed.
func TestRefundsCommands(t *testing.T) {
	t.Parallel()
	const secret = "refunds-secret"
	mock := payment.NewMock(payment.MockConfig{})
	gw := httptest.NewServer(mock)
	t.Cleanup(gw.Close)
	t.Cleanup(func() { _ = mock.Close() })
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"), "--callback-secret", secret,
		"--gateway", gw.URL, "--gateway-retries", "0", "--auto-refund")
	c := s.api()
	ctx := t.Context()
	must(c.SetStock(ctx, "tee", 10))(t)
	// Each order is paid by its -a attempt, then again by -b, which the
	// gateway does not know: -b's refund is DEAD at once.
	ids := []string{"rc1", "rc2", "rc3"}
	for _, id := range ids {
		must(c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 500, Currency: "EUR", Timeout: time.Hour}))(t)
		for _, p := range []string{id + "-a", id + "-b"} {
			must(c.NotifyPayment(ctx, client.Notification{OrderID: id, PaymentID: p, Succeeded: true, AmountCents: 500}, []byte(secret)))(t)
		}
	}
	waitFor(t, 20*time.Second, "three DEAD refunds", func() (int, bool) {
		p := must(c.ListRefunds(ctx, client.ListRefunds{Dead: true}))(t)
		return len(p.Refunds), len(p.Refunds) == 3
	})
	env := []string{"LAPSE_SERVER=" + s.url}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, code := lapseCmd(t, env, args...)
		if code != wantCode {
			t.Fatalf("lapse %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}

	out := run(0, "refunds", "list", "--dead")
	if !strings.Contains(out, "PAYMENT ID") || !strings.Contains(out, "rc1-b") || !strings.Contains(out, "5.00 EUR") || !strings.Contains(out, "DEAD") {
		t.Fatalf("refunds list --dead:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(run(0, "refunds", "list", "--dead", "--json", "--limit", "2")), "\n")
	var first order.Refund
	if len(lines) != 3 || json.Unmarshal([]byte(lines[0]), &first) != nil || first.PaymentID != "rc1-b" || first.Status != order.TaskDead ||
		!strings.Contains(lines[2], "listed the first 2") {
		t.Fatalf("refunds list --dead --json --limit 2:\n%s", strings.Join(lines, "\n"))
	}

	// Usage errors: exit 2, nothing sent.
	for _, args := range [][]string{
		{"refunds"}, {"refunds", "frob"}, {"refunds", "list", "--limit", "-1"}, {"refunds", "list", "extra"},
		{"refunds", "list", "--order", strings.Repeat("o", 65)},
		{"refunds", "retry"}, {"refunds", "retry", "--dead", "rc1-b"},
		{"payments", "refund"}, {"payments", "refund", "rc1-b", "rc2-b"},
		{"payments", "refund", "rc1-b", "--manual"}, {"payments", "refund", "rc1-b", "--manual", "--note", " "},
		{"payments", "refund", "rc1-b", "--refund-id", "re_x"},
	} {
		run(2, args...)
	}
	// The API's refusals: exit 1 with its code.
	if out := run(1, "payments", "refund", "rc1-a"); !strings.Contains(out, "not_refundable: ") {
		t.Fatalf("payments refund of the attempt that paid:\n%s", out)
	}
	if out := run(1, "payments", "refund", "nobody-paid"); !strings.Contains(out, "payment_not_found: ") {
		t.Fatalf("payments refund of no attempt:\n%s", out)
	}
	if n := len(must(c.ListRefunds(ctx, client.ListRefunds{Dead: true}))(t).Refunds); n != 3 {
		t.Fatalf("after the refusals: %d DEAD refunds, want 3", n)
	}

	// The gateway now holds rc1-b and rc2-b: rc1-b retried by its payment
	// id (the dispatcher refunds it), rc2-b refunded now.
	for _, id := range []string{"rc1", "rc2"} {
		must(mock.Pay(id, 500, payment.OutcomeSucceeded, id+"-b"))(t)
	}
	if out := run(0, "refunds", "retry", "rc1-b"); !strings.Contains(out, "retried 1 DEAD refund\n") {
		t.Fatalf("refunds retry rc1-b:\n%s", out)
	}
	waitFor(t, 20*time.Second, "rc1-b REFUNDED", func() (order.Order, bool) {
		o := must(c.GetOrder(ctx, "rc1"))(t)
		return o, attempt(o, "rc1-b") == order.PaymentRefunded && !o.RefundRequired
	})
	out = run(0, "payments", "refund", "rc2-b")
	if !strings.Contains(out, "refunded rc2-b (refund ") || !regexp.MustCompile(`rc2-b +REFUNDED`).MatchString(out) {
		t.Fatalf("payments refund rc2-b:\n%s", out)
	}
	if rs := mock.Refunds("rc2"); len(rs) != 1 {
		t.Fatalf("refunds of rc2 at the gateway: %+v, want one", rs)
	}

	// rc3-b's money went back in the gateway's console: recorded by hand.
	var a client.RefundAnswer
	if err := json.Unmarshal([]byte(run(0, "payments", "refund", "rc3-b", "--manual", "--note", "refunded in the console", "--refund-id", "re_console", "--json")), &a); err != nil ||
		attempt(a.Order, "rc3-b") != order.PaymentRefunded || a.Order.RefundRequired || a.RefundID != "re_console" {
		t.Fatalf("payments refund --manual --json: %+v, %v", a, err)
	}
	out = run(0, "refunds", "list", "--order", "rc3")
	if !strings.Contains(out, "rc3-b") || !strings.Contains(out, "DONE") || !strings.Contains(out, "by hand (api): refunded in the console") || !strings.Contains(out, "re_console") {
		t.Fatalf("refunds list --order rc3:\n%s", out)
	}
	if out := run(0, "refunds", "list", "--dead"); !strings.Contains(out, "no DEAD refunds") {
		t.Fatalf("refunds list --dead at the end:\n%s", out)
	}
	if out := run(0, "refunds", "retry", "--dead"); !strings.Contains(out, "retried 0 DEAD refunds") {
		t.Fatalf("refunds retry --dead with none:\n%s", out)
	}
}

// attempt is the status of o's payment attempt paymentID ("" when it has none).
func attempt(o order.Order, paymentID string) order.PaymentStatus {
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return p.Status
		}
	}
	return ""
}
