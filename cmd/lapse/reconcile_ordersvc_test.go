package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc/ordersvctest"
	"github.com/lapsehq/lapse/reconcile"
)

// TestReconcileOrderService runs lapse serve --order-service on PostgreSQL
// with the reference Python receiver as the shop, settles a few orders
// through it, then puts some of them in disagreement on purpose (the
// shop's rows changed behind lapse's back, a command answered not_found
// that went DEAD): lapse reconcile --order-service must report exactly
// those, and refuse to run (exit 2) when it cannot ask.
func TestReconcileOrderService(t *testing.T) {
	t.Parallel()
	py := ordersvctest.StartPython(t, ordersvctest.PythonConfig{Secrets: []string{e2eOrderServiceSecret}})
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	secretPath := filepath.Join(t.TempDir(), "order-service.secret")
	if err := os.WriteFile(secretPath, []byte(e2eOrderServiceSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, nil, "--store", storeURL, "--grace", "0", "--order-service", py.URL, "--order-service-secret-file", secretPath)
	api := srv.api()
	ctx := context.Background()

	// At the shop, before the deadlines.
	py.Seed(
		ordersvctest.Order{ID: "ok-cancelled", Status: "pending"},
		ordersvctest.Order{ID: "ok-paid", Status: "paid"},
		ordersvctest.Order{ID: "ok-open", Status: "pending"},
		ordersvctest.Order{ID: "cancelled-open", Status: "pending"},
		ordersvctest.Order{ID: "cancelled-paid", Status: "pending"},
		ordersvctest.Order{ID: "paid-cancelled", Status: "paid"},
		ordersvctest.Order{ID: "paid-open", Status: "pending"},
		// cancelling-final and missing: not at the shop.
	)
	register := func(id string, timeout time.Duration) {
		t.Helper()
		if _, err := api.CreateOrder(ctx, client.CreateOrder{ID: id, AmountCents: 1000, Currency: "EUR", Timeout: timeout}); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	for _, id := range []string{"ok-cancelled", "ok-paid", "cancelled-open", "cancelled-paid", "paid-cancelled", "cancelling-final"} {
		register(id, 300*time.Millisecond)
	}
	for _, id := range []string{"ok-open", "paid-open", "missing"} {
		register(id, time.Hour)
	}
	payOrder(t, openTestStore(t, storeURL), "paid-open") // a payment reported to lapse, not to the shop

	// The commands' answers settle lapse's side.
	want := map[string]order.Status{"ok-cancelled": order.Cancelled, "ok-paid": order.Paid, "cancelled-open": order.Cancelled,
		"cancelled-paid": order.Cancelled, "paid-cancelled": order.Paid, "cancelling-final": order.Cancelling}
	waitFor(t, 30*time.Second, "orders settled by the shop's answers", func() (struct{}, bool) {
		for id, st := range want {
			if o := must(api.GetOrder(ctx, id))(t); o.Status != st {
				return struct{}{}, false
			}
		}
		page := must(api.ListCommands(ctx, client.ListCommands{Dead: true}))(t)
		return struct{}{}, len(page.Commands) == 1 && page.Commands[0].OrderID == "cancelling-final"
	})

	run := func(args ...string) (string, string, int) {
		t.Helper()
		return tasksCmd(t, append([]string{"reconcile", "--store", storeURL, "--order-service", py.URL, "--order-service-secret-file", secretPath}, args...)...)
	}
	report := func() reconcile.OrderServiceReport {
		t.Helper()
		out, stderr, code := run("--json")
		var rep reconcile.OrderServiceReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || (code != 0 && code != 1) {
			t.Fatalf("reconcile --json: exit %d, %v\n%s\n%s", code, err, out, stderr)
		}
		if rep.OK() != (code == 0) {
			t.Errorf("exit %d with a report OK=%v", code, rep.OK())
		}
		return rep
	}
	rows := func(rep reconcile.OrderServiceReport) []string {
		out := []string{}
		for _, m := range rep.Mismatches {
			out = append(out, string(m.Kind)+" "+m.OrderID+" "+string(m.LapseStatus)+" "+string(m.ShopStatus))
		}
		return out
	}

	// Before the shop changes behind lapse's back: the two orders it does
	// not have, and the payment only lapse was told of.
	rep := report()
	if got, wantRows := rows(rep), []string{"not_found_at_shop cancelling-final CANCELLING not_found", "not_found_at_shop missing PENDING not_found",
		"paid_but_shop_open paid-open PAID pending"}; !slices.Equal(got, wantRows) {
		t.Errorf("before: mismatches %q, want %q", got, wantRows)
	}
	if rep.Orders != 9 || rep.Asked != 9 || len(rep.Errors) != 0 {
		t.Errorf("before: %d orders, %d asked, errors %v", rep.Orders, rep.Asked, rep.Errors)
	}

	// The shop's rows changed behind lapse's back.
	py.Seed(
		ordersvctest.Order{ID: "cancelled-open", Status: "pending"},
		ordersvctest.Order{ID: "cancelled-paid", Status: "paid"},
		ordersvctest.Order{ID: "paid-cancelled", Status: "cancelled"},
		ordersvctest.Order{ID: "cancelling-final", Status: "cancelled"},
	)
	rep = report()
	wantRows := []string{
		"cancelled_but_shop_open cancelled-open CANCELLED pending",
		"cancelled_but_shop_paid cancelled-paid CANCELLED paid",
		"cancelling_but_shop_final cancelling-final CANCELLING cancelled",
		"not_found_at_shop missing PENDING not_found",
		"paid_but_shop_cancelled paid-cancelled PAID cancelled",
		"paid_but_shop_open paid-open PAID pending",
	}
	if got := rows(rep); !slices.Equal(got, wantRows) {
		t.Errorf("after: mismatches\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}
	for _, m := range rep.Mismatches {
		if m.OrderID == "cancelling-final" && (m.Command == nil || m.Command.Status != order.TaskDead || !strings.Contains(m.Detail, "lapse commands retry")) {
			t.Errorf("cancelling-final: want its DEAD command and the way out: %+v", m)
		}
	}

	// The table, for a person.
	out, _, code := run()
	if code != 1 || !strings.Contains(out, "NOT OK") || !strings.Contains(out, "9 lapse orders, 9 answered") ||
		!strings.Contains(out, "cancelled_but_shop_paid    1") {
		t.Errorf("table: exit %d\n%s", code, out)
	}

	// What cannot ask is exit 2, not a clean report nor a mismatch.
	noRoute := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(noRoute.Close)
	otherSecret := filepath.Join(t.TempDir(), "other.secret")
	if err := os.WriteFile(otherSecret, []byte("whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldC1vdGhlcg==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"reconcile", "--store", storeURL}
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"an amqp URL", []string{"--order-service", "amqp://guest:guest@127.0.0.1:5672/", "--order-service-secret-file", secretPath}, "HTTP status route"},
		{"no secret", []string{"--order-service", py.URL}, "signing secret"},
		{"with --gateway", []string{"--order-service", py.URL, "--order-service-secret-file", secretPath, "--gateway", "http://127.0.0.1:1"}, "give one of"},
		{"another secret", []string{"--order-service", py.URL, "--order-service-secret-file", otherSecret}, "401"},
		{"no status route", []string{"--order-service", noRoute.URL, "--order-service-secret-file", secretPath}, "no status route"},
	} {
		out, stderr, code := tasksCmd(t, append(base, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.says) || strings.Contains(stderr, e2eOrderServiceSecret) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 saying %q", tc.name, code, out, stderr, tc.says)
		}
	}
}
