package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

func TestOrdersCommands(t *testing.T) {
	t.Parallel()
	const token = "orders-cli-token-0123456789"
	s := startServe(t, []string{"LAPSE_API_TOKEN=" + token}, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
	c, err := client.New(s.url, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	must(c.SetStock(ctx, "tee", 10))(t)
	for _, id := range []string{"o1", "o2", "o3"} {
		must(c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 2}}, AmountCents: 1999}))(t)
	}
	must(c.Pay(ctx, "o2", "pi_o2"))(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withToken := []string{"LAPSE_API_TOKEN=" + token, "LAPSE_SERVER=" + s.url}
	run := func(env []string, wantCode int, args ...string) string {
		t.Helper()
		out, code := lapseCmd(t, env, args...)
		if code != wantCode {
			t.Fatalf("lapse %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		if strings.Contains(out, token) {
			t.Fatalf("lapse %s printed the token:\n%s", strings.Join(args, " "), out)
		}
		return out
	}

	out := run(withToken, 0, "orders", "get", "o2")
	for _, want := range []string{"id                o2\n", "status            PAYING\n", "amount            19.99 USD\n", "items             tee×2\n",
		"payment_id        pi_o2\n", "payments:\n", "  PAYMENT ID  STATUS", "  pi_o2       PENDING"} {
		if !strings.Contains(out, want) {
			t.Errorf("orders get o2: no %q in:\n%s", want, out)
		}
	}
	out = run(nil, 0, "orders", "get", "--server", s.url, "--api-token-file", tokenFile, "--json", "o1")
	var o order.Order
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.ID != "o1" || o.Status != order.Pending || o.Items[0].Qty != 2 {
		t.Fatalf("orders get --json: %+v, %v:\n%s", o, err, out)
	}

	out = run(withToken, 0, "orders", "list", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID  STATUS   AMOUNT     ITEMS  CREATED") || !strings.HasPrefix(lines[1], "o3  PENDING  19.99 USD") ||
		!strings.HasPrefix(lines[2], "o2  PAYING ") || !strings.HasPrefix(lines[3], "more: run again with --cursor ") {
		t.Fatalf("orders list --limit 2:\n%s", out)
	}
	cursor := strings.TrimPrefix(lines[3], "more: run again with --cursor ")
	if out := run(withToken, 0, "orders", "list", "--cursor", cursor, "--json"); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"id":"o1"`) {
		t.Fatalf("orders list --cursor --json:\n%s", out)
	}
	if out := run(withToken, 0, "orders", "list", "--status", "PAID"); out != "no orders\n" {
		t.Fatalf("orders list --status PAID:\n%s", out)
	}

	out = run(withToken, 0, "orders", "cancel", "o1")
	if !strings.Contains(out, "status            CANCELLED\n") || !strings.Contains(out, "(buyer)") {
		t.Fatalf("orders cancel o1:\n%s", out)
	}
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	out = run(withToken, 0, "orders", "extend", "o3", "--expires-at", at.Format(time.RFC3339))
	if !strings.Contains(out, "status            PENDING\n") || !strings.Contains(out, "expires_at        "+order.FormatTime(at)+"\n") {
		t.Fatalf("orders extend o3 --expires-at %s:\n%s", at.Format(time.RFC3339), out)
	}
	before := time.Now()
	out = run(withToken, 0, "orders", "extend", "--json", "--timeout", "90m", "o3")
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Status != order.Pending ||
		o.ExpiresAt.Before(before.Add(90*time.Minute).Truncate(time.Millisecond)) || o.ExpiresAt.After(time.Now().Add(90*time.Minute)) {
		t.Fatalf("orders extend --timeout 90m --json: %+v, %v:\n%s", o, err, out)
	}
	if out := run(withToken, 1, "orders", "extend", "o1", "--timeout", "1h"); out != "lapse orders: order_not_pending: the order is not PENDING\n" {
		t.Fatalf("orders extend of the cancelled o1:\n%s", out)
	}
	// The API's refusals: exit 1 with the code and message.
	if out := run(withToken, 1, "orders", "cancel", "o1"); out != "lapse orders: order_not_pending: the order is not PENDING\n" {
		t.Fatalf("orders cancel o1 again:\n%s", out)
	}
	if out := run(withToken, 1, "orders", "get", "nope"); !strings.Contains(out, "order_not_found: no such order") {
		t.Fatalf("orders get nope:\n%s", out)
	}
	if out := run([]string{"LAPSE_SERVER=" + s.url}, 1, "orders", "list"); !strings.Contains(out, "lapse orders: unauthorized: ") {
		t.Fatalf("orders list without the token:\n%s", out)
	}
	if out := run(nil, 1, "orders", "get", "--server", "http://127.0.0.1:1", "o1"); !strings.Contains(out, "connection refused") {
		t.Fatalf("orders get from no server:\n%s", out)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{
		{"orders"}, {"orders", "frob"}, {"orders", "get"}, {"orders", "get", "a", "b"}, {"orders", "cancel"},
		{"orders", "list", "--status", "LOST"}, {"orders", "list", "--limit", "0"}, {"orders", "get", "--server", "ftp://x", "o1"},
		{"orders", "get", "--api-token", "x", "--api-token-file", tokenFile, "o1"}, {"events", "tail", "--interval", "1ms"},
		{"orders", "extend", "o3"}, {"orders", "extend", "--timeout", "1h", "--expires-at", at.Format(time.RFC3339), "o3"},
		{"orders", "extend", "--expires-at", "tomorrow", "o3"}, {"orders", "extend", "--timeout", "0s", "o3"}, {"orders", "extend", "--timeout", "1h"},
	} {
		run(withToken, 2, args...)
	}
}

// lapse events tail shows a delivery while the sink refuses it (pending),
// then again when the sink refuses it for good (dead), and exits 0 on
// SIGINT.
func TestEventsTail(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	rcv.answer(500)
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"), "--sink", rcv.url(), "--webhook-secret", testWebhookSecret)
	c := s.api()
	must(c.SetStock(t.Context(), "tee", 10))(t)
	must(c.CreateOrder(t.Context(), client.CreateOrder{ID: "before", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1}))(t)
	// The event is listed once the relay has fanned it out to the sink.
	for deadline := time.Now().Add(10 * time.Second); len(must(c.ListEvents(t.Context(), client.ListEvents{}))(t).Events) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first event is not listed after 10 s")
		}
	}

	cmd := exec.Command(binary, "events", "tail", "--server", s.url, "--interval", "50ms")
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitFor := func(what string, cond func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out := stdout.String()
			if cond(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("events tail: no %s in 30 s:\n%s\nstderr:\n%s", what, out, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("header", func(out string) bool { return strings.HasPrefix(out, "STATE       SEQ  EVENT ID") })
	if !strings.Contains(stderr.String(), "following "+s.url+" (after seq 1, 0 dead already)") {
		t.Fatalf("events tail stderr:\n%s", stderr.String())
	}
	must(c.CreateOrder(t.Context(), client.CreateOrder{ID: "during", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 1}))(t)
	out := waitFor("pending line", func(out string) bool { return strings.Contains(out, "order.created") })
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "pending       2  ") ||
		!strings.Contains(lines[1], " during ") || strings.Contains(out, "before") {
		t.Fatalf("events tail, the new event pending:\n%s", out)
	}
	rcv.answer(400)
	out = waitFor("dead lines", func(out string) bool { return strings.Count(out, "\ndead ") == 2 })
	if !strings.Contains(out, "\ndead          1  ") || !strings.Contains(out, " before ") || !strings.Contains(out, "refused: webhook") {
		t.Fatalf("events tail, both events dead:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("events tail after SIGINT: %v\n%s", err, stderr.String())
	}
}

// lapse orders check and lapse orders cancel --force on a server without a
// gateway: both refuse what would ask or close at the gateway (exit 1 with
// the API's code), --no-close cancels as operator; the flags that go
// together are usage errors apart.
func TestOrdersOperatorCommands(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
	c := s.api()
	ctx := t.Context()
	must(c.SetStock(ctx, "tee", 10))(t)
	for _, id := range []string{"p1", "p2"} {
		must(c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 500}))(t)
	}
	must(c.Pay(ctx, "p1", "pi_p1"))(t)
	env := []string{"LAPSE_SERVER=" + s.url}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, code := lapseCmd(t, env, args...)
		if code != wantCode {
			t.Fatalf("lapse %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}
	if out := run(1, "orders", "check", "p1"); !strings.Contains(out, "no_gateway: ") {
		t.Fatalf("orders check without a gateway:\n%s", out)
	}
	if out := run(1, "orders", "check", "p2"); !strings.Contains(out, "no_gateway: ") {
		t.Fatalf("orders check of a PENDING order without a gateway:\n%s", out)
	}
	if out := run(1, "orders", "cancel", "p1", "--force", "--reason", "operator"); !strings.Contains(out, "no_gateway: ") {
		t.Fatalf("orders cancel --force without a gateway:\n%s", out)
	}
	if got := must(c.GetOrder(ctx, "p1"))(t); got.Status != order.Paying {
		t.Fatalf("after the refusals: %s", got.Status)
	}
	out := run(0, "orders", "cancel", "p1", "--force", "--reason", "operator", "--no-close")
	if !strings.Contains(out, "status            CANCELLED\n") || !strings.Contains(out, "(operator)") {
		t.Fatalf("orders cancel --force --no-close:\n%s", out)
	}
	if out := run(1, "orders", "cancel", "p1", "--force", "--reason", "operator", "--no-close"); !strings.Contains(out, "order_not_open: ") {
		t.Fatalf("orders cancel --force of a CANCELLED order:\n%s", out)
	}
	for _, args := range [][]string{
		{"orders", "check"}, {"orders", "check", "a", "b"},
		{"orders", "cancel", "p2", "--reason", "operator"}, {"orders", "cancel", "p2", "--no-close"},
		{"orders", "cancel", "p2", "--force"}, {"orders", "cancel", "p2", "--force", "--reason", "buyer"},
	} {
		run(2, args...)
	}
	if got := must(c.GetOrder(ctx, "p2"))(t); got.Status != order.Pending {
		t.Fatalf("after the usage errors: %s", got.Status)
	}
}
