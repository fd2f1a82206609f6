package web_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/web"
)

// The dashboard's usability in the browser: the header's search by order
// id and by payment id, the orders page's filters (status, refund_required,
// past deadline) kept across its pages, the overview refreshing itself in
// place and staying paused across a reload, and one money format on every
// page. Every wait is on a DOM condition with a deadline.
func TestDashboardUsabilityInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, func(o *web.Options) { o.RefreshEvery = 200 * time.Millisecond })
	svc := f.svc
	if _, err := svc.SetStock(ctx, "tee", 1000); err != nil {
		t.Fatal(err)
	}
	create := func(id string, cents int64, currency string, timeout time.Duration) {
		t.Helper()
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: cents,
			Currency: currency, Timeout: timeout}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	pay := func(id, paymentID string) {
		t.Helper()
		if _, err := svc.PayAttempt(ctx, id, paymentID); err != nil {
			t.Fatalf("pay %s: %v", id, err)
		}
	}
	// Three currencies of three exponents, PENDING for an hour.
	create("m-usd", 1037, "USD", time.Hour)
	create("m-jpy", 129900, "JPY", time.Hour)
	create("m-bhd", 1234, "BHD", time.Hour)
	// r-0: cancelled by the buyer, then paid: refund_required, its attempt late-r0.
	create("r-0", 1037, "USD", time.Hour)
	if _, err := svc.Cancel(ctx, "r-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "r-0", PaymentID: "late-r0", Status: lapse.PaymentSucceeded, AmountCents: 1037}); err != nil {
		t.Fatal(err)
	}
	// 51 PAYING orders past their deadline (no gateway: they wait for their
	// outcome), more than a page; s-late PAYING with its deadline ahead.
	const stuck = 51
	for i := range stuck {
		id := fmt.Sprintf("s-%02d", i)
		create(id, 500, "EUR", time.Second)
		pay(id, "pay-"+id)
	}
	create("s-late", 500, "EUR", time.Hour)
	pay("s-late", "pay-s-late")
	eventually(t, "the stuck orders past their deadline", func() (bool, error) {
		o, err := svc.Get(ctx, fmt.Sprintf("s-%02d", stuck-1))
		return err == nil && o.Status == order.Paying && time.Now().After(o.CancelAfter), err
	})

	b, errs := newBrowser(t)
	checkErrors := func(step string, allow ...string) {
		t.Helper()
	next:
		for _, e := range errs.take() {
			for _, a := range allow {
				if strings.Contains(e, a) {
					continue next
				}
			}
			t.Fatalf("%s: the page reported an error: %s", step, e)
		}
	}
	run := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		checkErrors(step)
	}
	eval := func(expr string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return s
	}
	text := func(sel string) string {
		t.Helper()
		return strings.TrimSpace(eval(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)))
	}
	num := func(expr string) int {
		t.Helper()
		var n int
		if _, err := fmt.Sscan(eval("String("+expr+")"), &n); err != nil {
			t.Fatalf("%s is not a number: %v", expr, err)
		}
		return n
	}
	rows := func() int { return num(`document.querySelectorAll("#orders tbody tr td a").length`) }
	// waitFor polls a JavaScript condition until it holds, for at most 10
	// s; an evaluation that fails (the page is navigating away, its
	// context gone) is tried again.
	waitFor := func(step, cond string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		var last error
		for {
			sctx, cancel := context.WithTimeout(b, 2*time.Second)
			ok, err := chromedp.Run(sctx, chromedp.Evaluate[bool](cond))
			cancel()
			if err == nil && ok {
				checkErrors(step)
				return
			}
			if err != nil {
				last = err
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s not within 10 s (last error: %v)", step, cond, last)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	pending := `#counts [data-status="PENDING"] .n`

	// The overview refreshes itself: an order made after the page loaded
	// shows in its count without a reload, the scroll kept, the charts
	// updated in place.
	run("overview", chromedp.Navigate(f.open+"/"), chromedp.WaitVisible(css("#refresh-toggle")))
	waitFor("charts drawn", `document.querySelectorAll('#charts canvas').length >= 4`)
	if got := text(pending); got != "3" {
		t.Fatalf("PENDING on the overview: %q, want 3", got)
	}
	eval(`window.lapseMark = "same page"; window.scrollTo(0, 300); String(window.scrollY)`)
	scrolled := num(`window.scrollY`)
	create("n-0", 100, "USD", time.Hour)
	waitFor("the overview refreshed by itself", fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === "4"`, pending))
	if got := eval(`String(window.lapseMark)`); got != "same page" {
		t.Errorf("the overview reloaded the page to refresh (mark %q)", got)
	}
	if got := num(`window.scrollY`); got != scrolled {
		t.Errorf("scroll after a refresh: %d, want %d", got, scrolled)
	}
	if n := num(`document.querySelectorAll('#charts canvas').length`); n != 4 {
		t.Errorf("%d chart canvases after refreshes, want 4 (redrawn instead of updated?)", n)
	}
	if got := text("#refresh-state"); !strings.HasPrefix(got, "auto-refresh every 0.2 s") {
		t.Errorf("refresh state: %q", got)
	}

	// Paused: the timer keeps ticking, nothing is fetched, the count stays.
	run("pause", chromedp.Click(css("#refresh-toggle")))
	waitFor("paused", `document.querySelector("#refresh").dataset.paused === "1"`)
	refreshes, ticks := num(`document.querySelector("#refresh").dataset.refreshes`), num(`document.querySelector("#refresh").dataset.ticks`)
	create("n-1", 100, "USD", time.Hour)
	waitFor("four ticks while paused", fmt.Sprintf(`+document.querySelector("#refresh").dataset.ticks >= %d`, ticks+4))
	if got := num(`+document.querySelector("#refresh").dataset.refreshes`); got != refreshes {
		t.Errorf("refreshes while paused: %d, then %d", refreshes, got)
	}
	if got := text(pending); got != "4" {
		t.Errorf("PENDING while paused: %q, want 4 (not refreshed)", got)
	}
	if got := text("#refresh-toggle"); got != "Resume auto-refresh" {
		t.Errorf("the toggle while paused reads %q", got)
	}
	// Still paused after a reload (localStorage); resumed, it refreshes again.
	run("overview reloaded", chromedp.Navigate(f.open+"/"), chromedp.WaitVisible(css("#refresh-toggle")))
	waitFor("paused after the reload", `document.querySelector("#refresh").dataset.paused === "1"`)
	waitFor("three ticks after the reload", `+document.querySelector("#refresh").dataset.ticks >= 3`)
	if got := num(`+(document.querySelector("#refresh").dataset.refreshes || 0)`); got != 0 {
		t.Errorf("refreshes after a reload while paused: %d", got)
	}
	run("resume", chromedp.Click(css("#refresh-toggle")))
	create("n-2", 100, "USD", time.Hour)
	waitFor("refreshing again", fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === "6"`, pending))
	if got := eval(`String(window.localStorage.getItem("lapse.overview.paused"))`); got != "null" {
		t.Errorf("the pause is still stored after resuming: %q", got)
	}

	// The search box of the header: an order id, a payment id, neither.
	search := func(step, q string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, chromedp.Navigate(f.open+"/ui/skus"), chromedp.WaitVisible(css("#search-q")),
			chromedp.SendKeys(css("#search-q"), q), chromedp.Click(css("#search-go"))); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	search("search by order id", "m-jpy")
	waitFor("the order's page", `location.pathname === "/ui/orders/m-jpy" && !!document.querySelector("#status")`)
	if got := text("#amount"); got != "129,900 JPY" {
		t.Errorf("m-jpy's amount: %q, want 129,900 JPY", got)
	}
	search("search by payment id", "late-r0")
	waitFor("the payment's order", `location.pathname === "/ui/orders/r-0" && !!document.querySelector("#found-payment")`)
	if got := text("#found-payment"); !strings.Contains(got, "late-r0") || !strings.Contains(got, "10.37 USD") {
		t.Errorf("the found attempt's row: %q", got)
	}
	search("search by a stuck order's payment id", "pay-s-07")
	waitFor("the stuck order", `location.pathname === "/ui/orders/s-07" && !!document.querySelector("#found-payment")`)
	search("search for nothing", "no-such-id")
	sctx, cancelStep := context.WithTimeout(b, 15*time.Second)
	err := chromedp.Do(sctx, chromedp.WaitVisible(css("#error")))
	cancelStep()
	if err != nil {
		t.Fatalf("search for nothing: %v", err)
	}
	checkErrors("search for nothing", "404") // the browser reports the page's 404, and only that
	if got := text("#error"); !strings.Contains(got, `"no-such-id"`) {
		t.Errorf("search for nothing: %q", got)
	}

	// The orders page's filters narrow the list and stay in its next page's link.
	run("orders", chromedp.Navigate(f.open+"/ui/orders"), chromedp.WaitVisible(css("#filters")))
	if n := rows(); n != 50 {
		t.Errorf("all orders, first page: %d rows, want 50", n)
	}
	run("status PAYING", chromedp.SetValue(css(`#filters select[name="status"]`), "PAYING"), chromedp.Click(css("#filter")))
	waitFor("PAYING listed", `location.search.includes("status=PAYING") && !!document.querySelector("#orders")`)
	if got := eval(`[...document.querySelectorAll("#orders tbody tr td:nth-child(2)")].every(td => td.textContent === "PAYING") ? "yes" : "no"`); got != "yes" {
		t.Error("status=PAYING lists an order of another status")
	}
	run("past deadline", chromedp.Click(css("#filter-past-deadline")), chromedp.Click(css("#filter")))
	waitFor("past deadline listed", `location.search.includes("past_deadline=1") && location.search.includes("status=PAYING") && !!document.querySelector("#next")`)
	first := rows()
	next := eval(`document.querySelector("#next").getAttribute("href")`)
	if first != 50 || !strings.Contains(next, "past_deadline=1") || !strings.Contains(next, "status=PAYING") || !strings.Contains(next, "cursor=") {
		t.Errorf("past deadline, first page: %d rows, next %q", first, next)
	}
	if got := eval(`[...document.querySelectorAll("#orders tbody tr")].every(tr => tr.textContent.includes("past deadline") && tr.textContent.includes("s-")) ? "yes" : "no"`); got != "yes" {
		t.Error("past deadline lists an order not past its deadline")
	}
	run("past deadline, next page", chromedp.Click(css("#next")))
	waitFor("the next page", `location.search.includes("cursor=") && !!document.querySelector("#orders")`)
	if n := rows(); first+n != stuck {
		t.Errorf("past deadline: %d + %d orders over two pages, want %d", first, n, stuck)
	}
	if got := eval(`document.querySelector("#filter-past-deadline").checked && document.querySelector('#filters select[name="status"]').value === "PAYING" ? "kept" : "lost"`); got != "kept" {
		t.Error("the next page's form lost the filters")
	}
	if got := text("#orders"); strings.Contains(got, "s-late") {
		t.Error("s-late, its deadline ahead, is listed past deadline")
	}
	run("refund_required", chromedp.Navigate(f.open+"/ui/orders"), chromedp.WaitVisible(css("#filters")),
		chromedp.Click(css("#filter-refund")), chromedp.Click(css("#filter")))
	waitFor("refund_required listed", `location.search.includes("refund=1") && !!document.querySelector("#orders")`)
	if got := eval(`[...document.querySelectorAll("#orders tbody tr td:first-child a")].map(a => a.textContent).join(",")`); got != "r-0" {
		t.Errorf("refund_required lists %q, want r-0", got)
	}

	// One money format: every amount on the orders page and the order page.
	run("orders by prefix m-", chromedp.Navigate(f.open+"/ui/orders?prefix=m-"), chromedp.WaitVisible(css("#orders")))
	amounts := eval(`[...document.querySelectorAll("#orders tbody tr")].map(tr => tr.children[0].textContent + "=" + tr.children[2].textContent).join(";")`)
	if want := "m-bhd=1.234 BHD;m-jpy=129,900 JPY;m-usd=10.37 USD"; amounts != want {
		t.Errorf("amounts on the orders page: %q, want %q", amounts, want)
	}
	format := regexp.MustCompile(`^-?\d{1,3}(,\d{3})*(\.\d+)? [A-Z]{3}$`)
	for _, id := range []string{"m-bhd", "r-0", "s-00"} {
		run("order "+id, chromedp.Navigate(f.open+"/ui/orders/"+id), chromedp.WaitVisible(css("#payments")))
		cells := eval(`[document.querySelector("#amount").textContent, ...[...document.querySelectorAll("#payments tbody tr")].filter(tr => tr.children.length > 2).map(tr => tr.children[2].textContent).filter(s => s !== "—")].join(";")`)
		for _, c := range strings.Split(cells, ";") {
			if !format.MatchString(c) {
				t.Errorf("order %s prints the amount %q", id, c)
			}
		}
	}
	if got := text("#amount"); got != "5.00 EUR" {
		t.Errorf("s-00's amount: %q", got)
	}
	checkErrors("the end")
}
