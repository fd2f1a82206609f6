package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// The operator's actions in the browser, each through its confirmation,
// its result found on the page and in the store, with no console error:
// extend a deadline, run the gateway check of a PAYING order now, cancel a
// PAYING order past its deadline as operator (the close failing, then with
// the trade closed by hand), and retry dead events (one row, then all),
// stock tasks and — in TestCommandsDashboardInBrowser — cancel commands.
func TestOperatorActionsInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newOpFixture(t, ctx, "")
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
	get := func(id string) order.Order {
		t.Helper()
		o, err := f.svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// Extend: a PENDING order's window moves to two hours from now.
	e := f.create(t, "ext-1", 10*time.Minute, false)
	run("extend: confirmation", chromedp.Navigate(f.url+"/ui/orders/ext-1"), chromedp.WaitVisible(css("#extend")),
		chromedp.Click(css("#extend")), chromedp.WaitVisible(css("#timeout")))
	if got := get("ext-1"); !got.ExpiresAt.Equal(e.ExpiresAt) {
		t.Fatalf("ext-1 moved before the confirmation")
	}
	before := time.Now()
	run("extend: confirmed", chromedp.SetValue(css("#timeout"), "2h"), chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "deadline moved") {
		t.Errorf("extend flash: %q", got)
	}
	if got := get("ext-1"); got.ExpiresAt.Before(before.Add(2*time.Hour).Truncate(time.Millisecond)) || got.ExpiresAt.After(time.Now().Add(2*time.Hour)) {
		t.Errorf("ext-1 expires at %v, want two hours after %v", got.ExpiresAt, before)
	}

	// The gateway check now, of a PAYING order the gateway reports paid.
	f.create(t, "chk-1", time.Hour, true)
	f.gw.set("chk-1", payment.Status{State: payment.StatePaid, PaymentID: "chk-1-card", AmountCents: 1999})
	run("force check: confirmation", chromedp.Navigate(f.url+"/ui/orders/chk-1"), chromedp.WaitVisible(css("#force-check")),
		chromedp.Click(css("#force-check")), chromedp.WaitVisible(css("#confirm")))
	if got := get("chk-1"); got.Status != order.Paying {
		t.Fatalf("chk-1 is %s before the confirmation", got.Status)
	}
	run("force check: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#check-result")))
	if got := text("#check-result"); !strings.Contains(got, "PAID") {
		t.Errorf("check result: %q", got)
	}
	if got := text("#status"); got != "PAID" {
		t.Errorf("chk-1 shows %q after the check", got)
	}

	// Cancel as operator: a PAYING order past its deadline, its gateway
	// down. The close fails (nothing changes), then the operator says the
	// trade was closed by hand.
	p := f.create(t, "op-1", 300*time.Millisecond, true)
	eventually(t, "op-1 past its deadline", func() (bool, error) { return time.Now().After(p.CancelAfter.Add(50 * time.Millisecond)), nil })
	run("operator cancel: confirmation", chromedp.Navigate(f.url+"/ui/orders/op-1"), chromedp.WaitVisible(css("#operator-cancel")),
		chromedp.Click(css("#operator-cancel")), chromedp.WaitVisible(css("#close-choice")))
	run("operator cancel: the close fails", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Closing the trade at the gateway failed") {
		t.Errorf("flash after the failed close: %q", got)
	}
	if got := get("op-1"); got.Status != order.Paying {
		t.Fatalf("op-1 is %s after a failed close", got.Status)
	}
	run("operator cancel: closed by hand", chromedp.Click(css("#operator-cancel")), chromedp.WaitVisible(css("#close-choice")),
		chromedp.Click(css("#close-no-close")), chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "cancelled as operator") {
		t.Errorf("flash after the operator's cancel: %q", got)
	}
	if got := text("#status"); got != "CANCELLED" {
		t.Errorf("op-1 shows %q", got)
	}
	if got := get("op-1"); got.Status != order.Cancelled || got.CancelReason != order.ReasonOperator {
		t.Errorf("op-1: %s %q", got.Status, got.CancelReason)
	}

	// Dead events: the sink refuses two orders' events, then takes them
	// again; one is retried from its row, the other with "retry all".
	f.settled(t)
	f.killSink.Store(true)
	f.create(t, "ev-1", time.Hour, false)
	f.create(t, "ev-2", time.Hour, false)
	eventually(t, "two dead events", func() (bool, error) { return f.deadEvents(t) == 2, nil })
	const dead = 2
	f.killSink.Store(false)
	run("retry one event: confirmation", chromedp.Navigate(f.url+"/ui/events?dead=1"), chromedp.WaitVisible(css("#retry-all")),
		chromedp.Click(css("#events tbody tr a.retry")), chromedp.WaitVisible(css("#confirm")))
	run("retry one event: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Sent again") {
		t.Errorf("flash after retrying one event: %q", got)
	}
	eventually(t, "one dead event fewer", func() (bool, error) { return f.deadEvents(t) == dead-1, nil })
	run("retry all events: confirmation", chromedp.Navigate(f.url+"/ui/events?dead=1"), chromedp.WaitVisible(css("#retry-all")),
		chromedp.Click(css("#retry-all")), chromedp.WaitVisible(css("#confirm")))
	run("retry all events: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	eventually(t, "no dead event", func() (bool, error) { return f.deadEvents(t) == 0, nil })

	// Dead stock tasks: none here (the stock is lapse's own), so "retry
	// all" sends nothing and says so.
	run("retry all tasks", chromedp.Navigate(f.url+"/ui/tasks/retry?all=1"), chromedp.WaitVisible(css("#confirm")),
		chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Nothing was sent again") {
		t.Errorf("flash after retrying no task: %q", got)
	}
}
