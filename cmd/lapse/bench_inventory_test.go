package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// lapse bench --inventory against lapse inventory, over HTTP (the inventory
// on SQLite, lapse on SQLite) and over AMQP (the stock set through
// --inventory-api): every order reserved there and created with its
// reservation, every task DONE, its lag reported per action, audit ok, and
// the inventory's counters say each unit was released or sold once.
func TestBenchInventory(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"http", "amqp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			// The inventory's database lives in memory: this test is about
			// the run's reserves and tasks, and a file's fsyncs, on a disk
			// shared with the rest of CI, once stalled a reserve past
			// the run's 5 s inventory timeout.
			inv := []string{"--store", "sqlite://:memory:"}
			target := ""
			if transport == "amqp" {
				broker := os.Getenv("LAPSE_TEST_AMQP")
				if broker == "" {
					t.Skip("set LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ to run")
				}
				prefix := randomName("lapsetest.benchstock.")
				t.Cleanup(func() { deleteStockTopology(t, broker, prefix) })
				target = withQuery(t, broker, "prefix", prefix)
				inv = append(inv, "--amqp", target)
			}
			p := startInventory(t, inv...)
			args := []string{"--store", sqliteTemp(t), "--orders", "200", "--rate", "200", "--timeout", "1s",
				"--pay-ratio", "0.3", "--skus", "3"}
			if transport == "http" {
				args = append(args, "--inventory", p.url)
			} else {
				// The AMQP consumer may still be starting: the reserves
				// wait for it (unroutable commands fail them).
				waitForLog(t, p, "amqp")
				// Reserves over the inventory's HTTP API, tasks over AMQP.
				args = append(args, "--inventory", target, "--inventory-api", p.url, "--reserve-via", "api")
			}
			res := benchJSON(t, args...)
			checkSettled(t, res, 200)
			tasks, _ := res["tasks"].([]any)
			got := map[string]float64{}
			for _, raw := range tasks {
				tr := raw.(map[string]any)
				lag := tr["lag_ms"].(map[string]any)
				if lag["p99"].(float64) <= 0 || lag["max"].(float64) < lag["p99"].(float64) {
					t.Errorf("task lag %v", tr)
				}
				got[tr["action"].(string)] = tr["tasks"].(float64)
			}
			// A payment too late to start (a slow machine) is a cancel:
			// one release per cancelled order, one confirm per paid one.
			if got["release"] != res["cancelled"] || got["confirm"] != res["paid"] || got["release"]+got["confirm"] != 200 {
				t.Fatalf("tasks %v: want a release per cancelled order (%v) and a confirm per paid one (%v)", res["tasks"], res["cancelled"], res["paid"])
			}
			if _, ok := res["reserve_ms"]; !ok {
				t.Errorf("no reserve_ms: %v", res)
			}
			for k := range 3 {
				status, body := p.call("GET", "/skus/bench-sku-00"+string(rune('0'+k)), "")
				if status != 200 || !strings.Contains(body, `"reserved":0`) {
					t.Errorf("SKU %d: %d %s: want nothing left reserved", k, status, body)
				}
			}
		})
	}
}

// waitForLog waits until the inventory's log mentions s.
func waitForLog(t *testing.T, p *inventoryProc, s string) {
	t.Helper()
	r := &invRig{t: t}
	r.waitFor("the inventory's log shows "+s, 20*time.Second, func() bool { return strings.Contains(p.logs.String(), s) })
}

func TestBenchInventoryRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--inventory-api", "http://127.0.0.1:1"}, "go with --inventory"},
		{[]string{"--reserve-via", "api"}, "go with --inventory"},
		{[]string{"--inventory", "amqp://127.0.0.1:1/", "--reserve-via", "api"}, "needs --inventory-api"},
		{[]string{"--inventory", "http://127.0.0.1:1", "--reserve-via", "carrier"}, "--reserve-via"},
		{[]string{"--inventory", "ftp://x"}, "--inventory"},
		{[]string{"--inventory", "http://127.0.0.1:1", "--inventory-api", "nope"}, "--inventory-api"},
		{[]string{"--target", "http://127.0.0.1:1", "--inventory", "http://127.0.0.1:2"}, "--inventory is the in-process service's"},
	} {
		stdout, stderr, code := benchCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("lapse bench %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
