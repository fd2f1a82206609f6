package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/store"
)

// TestReconcileInventory runs `lapse reconcile --inventory` against the
// reference inventory (in this process, over HTTP) and a lapse store on
// SQLite: clean, then with a release lapse never sent and one it never
// asked for, then with the inventory gone.
func TestReconcileInventory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "lapse.db")
	st := openTestStore(t, url)
	inv := inventorytest.SQLite(t)
	srv := reference.NewServer(inv, reference.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if _, err := inv.SetAvailable(ctx, "sku", 100); err != nil {
		t.Fatal(err)
	}
	client := inventory.NewHTTPClient(srv.URL(), inventory.WithTimeout(5*time.Second))
	defer client.Close()
	send := func(c inventory.Command) inventory.Answer {
		t.Helper()
		a, err := client.Send(ctx, c)
		if err != nil {
			t.Fatalf("send %s %s: %v", c.Action, c.ReservationID, err)
		}
		return a
	}
	// Orders as a caller makes them: reserve at the inventory, then create
	// at lapse with the reservation.
	for i := range 6 {
		id := fmt.Sprintf("c-%d", i)
		send(inventory.Command{TaskID: "reserve-" + id, Action: inventory.Reserve, ReservationID: "rsv-" + id, OrderID: id,
			Items: []inventory.Item{{SKU: "sku", Qty: 1}}})
		createRemote(t, st, id, "rsv-"+id)
	}
	for _, id := range []string{"c-0", "c-1"} {
		if _, err := st.CancelOrder(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	payOrder(t, st, "c-2")
	payOrder(t, st, "c-3")
	// Send the tasks' commands as a dispatcher does; skip marks those
	// settled DONE without a send (the answer that lies).
	dispatch := func(skip string) {
		t.Helper()
		claimed, err := st.ClaimTasks(ctx, store.ClaimTasksParams{Limit: 100, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []store.TaskOutcome
		for _, c := range claimed {
			o := store.TaskOutcome{ID: c.ID, Attempts: c.Attempts, Done: true}
			if c.OrderID != skip {
				a := send(inventory.CommandOf(c.StockTask))
				o.Result, o.Done, o.Dead, o.Error = string(a.Result), a.Done(), !a.Done(), a.Reason
			}
			outcomes = append(outcomes, o)
		}
		if err := st.SettleTasks(ctx, outcomes); err != nil {
			t.Fatal(err)
		}
	}
	dispatch("")

	out, stderr, code := tasksCmd(t, "reconcile", "--inventory", srv.URL(), "--store", url)
	if code != 0 || !strings.Contains(out, "against the ledger of "+srv.URL()+": OK\n") ||
		!strings.Contains(out, "6 lapse orders with a reservation (2 open), 10 ledger rows") {
		t.Fatalf("a clean run: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = tasksCmd(t, "reconcile", "--inventory", srv.URL(), "--store", url, "--check-items")
	if code != 0 || !strings.Contains(out, ": OK\n") || !strings.Contains(out, "items of 6 reservations compared") {
		t.Fatalf("a clean run with --check-items: exit %d\n%s%s", code, out, stderr)
	}

	// Broken: c-6 cancelled, its release settled DONE but never sent; c-7
	// paid, and released at the inventory behind lapse's back before its
	// confirm went out (which the inventory then refuses: DEAD).
	for _, id := range []string{"c-6", "c-7"} {
		send(inventory.Command{TaskID: "reserve-" + id, Action: inventory.Reserve, ReservationID: "rsv-" + id, OrderID: id,
			Items: []inventory.Item{{SKU: "sku", Qty: 1}}})
		createRemote(t, st, id, "rsv-"+id)
	}
	if _, err := st.CancelOrder(ctx, "c-6"); err != nil {
		t.Fatal(err)
	}
	payOrder(t, st, "c-7")
	if a := send(inventory.Command{TaskID: "rogue", Action: inventory.Release, ReservationID: "rsv-c-7"}); !a.Done() {
		t.Fatalf("the rogue release: %+v", a)
	}
	dispatch("c-6")

	out, stderr, code = tasksCmd(t, "reconcile", "--inventory", srv.URL(), "--store", url)
	if code != 1 {
		t.Fatalf("mismatches: exit %d, want 1\n%s%s", code, out, stderr)
	}
	for _, want := range []string{": NOT OK\n", "2 orders mismatched", "released_but_paid     1", "applied_elsewhere     1", "sent by task rogue", "never_released        1",
		"never_confirmed       1", "done_but_not_applied  1", "release DONE", "confirm DEAD"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
	out, _, code = tasksCmd(t, "reconcile", "--inventory", srv.URL(), "--store", url, "--json")
	var rep struct {
		Inventory  string         `json:"inventory"`
		Orders     int            `json:"orders"`
		Counts     map[string]int `json:"counts"`
		Mismatches []struct {
			Kind    string `json:"kind"`
			OrderID string `json:"order_id"`
		} `json:"mismatches"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if rep.Orders != 8 || rep.Inventory != srv.URL() || rep.Counts["never_released"] != 1 || rep.Counts["released_but_paid"] != 1 ||
		rep.Counts["applied_elsewhere"] != 1 || len(rep.Mismatches) != 5 {
		t.Errorf("--json: %+v", rep)
	}

	// Could not run: exit 2, the password never shown.
	srv.Stop()
	addr := strings.TrimPrefix(srv.URL(), "http://")
	_, stderr, code = tasksCmd(t, "reconcile", "--inventory", "http://inv:hunter2@"+addr, "--store", url)
	if code != 2 || !strings.Contains(stderr, "ledger") || strings.Contains(stderr, "hunter2") {
		t.Errorf("the inventory down: exit %d, want 2\n%s", code, stderr)
	}
}

func TestReconcileInventoryFlags(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "lapse.db")
	openTestStore(t, url)
	statement := filepath.Join(t.TempDir(), "statement.csv")
	if err := os.WriteFile(statement, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--inventory", "ftp://inv:hunter2@host"},
		{"--inventory", "amqp://inv:hunter2@host:5672"},
		{"--inventory", "http://"},
		{"--inventory", "http://127.0.0.1:1", "--gateway", "http://127.0.0.1:2"},
		{"--inventory", "http://127.0.0.1:1", "--statement", statement},
		{"--inventory", "http://127.0.0.1:1", "--examples", "0"},
		{"--inventory", "http://127.0.0.1:1", "--concurrency", "0"},
		{"--inventory", "http://127.0.0.1:1", "--from", "yesterday"},
		{"--inventory", "http://127.0.0.1:1", "--from", "2026-02-01", "--to", "2026-01-01"},
		{"--statement", statement, "--check-items"},
	} {
		_, stderr, code := tasksCmd(t, append([]string{"reconcile", "--store", url}, args...)...)
		if code != 2 || stderr == "" || strings.Contains(stderr, "hunter2") {
			t.Errorf("reconcile %q: exit %d, want 2 and a message without the password:\n%s", args, code, stderr)
		}
	}
	// A store that does not exist is not created.
	_, stderr, code := tasksCmd(t, "reconcile", "--inventory", "http://127.0.0.1:1", "--store", "sqlite://"+filepath.Join(t.TempDir(), "nope.db"))
	if code != 2 || !strings.Contains(stderr, "no such database file") {
		t.Errorf("a missing store: exit %d\n%s", code, stderr)
	}
	// LAPSE_INVENTORY is lapse serve's mode: reconcile does not read it.
	out, stderr, code := eventsCmdEnv(t, []string{"LAPSE_INVENTORY=http://127.0.0.1:1", "GORACE=atexit_sleep_ms=0"},
		"reconcile", "--store", url, "--statement", statement)
	if code != 0 || !strings.Contains(out, "against the statement: OK") {
		t.Errorf("LAPSE_INVENTORY set, --statement: exit %d\n%s%s", code, out, stderr)
	}
}
