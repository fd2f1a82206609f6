package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/web"
)

// The dashboard in a real browser: Debian's chromium (installed by
// .ci/run), driven by chromedp, against a real lapse Service on SQLite with
// a real webhook sink, served on loopback as `lapse serve` serves it. One
// browser for the whole test; every wait is on a DOM condition with a
// deadline, never a sleep.

const chromiumPath = "/usr/bin/chromium"

const token = "dashboard-test-token-0123456789"

// artefacts is where screenshots go: $LAPSE_TEST_ARTEFACTS, else a temp dir.
func artefacts(t *testing.T) string {
	dir := os.Getenv("LAPSE_TEST_ARTEFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleErrors collects what the page reports as an error: console.error,
// uncaught exceptions, and browser log entries of level error (a failed
// resource load, a Content-Security-Policy violation).
type consoleErrors struct {
	mu   sync.Mutex
	errs []string
}

func (c *consoleErrors) add(s string) {
	c.mu.Lock()
	c.errs = append(c.errs, s)
	c.mu.Unlock()
}

func (c *consoleErrors) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.errs
	c.errs = nil
	return out
}

type fixture struct {
	svc      *lapse.Service
	open     string // the dashboard without a token
	guarded  string // the dashboard behind the token
	killSink atomic.Bool
}

func serve(t *testing.T, ctx context.Context, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// newFixture serves a fresh service's dashboard twice, open and behind the
// token; tune changes the dashboards' options.
func newFixture(t *testing.T, ctx context.Context, tune ...func(*web.Options)) *fixture {
	t.Helper()
	f := &fixture{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if f.killSink.Load() {
			w.WriteHeader(http.StatusBadRequest) // a 400 makes the event dead at once
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	sink, err := webhook.New(webhook.Config{URL: hook.URL, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lapse.New(lapse.Config{Store: st, Sinks: []outbox.Sink{sink}, Logger: logger,
		Outbox: outbox.Config{Interval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	for _, tok := range []string{"", token} {
		opts := web.Options{APIToken: tok, Logger: logger, SampleEvery: 100 * time.Millisecond}
		for _, f := range tune {
			f(&opts)
		}
		dash, err := web.New(svc, opts)
		if err != nil {
			t.Fatal(err)
		}
		go dash.Run(runCtx)
		u := serve(t, ctx, web.Mount(httpapi.New(svc, httpapi.Options{APIToken: tok, Logger: logger}), dash))
		if tok == "" {
			f.open = u
		} else {
			f.guarded = u
		}
	}
	return f
}

// eventually polls cond until it holds, for at most 10 s.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// script runs the orders the overview then shows: 6 orders with an hour to
// pay (3 paid, 1 cancelled by the buyer, 1 whose OnCancelled hook is
// recorded failing, as an embedding service's would be), 4 that time out at
// once, then, with the webhook answering 400, 2 more whose order.created is
// dead.
func (f *fixture) script(t *testing.T, ctx context.Context) {
	t.Helper()
	svc := f.svc
	if _, err := svc.SetStock(ctx, "tee", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetStock(ctx, "mug", 7); err != nil {
		t.Fatal(err)
	}
	create := func(id string, timeout time.Duration) {
		t.Helper()
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1999, Timeout: timeout}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	for i := range 6 {
		create(fmt.Sprintf("p-%d", i), time.Hour)
	}
	for i := range 3 {
		id := fmt.Sprintf("p-%d", i)
		if _, err := svc.PayAttempt(ctx, id, id+"-card"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: id + "-card", Status: lapse.PaymentSucceeded, AmountCents: 1999}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Cancel(ctx, "p-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Store().RecordHookFailure(ctx, &store.HookError{OrderID: "p-5", Event: store.HookCancelled,
		Err: errors.New("the shop's orders table refused the update")}, func(int) time.Duration { return time.Hour }); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		create(fmt.Sprintf("t-%d", i), 50*time.Millisecond)
	}
	eventually(t, "the timeouts cancelled and every event delivered", func() (bool, error) {
		for i := range 4 {
			o, err := svc.Get(ctx, fmt.Sprintf("t-%d", i))
			if err != nil || o.Status != order.Cancelled {
				return false, err
			}
		}
		evs, err := svc.Store().UnpublishedEvents(ctx, 10)
		return len(evs) == 0, err
	})
	f.killSink.Store(true)
	create("d-0", time.Hour)
	create("d-1", time.Hour)
	eventually(t, "two dead events", func() (bool, error) {
		st, err := svc.Store().OutboxStats(ctx)
		if err != nil || len(st.Sinks) != 1 {
			return false, err
		}
		return st.Sinks[0].Dead == 2, nil
	})
}

func newBrowser(t *testing.T) (context.Context, *consoleErrors) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run installs it): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first Run starts the browser (without a deadline: it would end the browser).
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	errs := &consoleErrors{}
	msgs := chromedp.Console(bctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				errs.add(m.String())
			}
		}
	}()
	return bctx, errs
}

func TestDashboardInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	f.script(t, ctx)
	b, errs := newBrowser(t)
	shots := artefacts(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// checkErrors fails on anything the page reported as an error.
	checkErrors := func(step string) {
		t.Helper()
		if e := errs.take(); len(e) > 0 {
			t.Fatalf("%s: the page reported errors:\n%s", step, strings.Join(e, "\n"))
		}
	}
	// run runs the steps, each wait bounded by 15 s.
	run := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		checkErrors(step)
	}
	get := func(what string, a any) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		var err error
		switch a := a.(type) {
		case *string:
			*a, err = chromedp.Run(sctx, chromedp.Text(css(what)))
			*a = strings.TrimSpace(*a)
		case *int:
			*a, err = chromedp.Run(sctx, chromedp.Evaluate[int](what))
		}
		if err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
	}
	text := func(sel string) string { var s string; get(sel, &s); return s }
	count := func(sel string) int {
		var n int
		get(fmt.Sprintf("document.querySelectorAll(%q).length", sel), &n)
		return n
	}
	shot := func(name string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, 15*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if os.Getenv("LAPSE_UPDATE_SCREENSHOT") == "1" && name == "overview" {
			if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chartsDrawn := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`document.querySelectorAll('#charts canvas').length >= 4 &&
			[...document.querySelectorAll('#charts canvas')].every(c => c.width > 0 && c.height > 0)`,
			chromedp.WithPollingTimeout(10*time.Second))(ctx, tg)
		return err
	})

	// The overview: the counts of the script, the four charts drawn.
	run("overview", chromedp.Navigate(f.open+"/"), chromedp.WaitVisible(css("#counts")), chartsDrawn)
	for status, want := range map[string]string{"PENDING": "4", "PAYING": "0", "PAID": "3", "CANCELLED": "5"} {
		if got := text(fmt.Sprintf(`#counts [data-status=%q] .n`, status)); got != want {
			t.Errorf("overview %s = %q, want %s", status, got, want)
		}
	}
	for name, want := range map[string]string{"dead events": "2", "dead stock tasks": "0", "PAYING past deadline": "0", "refund_required": "0", "hook failures": "1"} {
		if got := text(fmt.Sprintf(`#stuck [data-stuck=%q] .n`, name)); got != want {
			t.Errorf("overview stuck %s = %q, want %s", name, got, want)
		}
	}
	// Without an order service: no CANCELLING count, no commands card, no link.
	if n := count(`#counts [data-status="CANCELLING"], #commands, nav a[href^="/ui/commands"]`); n != 0 {
		t.Errorf("order-service mode's parts on the overview without an order service: %d", n)
	}
	var width int
	get(`Math.round(document.querySelector('#chart-lateness canvas').getBoundingClientRect().width)`, &width)
	if width <= 0 {
		t.Errorf("the lateness chart's canvas is %d px wide", width)
	}

	// An audit from the overview's button.
	run("audit", chromedp.Click(css("#run-audit")), chromedp.WaitVisible(css("#audit-result")), chartsDrawn)
	if got := text("#audit-result"); !strings.HasPrefix(got, "OK") {
		t.Errorf("audit: %q", got)
	}
	shot("overview")

	// Orders: by status, by id prefix.
	run("orders by status", chromedp.Navigate(f.open+"/ui/orders?status=PENDING"), chromedp.WaitVisible(css("#orders")))
	if n := count("#orders tbody tr a"); n != 4 {
		t.Errorf("PENDING orders listed: %d, want 4", n)
	}
	run("orders by prefix", chromedp.Navigate(f.open+"/ui/orders?prefix=t-"), chromedp.WaitVisible(css("#orders")))
	if n := count("#orders tbody tr a"); n != 4 {
		t.Errorf("orders with prefix t-: %d, want 4", n)
	}
	shot("orders")
	run("dead events", chromedp.Navigate(f.open+"/ui/events?dead=1"), chromedp.WaitVisible(css("#events")))
	if n := count(`#events tbody tr a[href^="/ui/orders/"]`); n != 2 {
		t.Errorf("dead events listed: %d, want 2", n)
	}
	run("dead tasks", chromedp.Navigate(f.open+"/ui/tasks?dead=1"), chromedp.WaitVisible(css("#tasks")))
	run("hook failures", chromedp.Navigate(f.open+"/ui/hook-failures"), chromedp.WaitVisible(css("#hook-failures")))
	if got := text("#hook-failures tbody tr:first-child"); !strings.Contains(got, "p-5") || !strings.Contains(got, "refused the update") {
		t.Errorf("first hook failure row: %q", got)
	}
	run("skus", chromedp.Navigate(f.open+"/ui/skus"), chromedp.WaitVisible(css("#skus")))
	if got := text("#skus tbody tr:first-child"); !strings.Contains(got, "mug") {
		t.Errorf("first SKU row: %q", got)
	}
	shot("skus")

	// One order: its timeline, then the buyer cancel with its confirmation.
	run("order", chromedp.Navigate(f.open+"/ui/orders/p-4"), chromedp.WaitVisible(css("#timeline")))
	if n := count("#timeline tr"); n < 4 { // created, expires_at, cancel_after, order.created
		t.Errorf("timeline of p-4: %d rows", n)
	}
	if got := text("#timeline"); !strings.Contains(got, "order.created") {
		t.Errorf("timeline of p-4 lacks its event: %q", got)
	}
	shot("order")
	run("cancel: confirmation", chromedp.Click(css("#cancel")), chromedp.WaitVisible(css("#confirm")))
	if o, _ := f.svc.Get(ctx, "p-4"); o.Status != order.Pending {
		t.Fatalf("p-4 is %s before the confirmation", o.Status)
	}
	run("cancel: confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#flash")))
	if got := text("#status"); got != "CANCELLED" {
		t.Errorf("p-4 shows %q after the cancel", got)
	}
	if o, err := f.svc.Get(ctx, "p-4"); err != nil || o.Status != order.Cancelled || o.CancelReason != order.ReasonBuyer {
		t.Errorf("p-4 after the cancel: %s %s %v", o.Status, o.CancelReason, err)
	}

	// Behind the token: the login form, a wrong token refused, the right
	// one let in, and a POST without the CSRF token refused.
	run("login form", chromedp.Navigate(f.guarded+"/ui/orders"), chromedp.WaitVisible(css("#login")))
	sctx, cancelStep := context.WithTimeout(b, 15*time.Second)
	err := chromedp.Do(sctx, chromedp.SendKeys(css("#token"), "not-the-token"), chromedp.Click(css("#login-submit")), chromedp.WaitVisible(css("#wrong")))
	cancelStep()
	if err != nil {
		t.Fatalf("wrong token: %v", err)
	}
	for _, e := range errs.take() { // the browser reports the refused login's 401, and only that
		if !strings.Contains(e, "401") {
			t.Fatalf("wrong token: the page reported %s", e)
		}
	}
	run("right token", chromedp.SendKeys(css("#token"), token), chromedp.Click(css("#login-submit")), chromedp.WaitVisible(css("#orders")))
	cookies, err := chromedp.Call(b, network.GetCookies, network.GetCookiesParams{URLs: []string{f.guarded}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == "lapse_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie: %+v", session)
	}
	run("overview behind the token", chromedp.Navigate(f.guarded+"/"), chromedp.WaitVisible(css("#run-audit")), chartsDrawn)
	sctx, cancelStep = context.WithTimeout(b, 15*time.Second)
	csrf, err := chromedp.Run(sctx, chromedp.Value(css("#audit input[name=csrf]")))
	cancelStep()
	if err != nil || csrf == "" {
		t.Fatalf("csrf field: %q %v", csrf, err)
	}
	post := func(form url.Values, withCookie bool) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.guarded+"/ui/audit", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", f.guarded)
		if withCookie {
			req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(url.Values{}, true); code != http.StatusForbidden {
		t.Errorf("POST without the CSRF token: %d, want 403", code)
	}
	if code := post(url.Values{"csrf": {"x" + csrf}}, true); code != http.StatusForbidden {
		t.Errorf("POST with a wrong CSRF token: %d, want 403", code)
	}
	if code := post(url.Values{"csrf": {csrf}}, false); code != http.StatusUnauthorized {
		t.Errorf("POST without the session: %d, want 401", code)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.guarded+"/ui/audit", strings.NewReader("csrf="+url.QueryEscape(csrf)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	if res, err := http.DefaultTransport.RoundTrip(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("POST from another origin: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	if code := post(url.Values{"csrf": {csrf}}, true); code != http.StatusSeeOther {
		t.Errorf("POST with the session and its CSRF token: %d, want 303", code)
	}
	run("logout", chromedp.Click(css(".logout button")), chromedp.WaitVisible(css("#login")))

	// The API beside it is untouched: its own token.
	res, err := http.Get(f.guarded + "/v1/orders/p-0")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("API without its token: %d", res.StatusCode)
	}
	checkErrors("the end")
}
