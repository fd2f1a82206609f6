package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// mockpay is a running `lapse mockpay` process.
type mockpay struct {
	t   *testing.T
	url string
}

func startMockpay(t *testing.T, addr, callbackURL, secret string, flags ...string) *mockpay {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"mockpay", "--listen", addr, "--callback-url", callbackURL, "--callback-secret", secret}, flags...)...)
	logs := &syncBuffer{}
	cmd.Stderr, cmd.Stdout = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("lapse mockpay log:\n%s", logs.String())
		}
	})
	m := &mockpay{t: t, url: "http://" + addr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(m.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("lapse mockpay did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *mockpay) post(path, body string, want int) map[string]any {
	m.t.Helper()
	resp, err := http.Post(m.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		m.t.Fatalf("mockpay POST %s: status %d, want %d: %s", path, resp.StatusCode, want, b)
	}
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func (m *mockpay) control(body string) { m.t.Helper(); m.post("/_control", body, 200) }

// stats returns the mock's request counters for one order.
func (m *mockpay) stats(orderID string) (queries, closes float64) {
	m.t.Helper()
	resp, err := http.Get(m.url + "/_stats?order_id=" + orderID)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var s map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		m.t.Fatal(err)
	}
	return s["queries"], s["closes"]
}

func (m *mockpay) trade(orderID string) string {
	m.t.Helper()
	resp, err := http.Get(m.url + "/payments/" + orderID)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	s, _ := tr["status"].(string)
	return s
}

// waitStatus polls an order until it has status, within d.
func (s *server) waitStatus(id, status string, d time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		o := s.call("GET", "/v1/orders/"+id, "", 200)
		if o["status"] == status {
			return o
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("order %s is %v after %s, want %s", id, o["status"], d, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stays asserts an order keeps status for d.
func (s *server) stays(id, status string, d time.Duration) {
	s.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if o := s.call("GET", "/v1/orders/"+id, "", 200); o["status"] != status {
			s.t.Fatalf("order %s became %v, want it to stay %s", id, o["status"], status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The decision rules of the gateway check, end to end: `lapse serve
// --gateway` against `lapse mockpay`, both real processes on loopback.
func TestGatewayRulesEndToEnd(t *testing.T) {
	t.Parallel()
	const secret = "gw-secret"
	mockAddr := freePort(t)
	dir := t.TempDir()
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(dir, "lapse.db"), "--grace", "0s",
		"--callback-secret", secret, "--gateway", "http://"+mockAddr, "--gateway-timeout", "500ms", "--gateway-retries", "0",
		"--gateway-pending-max", "3s", "--confirm-after", "1s", "--log-level", "debug")
	m := startMockpay(t, mockAddr, s.url, secret)
	s.call("PUT", "/v1/skus/tee", `{"available": 100}`, 200)
	create := func(id string, timeout float64) {
		s.call("POST", "/v1/orders", fmt.Sprintf(`{"id":%q,"items":[{"sku":"tee","qty":1}],"amount_cents":700,"timeout_seconds":%g}`, id, timeout), 201)
	}

	t.Run("an order that never started payment is cancelled without a gateway call", func(t *testing.T) {
		create("never", 0.5)
		s.waitStatus("never", "CANCELLED", 10*time.Second)
		if q, c := m.stats("never"); q != 0 || c != 0 {
			t.Fatalf("gateway asked %v times, closed %v times", q, c)
		}
	})

	t.Run("paid at the gateway, callback lost: marked PAID at the deadline", func(t *testing.T) {
		m.control(`{"drop_callbacks": true}`)
		defer m.control(`{"drop_callbacks": false}`)
		create("lost-cb", 1)
		s.call("POST", "/v1/orders/lost-cb/pay", "", 200)
		m.post("/payments/lost-cb/pay", `{"amount_cents": 700, "outcome": "SUCCEEDED"}`, 200)
		s.stays("lost-cb", "PAYING", 500*time.Millisecond) // lapse was not told
		o := s.waitStatus("lost-cb", "PAID", 10*time.Second)
		if o["payment_id"] == "" || o["cancelled_at"] != nil {
			t.Fatalf("paid order: %v", o)
		}
	})

	t.Run("abandoned: the trade is closed, then the order cancelled", func(t *testing.T) {
		create("abandoned", 0.5)
		s.call("POST", "/v1/orders/abandoned/pay", "", 200)
		s.waitStatus("abandoned", "CANCELLED", 10*time.Second)
		if _, c := m.stats("abandoned"); c < 1 {
			t.Fatal("cancelled without closing the trade")
		}
		if got := m.trade("abandoned"); got != "CLOSED" {
			t.Fatalf("trade is %s, want CLOSED", got)
		}
		m.post("/payments/abandoned/pay", `{"amount_cents": 700}`, 409) // the buyer can no longer pay
	})

	t.Run("gateway erroring: never cancelled while it errors, cancelled once it says not paid", func(t *testing.T) {
		m.control(`{"fail_queries": true}`)
		create("erroring", 0.5)
		s.call("POST", "/v1/orders/erroring/pay", "", 200)
		deadline := time.Now().Add(10 * time.Second)
		for q, _ := m.stats("erroring"); q < 3; q, _ = m.stats("erroring") {
			if time.Now().After(deadline) {
				t.Fatalf("only %v queries in 10s", q)
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.stays("erroring", "PAYING", 300*time.Millisecond)
		if _, c := m.stats("erroring"); c != 0 {
			t.Fatal("closed a trade whose state was unknown")
		}
		m.control(`{"fail_queries": false}`)
		s.waitStatus("erroring", "CANCELLED", 40*time.Second)
	})

	t.Run("still paying at the gateway: waits, and a payment that completes wins", func(t *testing.T) {
		create("in-progress", 0.5)
		s.call("POST", "/v1/orders/in-progress/pay", "", 200)
		m.post("/payments/in-progress/pay", `{"amount_cents": 700, "outcome": "PENDING"}`, 200)
		deadline := time.Now().Add(10 * time.Second)
		for q, _ := m.stats("in-progress"); q < 2; q, _ = m.stats("in-progress") {
			if time.Now().After(deadline) {
				t.Fatalf("only %v queries in 10s", q)
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.stays("in-progress", "PAYING", 300*time.Millisecond)
		m.post("/payments/in-progress/pay", `{"amount_cents": 700, "outcome": "SUCCEEDED"}`, 200)
		s.waitStatus("in-progress", "PAID", 10*time.Second)
	})

	t.Run("still paying past the maximum wait: closed, then cancelled", func(t *testing.T) {
		create("stalled", 0.5)
		s.call("POST", "/v1/orders/stalled/pay", "", 200)
		m.post("/payments/stalled/pay", `{"amount_cents": 700, "outcome": "PENDING"}`, 200)
		s.stays("stalled", "PAYING", 2*time.Second)
		s.waitStatus("stalled", "CANCELLED", 20*time.Second)
		if got := m.trade("stalled"); got != "CLOSED" {
			t.Fatalf("trade is %s, want CLOSED", got)
		}
	})

	t.Run("a failed attempt that succeeded on retry at the gateway: PAID", func(t *testing.T) {
		create("retried", 1)
		// The client names the attempt with the id it uses at the gateway:
		// the gateway's FAILED callback then acts on it.
		s.call("POST", "/v1/orders/retried/pay", `{"payment_id": "retried-card-1"}`, 200)
		m.post("/payments/retried/pay", `{"amount_cents": 700, "outcome": "FAILED", "payment_id": "retried-card-1"}`, 200)
		o := s.waitStatus("retried", "PENDING", 5*time.Second) // the FAILED callback arrived
		if o["payment_attempts"] != 1.0 {
			t.Fatalf("attempts %v", o["payment_attempts"])
		}
		m.control(`{"drop_callbacks": true}`)
		defer m.control(`{"drop_callbacks": false}`)
		m.post("/payments/retried/pay", `{"amount_cents": 700, "outcome": "SUCCEEDED"}`, 200)
		s.waitStatus("retried", "PAID", 10*time.Second)
	})

	s.stop()
	out, code := lapseCmd(t, nil, "audit", "--store", "sqlite://"+filepath.Join(dir, "lapse.db"))
	if code != 0 {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
	// Reconcile against the mock's query API: lapse and the gateway agree.
	out, code = lapseCmd(t, nil, "reconcile", "--store", "sqlite://"+filepath.Join(dir, "lapse.db"), "--gateway", m.url)
	if code != 0 {
		t.Fatalf("reconcile exit %d:\n%s", code, out)
	}
}

// reconcile finds a planted mismatch through the CLI, from a statement file.
func TestReconcileFindsPlantedMismatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "lapse.db")
	s := startServe(t, nil, "--store", url, "--callback-secret", "x")
	s.call("PUT", "/v1/skus/tee", `{"available": 10}`, 200)
	s.call("POST", "/v1/orders", `{"id":"r-cancelled","items":[{"sku":"tee","qty":1}],"amount_cents":500}`, 201)
	s.call("POST", "/v1/orders/r-cancelled/cancel", "", 200)
	s.call("POST", "/v1/orders", `{"id":"r-clean","items":[{"sku":"tee","qty":1}],"amount_cents":500}`, 201)
	s.stop()
	statement := filepath.Join(dir, "statement.csv")
	clean := "order_id,payment_id,status,amount_cents\nr-clean,,NOT_PAID,0\n"
	if err := writeFile(statement, clean); err != nil {
		t.Fatal(err)
	}
	if out, code := lapseCmd(t, nil, "reconcile", "--store", url, "--statement", statement); code != 0 {
		t.Fatalf("clean statement: exit %d\n%s", code, out)
	}
	if err := writeFile(statement, clean+"r-cancelled,pay_9,PAID,500\nr-ghost,pay_8,PAID,100\n"); err != nil {
		t.Fatal(err)
	}
	out, code := lapseCmd(t, nil, "reconcile", "--store", url, "--statement", statement, "--format", "json")
	if code != 1 {
		t.Fatalf("planted mismatches: exit %d\n%s", code, out)
	}
	var rep struct {
		Mismatches []struct {
			Kind    string `json:"kind"`
			OrderID string `json:"order_id"`
		} `json:"mismatches"`
	}
	if err := json.NewDecoder(bufio.NewReader(strings.NewReader(out))).Decode(&rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, m := range rep.Mismatches {
		got[m.OrderID] = m.Kind
	}
	if got["r-cancelled"] != "cancelled_but_paid" || got["r-ghost"] != "unknown_to_lapse" || len(got) != 2 {
		t.Fatalf("mismatches %v", got)
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// lapse mockpay --fail-refunds N answers the next N refunds 500 and refunds
// nothing; then it refunds, once per refund_key, and lists the refund at
// GET /_refunds. A negative N is a usage error.
func TestMockpayFailsRefunds(t *testing.T) {
	t.Parallel()
	m := startMockpay(t, freePort(t), "http://127.0.0.1:1", "s", "--drop-callbacks", "--fail-refunds", "1")
	m.post("/payments/o-1/pay", `{"amount_cents": 1299, "payment_id": "pay-1"}`, http.StatusOK)
	refund := `{"payment_id": "pay-1", "amount_cents": 1299, "currency": "CNY", "refund_key": "lapse-refund-pay-1"}`
	m.post("/payments/o-1/refund", refund, http.StatusInternalServerError)
	first := m.post("/payments/o-1/refund", refund, http.StatusOK)
	again := m.post("/payments/o-1/refund", refund, http.StatusOK)
	if first["status"] != "SUCCEEDED" || first["refund_id"] == "" || again["refund_id"] != first["refund_id"] {
		t.Fatalf("refunds: %v, then %v", first, again)
	}
	resp, err := http.Get(m.url + "/_refunds")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var listed []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil || len(listed) != 1 || listed[0]["refund_id"] != first["refund_id"] {
		t.Fatalf("GET /_refunds: %v, %v; want one refund", listed, err)
	}
	if out, code := lapseRun(t, 10*time.Second, nil, "mockpay", "--fail-refunds", "-1"); code != 2 || !strings.Contains(out, "--fail-refunds") {
		t.Fatalf("mockpay --fail-refunds -1: exit %d:\n%s", code, out)
	}
}

// lapse mockpay answers without authentication and signs callbacks with a
// real secret: it listens on loopback only, unless --allow-public says so.
func TestMockpayRefusesAPublicAddress(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		out, code := lapseRun(t, 10*time.Second, nil, "mockpay", "--listen", addr, "--callback-secret", "s")
		if code != 2 || !strings.Contains(out, "--allow-public") {
			t.Errorf("mockpay --listen %s: exit %d, want 2 and a message naming --allow-public:\n%s", addr, code, out)
		}
	}
	cmd := exec.Command(binary, "mockpay", "--listen", "0.0.0.0:0", "--allow-public")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "mock payment gateway listening") {
		if time.Now().After(deadline) {
			t.Fatalf("mockpay --allow-public did not start:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lapse reconcile prints the gateway's ids with their control characters
// escaped: a statement line cannot write escape sequences to the terminal.
func TestReconcileEscapesGatewayIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "lapse.db")
	if out, code := lapseCmd(t, nil, "migrate", "--store", url); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	statement := filepath.Join(dir, "statement.csv")
	if err := writeFile(statement, "ghost\x1b[2J,pay\x1b]0;pwned\x07,PAID,100\n"); err != nil {
		t.Fatal(err)
	}
	out, code := lapseCmd(t, nil, "reconcile", "--store", url, "--statement", statement)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (a mismatch):\n%s", code, out)
	}
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `"ghost\x1b[2J"`) || !strings.Contains(out, `"pay\x1b]0;pwned\a"`) {
		t.Fatalf("want the ids Go-quoted, no raw control character:\n%q", out)
	}
}

// --auto-refund refunds at the gateway: without one that refunds, serve
// refuses to start (exit 2) rather than leave refunds waiting forever.
func TestServeAutoRefundNeedsAGateway(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	out, code := lapseCmd(t, nil, "serve", "--store", db, "--auto-refund")
	if code != 2 || !strings.Contains(out, "--auto-refund needs a --gateway that refunds") {
		t.Fatalf("serve --auto-refund without a gateway: exit %d, want 2 and the reason:\n%s", code, out)
	}
}
