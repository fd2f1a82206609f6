package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
)

// refusingOrderService is an order service that refuses every command with
// a 400 — lapse parks it DEAD at once — except for the orders it was told
// to cancel, which it answers cancelled.
type refusingOrderService struct {
	mu     sync.Mutex
	cancel map[string]bool
}

func (s *refusingOrderService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var c ordersvc.Command
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	ok := s.cancel[c.OrderID]
	s.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":{"code":"unknown_schema"}}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ordersvc.Answer{Result: ordersvc.Cancelled, CommandID: r.Header.Get("webhook-id")})
}

func (s *refusingOrderService) accept(orderID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel[orderID] = true
}

// TestCommandsOnPostgres runs lapse serve in order-service mode on
// PostgreSQL against an order service that refuses every command (a 4xx:
// DEAD at once), then lapse commands list, retry and purge on its store:
// a retried command goes out again and its answer settles the order; a
// purged one is gone and its order stays CANCELLING.
func TestCommandsOnPostgres(t *testing.T) {
	t.Parallel()
	url := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", url); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	svc := &refusingOrderService{cancel: map[string]bool{}}
	receiver := httptest.NewServer(svc)
	t.Cleanup(receiver.Close)
	srv := startServe(t, []string{"LAPSE_ORDER_SERVICE_SECRET=" + e2eOrderServiceSecret},
		"--store", url, "--grace", "0", "--order-service", receiver.URL+"/lapse")
	api := srv.api()
	ctx := context.Background()
	orders := []string{"c-0", "c-1", "c-2"}
	for _, id := range orders {
		if _, err := api.CreateOrder(ctx, client.CreateOrder{ID: id, AmountCents: 1000, Currency: "EUR", Timeout: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	deadIDs := func() map[string]string {
		t.Helper()
		page, err := api.ListCommands(ctx, client.ListCommands{Dead: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		for _, c := range page.Commands {
			ids[c.OrderID] = c.ID
		}
		return ids
	}
	ids := waitFor(t, 30*time.Second, "3 DEAD commands", func() (map[string]string, bool) {
		ids := deadIDs()
		return ids, len(ids) == 3
	})

	// The table: a header and the three DEAD commands, in id order.
	out, stderr, code := tasksCmd(t, "commands", "list", "--store", url)
	if code != 0 || stderr != "" {
		t.Fatalf("commands list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{ids["c-0"], ids["c-1"], ids["c-2"]}
	slices.Sort(want)
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "CANCEL AFTER") {
		t.Fatalf("commands list: want a header and 3 rows:\n%s", out)
	}
	for i, id := range want {
		if l := lines[i+1]; !strings.HasPrefix(l, id+" ") || !strings.Contains(l, " DEAD ") || !strings.Contains(l, "refused for good") {
			t.Errorf("row %d: want command %s DEAD, refused:\n%s", i+1, id, out)
		}
	}

	// JSON lines in the API's shape.
	list := func(args ...string) ([]order.Command, string) {
		t.Helper()
		out, stderr, code := tasksCmd(t, append([]string{"commands", "list", "--json", "--store", url}, args...)...)
		if code != 0 {
			t.Fatalf("commands list %v: exit %d\n%s", args, code, stderr)
		}
		var cs []order.Command
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var c order.Command
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			cs = append(cs, c)
		}
		return cs, stderr
	}
	cs, _ := list("--dead")
	if len(cs) != 3 || cs[0].DeadAt.IsZero() || cs[0].CancelAfter.IsZero() || !strings.Contains(cs[0].LastError, "400") {
		t.Fatalf("--dead --json: %+v", cs)
	}
	if cs, _ := list("--order", "c-1"); len(cs) != 1 || cs[0].ID != ids["c-1"] {
		t.Errorf("--order c-1: %+v", cs)
	}
	if cs, stderr := list("--limit", "2"); len(cs) != 2 || !strings.Contains(stderr, "first 2; more follow") {
		t.Errorf("--limit 2: %d commands, %q", len(cs), stderr)
	}

	// Usage errors first, nothing changed.
	for _, verb := range []string{"retry", "purge"} {
		for _, args := range [][]string{{}, {"--dead", ids["c-0"]}, {"bad\x1bid"}} {
			_, stderr, code := tasksCmd(t, append([]string{"commands", verb, "--store", url}, args...)...)
			if code != 2 || stderr == "" {
				t.Errorf("commands %s %q: exit %d, stderr %q; want 2 and a message", verb, args, code, stderr)
			}
		}
	}
	if got := deadIDs(); len(got) != 3 {
		t.Fatalf("after the usage errors: %d DEAD commands, want 3", len(got))
	}

	// retry: the order service now cancels c-0; its command goes again,
	// with its id, and the answer settles the order.
	svc.accept("c-0")
	out, stderr, code = tasksCmd(t, "commands", "retry", "--store", url, ids["c-0"])
	if code != 0 || out != "retried 1 DEAD command\n" || !strings.Contains(stderr, "due now") {
		t.Fatalf("retry c-0: exit %d, %q, %q", code, out, stderr)
	}
	srv.waitStatus("c-0", "CANCELLED", 30*time.Second)
	if cs, _ := list("--order", "c-0"); len(cs) != 1 || cs[0].ID != ids["c-0"] || cs[0].Status != order.TaskDone || cs[0].Result != "cancelled" {
		t.Errorf("c-0's command after the retry: %+v", cs)
	}
	out, stderr, code = tasksCmd(t, "commands", "retry", "--store", url, ids["c-0"])
	if code != 0 || out != "retried 0 DEAD commands\n" || !strings.Contains(stderr, "none of these ids names a DEAD command") {
		t.Errorf("retry of a DONE command: exit %d, %q, %q", code, out, stderr)
	}

	// purge: c-1's command is deleted; its order stays CANCELLING.
	out, stderr, code = tasksCmd(t, "commands", "purge", "--store", url, ids["c-1"])
	if code != 0 || out != "purged 1 DEAD command\n" || !strings.Contains(stderr, "stay CANCELLING") {
		t.Fatalf("purge c-1: exit %d, %q, %q", code, out, stderr)
	}
	if cs, stderr := list("--order", "c-1"); len(cs) != 0 || !strings.Contains(stderr, "no cancel commands for order c-1") {
		t.Errorf("c-1 after its purge: %+v, %q", cs, stderr)
	}
	out, _, code = tasksCmd(t, "commands", "purge", "--store", url, "--dead")
	if code != 0 || out != "purged 1 DEAD command\n" {
		t.Errorf("purge --dead: exit %d, %q", code, out)
	}
	if cs, stderr := list("--dead"); len(cs) != 0 || !strings.Contains(stderr, "no DEAD cancel commands") {
		t.Errorf("--dead after purging all: %v, %q", cs, stderr)
	}
	for _, id := range []string{"c-1", "c-2"} {
		if o := must(api.GetOrder(ctx, id))(t); o.Status != order.Cancelling {
			t.Errorf("%s after its command was purged: %s, want CANCELLING", id, o.Status)
		}
	}
}

func TestCommandsUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"commands"},
		{"commands", "frob"},
		{"commands", "list", "--limit", "-1"},
		{"commands", "list", "--order", strings.Repeat("o", 65)},
		{"commands", "list", "extra"},
		{"commands", "purge", "--dead", "cmd_x"},
	} {
		_, stderr, code := tasksCmd(t, args...)
		if code != 2 || stderr == "" {
			t.Errorf("lapse %q: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}

// waitFor calls f until it reports done, and returns its value; it fails t
// after within, naming what it waited for.
func waitFor[V any](t *testing.T, within time.Duration, what string, f func() (V, bool)) V {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, done := f()
		if done {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
