package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/internal/ordersvctest"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/web"
)

// Order-service mode's dashboard in the browser, on PostgreSQL with a real
// receiver: the cancel commands card (pending, dead, oldest pending), the
// CANCELLING count, the list of dead commands and an order's commands.
func TestCommandsDashboardInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: testdb.PostgresSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rcv := ordersvctest.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lapse.New(lapse.Config{Store: st, Logger: logger, OrderService: rcv.Client(t),
		Commands: ordersvc.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: time.Hour, RetryMax: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	dash, err := web.New(svc, web.Options{Logger: logger, SampleEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go dash.Run(runCtx)
	open := serve(t, ctx, web.Mount(httpapi.New(svc, httpapi.Options{Logger: logger}), dash))

	// w-ok is cancelled at the order service, w-gone unknown to it (DEAD),
	// w-down's command meets a 503 and waits an hour for its retry.
	rcv.Set("w-ok", ordersvctest.Pending)
	rcv.Set("w-down", ordersvctest.Unavailable)
	for _, id := range []string{"w-ok", "w-gone", "w-down"} {
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, AmountCents: 1999, Currency: "EUR", Timeout: 50 * time.Millisecond}); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	eventually(t, "w-ok cancelled, w-gone's command DEAD, w-down's sent once", func() (bool, error) {
		o, err := svc.Get(ctx, "w-ok")
		if err != nil || o.Status != order.Cancelled {
			return false, err
		}
		cs, err := svc.Store().CommandStats(ctx)
		received, _ := rcv.Deliveries("w-down")
		return cs.Dead == 1 && cs.Pending == 1 && received == 1, err
	})

	b, errs := newBrowser(t)
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
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		n, err := chromedp.Run(sctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}

	run("overview", chromedp.Navigate(open+"/"), chromedp.WaitVisible(chromedp.CSS("#commands")))
	if got := text(`#counts [data-status="CANCELLING"] .n`); got != "2" {
		t.Errorf("CANCELLING = %q, want 2 (w-gone, w-down)", got)
	}
	if got := text(`#commands [data-command="pending"] .n`); got != "1" {
		t.Errorf("pending commands = %q, want 1", got)
	}
	if got := text(`#commands [data-command="dead"] .n`); got != "1" {
		t.Errorf("dead commands = %q, want 1", got)
	}
	if n := count(`#commands [data-command="dead"].warn`); n != 1 {
		t.Errorf("the dead card is not marked: %d", n)
	}
	if got := text(`#commands [data-command="oldest"] .n`); got == "—" || got == "" {
		t.Errorf("oldest pending = %q, want an age", got)
	}
	run("audit", chromedp.Click(chromedp.CSS("#run-audit")), chromedp.WaitVisible(chromedp.CSS("#audit-result")))
	if got := text("#audit"); !strings.Contains(got, "commands_dead (warning)") {
		t.Errorf("the audit table lacks commands_dead: %q", got)
	}

	run("dead commands", chromedp.Click(chromedp.CSS(`#commands [data-command="dead"]`)), chromedp.WaitVisible(chromedp.CSS("table#commands")))
	if n := count(`#commands tbody tr a[href^="/ui/orders/"]`); n != 1 {
		t.Fatalf("dead commands listed: %d, want 1", n)
	}
	if got := text("#commands tbody tr"); !strings.Contains(got, "w-gone") || !strings.Contains(got, "not_found") ||
		!strings.Contains(got, ordersvc.CommandID("w-gone", mustOrder(t, svc, "w-gone").CancelAfter)) {
		t.Errorf("the dead command's row: %q", got)
	}
	run("open commands", chromedp.Navigate(open+"/ui/commands"), chromedp.WaitVisible(chromedp.CSS("table#commands")))
	if n := count(`#commands tbody tr a[href^="/ui/orders/"]`); n != 2 {
		t.Errorf("commands not DONE listed: %d, want 2", n)
	}
	run("the order", chromedp.Navigate(open+"/ui/orders/w-gone"), chromedp.WaitVisible(chromedp.CSS("table#commands")))
	if got := text("table#commands tbody"); !strings.Contains(got, "DEAD") || !strings.Contains(got, "not_found") {
		t.Errorf("w-gone's commands: %q", got)
	}
	if got := text("#timeline"); !strings.Contains(got, "cancel command written") || !strings.Contains(got, "cancel command DEAD") {
		t.Errorf("w-gone's timeline: %q", got)
	}
	if got := text("#status"); got != "CANCELLING" {
		t.Errorf("w-gone shows %q", got)
	}
	if n := count(`nav a[href="/ui/commands?dead=1"]`); n != 1 {
		t.Errorf("nav links to the dead commands: %d", n)
	}

	// The dead command sent again from its row, once the order service
	// knows the order: its answer cancels it.
	rcv.Set("w-gone", ordersvctest.Pending)
	run("retry a dead command: confirmation", chromedp.Navigate(open+"/ui/commands?dead=1"), chromedp.WaitVisible(chromedp.CSS("table#commands")),
		chromedp.Click(chromedp.CSS("#commands tbody tr a.retry")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if cs, err := svc.Store().CommandStats(ctx); err != nil || cs.Dead != 1 {
		t.Fatalf("before the confirmation: %+v, %v", cs, err)
	}
	run("retry a dead command: confirmed", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Sent again") {
		t.Errorf("the flash after the retry: %q", got)
	}
	eventually(t, "w-gone cancelled after the retry", func() (bool, error) {
		o, err := svc.Get(ctx, "w-gone")
		return o.Status == order.Cancelled, err
	})
	run("retry all dead commands, none left", chromedp.Navigate(open+"/ui/commands/retry?all=1"), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); !strings.Contains(got, "Nothing was sent again") {
		t.Errorf("the flash after retrying none: %q", got)
	}
}

func mustOrder(t *testing.T, svc *lapse.Service, id string) order.Order {
	t.Helper()
	o, err := svc.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
