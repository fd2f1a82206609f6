package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store"
)

// The refunds in the browser, with --auto-refund and a gateway that
// refuses three payments at first (their refunds DEAD): the refunds page
// lists them with their amounts and errors (reached from the nav); on an
// order's page one attempt is marked refunded by hand (the note required,
// then recorded with who), one refunded now through the gateway, each
// through its confirmation; the last is retried from the dead refunds'
// page and refunded by the dispatcher. Each result is found on the page
// and in the store, and the page reports no error.
func TestRefundsInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newOpFixture(t, ctx, "", func(c *lapse.Config) {
		c.AutoRefund = true
		c.Refunds = refund.Config{Interval: 10 * time.Millisecond, RetryBase: time.Hour, RetryMax: time.Hour}
	})
	for _, id := range []string{"mr", "rn", "dd"} {
		f.gw.setRefuse(id+"-b", true)
		f.owe(t, id)
	}
	eventually(t, "three DEAD refunds", func() (bool, error) {
		st, err := f.svc.Store().RefundStats(ctx)
		return st.Dead == 3, err
	})
	b, errs := newBrowser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	run := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if e := errs.take(); len(e) > 0 {
			t.Fatalf("%s: the page reported errors:\n%s", step, strings.Join(e, "\n"))
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	eval := func(js string) bool {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		ok, err := chromedp.Run(sctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return ok
	}
	refundOf := func(orderID string) order.Refund {
		t.Helper()
		page, err := f.svc.ListRefunds(ctx, store.ListTasksParams{OrderID: orderID})
		if err != nil || len(page.Refunds) != 1 {
			t.Fatalf("%s's refunds: %+v, %v", orderID, page, err)
		}
		return page.Refunds[0]
	}

	// The refunds page, from the nav: the three DEAD refunds, amounts in
	// the money format, the gateway's refusal as their last error.
	run("the refunds page", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(css(`nav a[href="/ui/refunds"]`)),
		chromedp.Click(css(`nav a[href="/ui/refunds"]`)), chromedp.WaitVisible(css("table#refunds")))
	row := text(`#refunds tr[data-payment="dd-b"]`)
	if !strings.Contains(row, "19.99 USD") || !strings.Contains(row, "DEAD") || !strings.Contains(row, "does not know") {
		t.Errorf("dd-b's row on the refunds page: %q", row)
	}
	if !eval(`document.querySelectorAll("#refunds tbody tr[data-payment]").length === 3`) {
		t.Errorf("the refunds page does not list the three refunds: %q", text("#refunds tbody"))
	}

	// Mark refunded by hand: the note is required; with it, the attempt
	// is REFUNDED and the refund records the note and who.
	run("mark refunded: confirmation", chromedp.Navigate(f.url+"/ui/orders/mr"),
		chromedp.WaitVisible(css(`#payments tr[data-payment="mr-b"] a.mark-refunded`)),
		chromedp.Click(css(`#payments tr[data-payment="mr-b"] a.mark-refunded`)), chromedp.WaitVisible(css("#note")))
	if got := text("#confirm-payment"); got != "mr-b" {
		t.Errorf("the confirmation names %q", got)
	}
	if got := text("#confirm-amount"); got != "19.99 USD" {
		t.Errorf("the confirmation's amount: %q", got)
	}
	if eval(`document.querySelector("#confirm-form").checkValidity()`) {
		t.Error("the form is valid without a note")
	}
	if got := f.attempt(t, "mr", "mr-b"); got != order.PaymentRefundRequired {
		t.Fatalf("mr-b is %s before the confirmation", got)
	}
	run("mark refunded: confirmed", chromedp.SendKeys(css("#note"), "refunded in the gateway's console"),
		chromedp.SendKeys(css("#refund_id"), "re_console_7"), chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "refund made by hand was recorded") {
		t.Errorf("flash after marking refunded: %q", got)
	}
	if got := text(`#payments tr[data-payment="mr-b"] .status`); got != "REFUNDED" {
		t.Errorf("mr-b shows %q", got)
	}
	if got := text(`#order-refunds tr[data-payment="mr-b"]`); !strings.Contains(got, "DONE") || !strings.Contains(got, "by hand (dashboard)") ||
		!strings.Contains(got, "refunded in the gateway's console") || !strings.Contains(got, "re_console_7") {
		t.Errorf("mr-b's refund on the page: %q", got)
	}
	if r := refundOf("mr"); r.Status != order.TaskDone || !r.Manual || r.Note != "refunded in the gateway's console" || r.Actor != "dashboard" || r.RefundID != "re_console_7" {
		t.Errorf("mr-b's refund in the store: %+v", r)
	}
	evs, err := f.svc.Store().OrderEvents(ctx, "mr")
	if err != nil {
		t.Fatal(err)
	}
	recorded := false
	for _, ev := range evs {
		if ev.Type == order.EventRefunded && strings.Contains(string(ev.Payload), `"manual":true`) &&
			strings.Contains(string(ev.Payload), `"actor":"dashboard"`) && strings.Contains(string(ev.Payload), "gateway's console") {
			recorded = true
		}
	}
	if !recorded {
		t.Errorf("no order.refunded naming the manual refund, its note and the dashboard: %+v", evs)
	}
	if o, _ := f.svc.Get(ctx, "mr"); o.RefundRequired {
		t.Error("mr still owes money")
	}

	// Refund now, through the gateway (which takes rn-b's refund now).
	f.gw.setRefuse("rn-b", false)
	run("refund now: confirmation", chromedp.Navigate(f.url+"/ui/orders/rn"),
		chromedp.WaitVisible(css(`#payments tr[data-payment="rn-b"] a.refund-now`)),
		chromedp.Click(css(`#payments tr[data-payment="rn-b"] a.refund-now`)), chromedp.WaitVisible(css("#confirm")))
	if got := f.attempt(t, "rn", "rn-b"); got != order.PaymentRefundRequired {
		t.Fatalf("rn-b is %s before the confirmation", got)
	}
	run("refund now: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "refunded at the gateway") {
		t.Errorf("flash after refunding now: %q", got)
	}
	if got := text(`#payments tr[data-payment="rn-b"] .status`); got != "REFUNDED" {
		t.Errorf("rn-b shows %q", got)
	}
	if got := text(`#order-refunds tr[data-payment="rn-b"] .refund-id`); got != "re_rn-b" {
		t.Errorf("rn-b's gateway refund id on the page: %q", got)
	}
	if r := refundOf("rn"); r.Status != order.TaskDone || r.Manual || r.RefundID != "re_rn-b" {
		t.Errorf("rn-b's refund in the store: %+v", r)
	}
	if eval(`document.querySelector("#payments a.refund-now, #payments a.mark-refunded") !== null`) {
		t.Error("rn's page still offers a refund")
	}

	// The dead refund retried from its row, once the gateway takes it:
	// the dispatcher refunds it.
	f.gw.setRefuse("dd-b", false)
	run("retry a dead refund: confirmation", chromedp.Navigate(f.url+"/ui/refunds"), chromedp.WaitVisible(css("#refunds-dead")),
		chromedp.Click(css("#refunds-dead")), chromedp.WaitVisible(css("#retry-all")),
		chromedp.Click(css(`#refunds tr[data-payment="dd-b"] a.retry`)), chromedp.WaitVisible(css("#confirm")))
	if got := f.attempt(t, "dd", "dd-b"); got != order.PaymentRefundRequired {
		t.Fatalf("dd-b is %s before the confirmation", got)
	}
	run("retry a dead refund: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Sent again") {
		t.Errorf("flash after the retry: %q", got)
	}
	eventually(t, "dd-b refunded after the retry", func() (bool, error) {
		return f.attempt(t, "dd", "dd-b") == order.PaymentRefunded, nil
	})
	run("the dead refunds, none left", chromedp.Navigate(f.url+"/ui/refunds?dead=1"), chromedp.WaitVisible(css("table#refunds")))
	if got := text("#refunds tbody"); got != "None." {
		t.Errorf("dead refunds after the retry: %q", got)
	}
	run("dd's order", chromedp.Navigate(f.url+"/ui/orders/dd"), chromedp.WaitVisible(css("#order-refunds")))
	if got := text(`#order-refunds tr[data-payment="dd-b"]`); !strings.Contains(got, "DONE") || !strings.Contains(got, "re_dd-b") {
		t.Errorf("dd-b's refund on its order's page: %q", got)
	}
	run("retry all dead refunds, none left", chromedp.Navigate(f.url+"/ui/refunds/retry?all=1"), chromedp.WaitVisible(css("#confirm")),
		chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Nothing was sent again") {
		t.Errorf("flash after retrying no refund: %q", got)
	}
	if n := f.gw.refundsAsked("mr-b"); n != 1 {
		t.Errorf("the gateway was asked %d times for mr-b (refunded by hand), want once (the dispatcher's)", n)
	}
}
