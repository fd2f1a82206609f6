package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchCmd runs `lapse bench args…` and returns its stdout, stderr and exit code.
func benchCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"bench"}, args...)...)
	cmd.Env = os.Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// benchJSON runs a bench with --json that must succeed and decodes its result.
func benchJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	stdout, stderr, code := benchCmd(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("lapse bench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	if strings.Contains(stderr, "due-not-cancelled") {
		t.Errorf("progress line printed with --json:\n%s", stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	return res
}

func sqliteTemp(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "bench.db")
}

// checkSettled checks what every bench result must show: every order paid or
// cancelled, none early, the audit clean, and the contract's fields present.
func checkSettled(t *testing.T, res map[string]any, orders int) {
	t.Helper()
	for _, k := range []string{"created_per_s", "cancelled", "paid", "lateness_ms", "early", "db_statements_per_order", "audit", "restarts"} {
		if _, ok := res[k]; !ok {
			t.Errorf("result has no %q: %v", k, res)
		}
	}
	num := func(k string) float64 {
		v, ok := res[k].(float64)
		if !ok {
			t.Fatalf("%s = %v, want a number", k, res[k])
		}
		return v
	}
	if got := num("orders"); got != float64(orders) {
		t.Errorf("orders = %v, want %d", got, orders)
	}
	if c, p := num("cancelled"), num("paid"); c+p != float64(orders) {
		t.Errorf("cancelled %v + paid %v != %d orders", c, p, orders)
	}
	if got := num("early"); got != 0 {
		t.Errorf("early = %v, want 0", got)
	}
	if got := num("created_per_s"); got <= 0 {
		t.Errorf("created_per_s = %v", got)
	}
	late, ok := res["lateness_ms"].(map[string]any)
	if !ok {
		t.Fatalf("lateness_ms = %v", res["lateness_ms"])
	}
	prev := 0.0
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		v, ok := late[k].(float64)
		if !ok || v < prev {
			t.Errorf("lateness_ms.%s = %v (after %v): want a number, not below the previous percentile", k, late[k], prev)
		}
		prev = v
	}
	audit, ok := res["audit"].(map[string]any)
	if !ok || audit["status"] != "ok" {
		t.Errorf("audit = %v, want status ok", res["audit"])
	}
	if v, ok := audit["violations"].([]any); !ok || len(v) != 0 {
		t.Errorf("audit violations = %v, want []", audit["violations"])
	}
}

func TestBenchOpenLoopOnSQLiteReportsTheContractFields(t *testing.T) {
	t.Parallel()
	res := benchJSON(t, "--store", sqliteTemp(t), "--orders", "300", "--rate", "300/s", "--timeout", "300ms",
		"--pay-ratio", "0.3", "--pay-at", "near-deadline", "--hot-sku-share", "0.5")
	checkSettled(t, res, 300)
	if paid, missed := res["paid"].(float64), res["pay_missed"].(float64); paid+missed != 90 {
		t.Errorf("paid %v + too late to pay %v, want 90 payments (30%% of 300)", paid, missed)
	}
	if res["db_statements_per_order"] != nil {
		// SQLite does not count statements yet; when it does, the figure must be sane.
		if v, ok := res["db_statements_per_order"].(float64); !ok || v < 1 {
			t.Errorf("db_statements_per_order = %v", res["db_statements_per_order"])
		}
	}
}

func TestBenchKillEveryRestartsTheWorkerAndLosesNothing(t *testing.T) {
	t.Parallel()
	res := benchJSON(t, "--store", sqliteTemp(t), "--orders", "300", "--rate", "300", "--timeout", "300ms",
		"--pay-ratio", "0.3", "--kill-every", "300ms")
	checkSettled(t, res, 300)
	if got := res["restarts"].(float64); got < 1 {
		t.Errorf("restarts = %v, want at least 1", got)
	}
	if got := res["sweep_caught"].(float64); got != 0 {
		t.Errorf("sweep_caught = %v: a restart lost timers that only the fallback sweep found", got)
	}
}

func TestBenchWindowWorkloadPrintsProgressAndATable(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := benchCmd(t, "--store", sqliteTemp(t), "--timers", "sql", "--orders", "40", "--lead", "4s", "--spread", "200ms", "--pay-ratio", "0.25")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"created 40/40", "paid ", "cancelled ", "due-not-cancelled ", "lateness p99 "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress on stderr lacks %q:\n%s", want, stderr)
		}
	}
	for _, want := range []string{"40 created", " paid, ", " cancelled", "lateness ms   p50", "early         0", "audit         ok"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBenchDrivesARunningServerOverHTTP(t *testing.T) {
	t.Parallel()
	storeURL := sqliteTemp(t)
	s := startServe(t, nil, "--store", storeURL, "--grace", "0s", "--callback-secret", "bench-secret")
	res := benchJSON(t, "--target", s.url, "--callback-secret", "bench-secret", "--store", storeURL,
		"--orders", "150", "--rate", "300", "--timeout", "300ms", "--pay-ratio", "0.2", "--skus", "3")
	checkSettled(t, res, 150)
	s.stop()
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "-5"}, "--rate -5"},
		{[]string{"--rate", "fast"}, "invalid value"},
		{[]string{"--pay-ratio", "1.5"}, "--pay-ratio 1.5"},
		{[]string{"--pay-at", "tomorrow"}, "--pay-at"},
		{[]string{"--hot-sku-share", "-0.1"}, "--hot-sku-share"},
		{[]string{"--skus", "0"}, "--skus 0"},
		{[]string{"--orders", "0"}, "--orders 0"},
		{[]string{"--rate", "100", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--rate", "100", "--spread", "2s"}, "--spread 2s"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--kill-every", "1ms"}, "--kill-every"},
		{[]string{"--timers", "carrier-pigeon"}, "--timers"},
		{[]string{"--target", "localhost:8080"}, "--target"},
		{[]string{"--target", "http://127.0.0.1:1", "--kill-every", "1s"}, "--kill-every"},
		{[]string{"--target", "http://127.0.0.1:1", "--pay-ratio", "0.5"}, "--callback-secret"},
		{[]string{"--target", "http://127.0.0.1:1", "--grace", "1s"}, "--grace"},
		{[]string{"--flush-redis-at", "1s"}, "--flush-redis-at"},
		{[]string{"--no-such-flag"}, "not defined"},
	} {
		stdout, stderr, code := benchCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("lapse bench %v: exit %d, stderr %q, stdout %q; want exit 2 and a message naming %q",
				tc.args, code, stderr, stdout, tc.want)
		}
	}
}

func TestBenchFlushRedisAndKillEveryOnRedisTimers(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("LAPSE_TEST_REDIS")
	if redisURL == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://… to run")
	}
	// The bench keeps its timers under a prefix of its own and deletes them
	// afterwards, so it shares database 0 with the other suites.
	res := benchJSON(t, "--store", sqliteTemp(t), "--timers", redisURL, "--orders", "300", "--rate", "300", "--timeout", "300ms",
		"--pay-ratio", "0.3", "--flush-redis-at", "500ms", "--kill-every", "400ms")
	checkSettled(t, res, 300)
	faults, _ := res["faults"].([]any)
	if len(faults) != 1 {
		t.Fatalf("faults = %v, want the one flush", res["faults"])
	}
	if f := faults[0].(map[string]any); f["name"] != "flush-redis" || f["error"] != nil || f["skipped"] != nil {
		t.Errorf("fault %v, want flush-redis done", f)
	}
	if got := res["restarts"].(float64); got < 1 {
		t.Errorf("restarts = %v, want at least 1", got)
	}
}
