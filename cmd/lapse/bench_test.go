package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/testdb"
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
	// The SQLite store counts its statements: a create alone is 8.
	if v, ok := res["db_statements_per_order"].(float64); !ok || v < 8 || v > 100 {
		t.Errorf("db_statements_per_order = %v, want a count from the store", res["db_statements_per_order"])
	}
}

// A soak with retention on: the service deletes finished orders while
// the run goes on, so the cancels are counted and their lateness read from
// the service's metrics; every unpaid order is still accounted for, the
// audit of what is kept passes, and the deleted orders are counted. On
// PostgreSQL the tables are sampled.
func TestBenchWithRetentionCountsFromTheMetrics(t *testing.T) {
	t.Parallel()
	stores := map[string]string{"sqlite": sqliteTemp(t)}
	if pg := os.Getenv("LAPSE_TEST_POSTGRES"); pg != "" {
		stores["postgres"] = testdb.PostgresSchema(t)
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			res := benchJSON(t, "--store", st, "--orders", "600", "--rate", "300", "--timeout", "300ms", "--pay-ratio", "0.3",
				"--order-retention", "1s", "--retention-interval", "100ms")
			checkSettled(t, res, 600)
			if res["lateness_from"] != "metrics" {
				t.Errorf("lateness_from = %v, want metrics (retention deleted the rows)", res["lateness_from"])
			}
			if got, _ := res["retention_deleted"].(float64); got < 1 {
				t.Errorf("retention_deleted = %v, want the orders retention deleted during the run", res["retention_deleted"])
			}
			if tables, _ := res["tables"].([]any); name == "postgres" && len(tables) < 2 {
				t.Errorf("tables = %v, want a sample at the start and one at the end", res["tables"])
			}
		})
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
		{[]string{"--rate", "fast"}, "invalid argument \"fast\" for \"--rate\""},
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
		{[]string{"--chaos-latency", "5ms"}, "embedded SQLite"},
		{[]string{"--restart-db-at", "1s"}, "use --kill-every"},
		{[]string{"--restart-db-at", "1s", "--restart-db-cmd", "true"}, "use --kill-every"},
		{[]string{"--target", "http://127.0.0.1:1", "--chaos-latency", "5ms"}, "--target"},
		{[]string{"--target", "http://127.0.0.1:1", "--restart-db-at", "1s"}, "--restart-db-cmd"},
		{[]string{"--store", "postgres://127.0.0.1:1/x", "--timers", "redis-cluster://127.0.0.1:7000", "--chaos-latency", "5ms"}, "Cluster"},
		{[]string{"--store", "postgres://127.0.0.1:1/x", "--timers", "redis-sentinel://127.0.0.1:26379/0?master=m", "--chaos-latency", "5ms"}, "Sentinel"},
		{[]string{"--store", "postgres://127.0.0.1:1/x", "--chaos-latency", "1500us"}, "whole milliseconds"},
		{[]string{"--store", "postgres://127.0.0.1:1/x", "--chaos-jitter", "1ms"}, "--chaos-latency"},
		{[]string{"--store", "postgres://127.0.0.1:1/x", "--restart-db-cmd", "true"}, "--restart-db-at"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
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

// The database goes away for a second in the middle of a run on PostgreSQL
// and Redis, every round trip 2 ms slower: the run's backends are
// terminated and its connections refused meanwhile; creates and payments
// are retried, and still every order is paid or cancelled, none early, the
// audit clean.
func TestBenchRestartDBWithChaosLatencyOnPostgresAndRedis(t *testing.T) {
	t.Parallel()
	storeURL := postgresURL(t)
	redisURL := os.Getenv("LAPSE_TEST_REDIS")
	if redisURL == "" {
		t.Skip("set LAPSE_TEST_REDIS=redis://… to run")
	}
	res := benchJSON(t, "--store", storeURL, "--timers", redisURL, "--orders", "300", "--rate", "150", "--timeout", "300ms",
		"--pay-ratio", "0.3", "--chaos-latency", "2ms", "--restart-db-at", "1s")
	checkSettled(t, res, 300)
	faults, _ := res["faults"].([]any)
	if len(faults) != 1 {
		t.Fatalf("faults = %v, want the one restart", res["faults"])
	}
	f := faults[0].(map[string]any)
	if f["name"] != "restart-db" || f["error"] != nil || f["skipped"] != nil {
		t.Errorf("fault %v, want restart-db done", f)
	}
	if detail, _ := f["detail"].(string); !regexp.MustCompile(`terminated the run's [1-9][0-9]* backends, cut the run's connections and refused new ones for 1s`).MatchString(detail) {
		t.Errorf("fault detail %q, want the run's backends terminated and its connections refused for 1s", detail)
	}
	if got, _ := res["retries"].(float64); got < 1 {
		t.Errorf("retries = %v: nothing failed while the database was away for 1s of a 2s run", res["retries"])
	}
	chaos, _ := res["chaos"].(map[string]any)
	if chaos["latency_ms"] != 2.0 || fmt.Sprint(chaos["proxied"]) != "[redis store]" {
		t.Errorf("chaos = %v, want 2ms of latency on the proxies for redis and store", res["chaos"])
	}
}

// On MySQL the run's connections, and only them, are cut at the run's own
// proxy in front of the server.
func TestBenchRestartDBOnMySQL(t *testing.T) {
	t.Parallel()
	res := benchJSON(t, "--store", mysqlURL(t), "--orders", "300", "--rate", "150", "--timeout", "300ms",
		"--pay-ratio", "0.3", "--restart-db-at", "1s", "--restart-db-down", "500ms")
	checkSettled(t, res, 300)
	faults, _ := res["faults"].([]any)
	if len(faults) != 1 {
		t.Fatalf("faults = %v, want the one restart", res["faults"])
	}
	if f := faults[0].(map[string]any); f["name"] != "restart-db" || f["error"] != nil || f["skipped"] != nil ||
		f["detail"] != "cut the run's connections and refused new ones for 500ms" {
		t.Errorf("fault %v, want restart-db done through the proxy", f)
	}
	if got, _ := res["retries"].(float64); got < 1 {
		t.Errorf("retries = %v: nothing failed while the database was away", res["retries"])
	}
}

// --restart-db-cmd runs the command, whatever the store, and waits for it.
func TestBenchRestartDBRunsTheCommand(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "restarted")
	res := benchJSON(t, "--store", postgresURL(t), "--orders", "100", "--rate", "100", "--timeout", "300ms",
		"--restart-db-at", "200ms", "--restart-db-cmd", "sleep 0.2 && touch "+marker)
	checkSettled(t, res, 100)
	faults, _ := res["faults"].([]any)
	if len(faults) != 1 {
		t.Fatalf("faults = %v, want the one restart", res["faults"])
	}
	if f := faults[0].(map[string]any); f["name"] != "restart-db" || f["error"] != nil || !strings.HasPrefix(fmt.Sprint(f["detail"]), "ran ") {
		t.Errorf("fault %v, want the command run", f)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not run: %v", err)
	}
	if res["chaos"] != nil {
		t.Errorf("chaos = %v: a run with a restart command needs no proxy", res["chaos"])
	}
	_, stderr, code := benchCmd(t, "--store", postgresURL(t), "--orders", "50", "--rate", "100", "--timeout", "300ms",
		"--restart-db-at", "100ms", "--restart-db-cmd", "echo cannot restart; exit 3")
	if code != 1 || !strings.Contains(stderr, "cannot restart") || !strings.Contains(stderr, "exit status 3") {
		t.Errorf("a failing command: exit %d, stderr %q; want exit 1 and the command's output", code, stderr)
	}
}
