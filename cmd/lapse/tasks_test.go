package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/sqlite"
)

// tasksCmd is eventsCmd without the race detector's one-second sleep at
// exit (GORACE atexit_sleep_ms), which would make up most of these tests'
// time.
func tasksCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return eventsCmdEnv(t, []string{"GORACE=atexit_sleep_ms=0"}, args...)
}

// openTestStore opens (and migrates) the lapse store url names, as a
// command's test prepares it.
func openTestStore(t *testing.T, url string) store.Store {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	if path, ok := strings.CutPrefix(url, "sqlite://"); ok {
		st, err = sqlite.Open(ctx, sqlite.Config{Path: path, Synchronous: "NORMAL"})
	} else {
		st, err = postgres.Open(ctx, postgres.Config{URL: url, MaxConns: 4})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// createRemote creates a PENDING order whose stock the reservation rsv
// holds at a remote inventory.
func createRemote(t *testing.T, st store.Store, id, rsv string, items ...order.Item) {
	t.Helper()
	if len(items) == 0 {
		items = []order.Item{{SKU: "sku", Qty: 1}}
	}
	_, err := st.CreateOrder(context.Background(), store.CreateOrderParams{
		ID: id, Items: items, AmountCents: 1000, Currency: "EUR", Timeout: time.Hour, ReservationID: rsv,
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

// payOrder pays order id in full.
func payOrder(t *testing.T, st store.Store, id string) {
	t.Helper()
	res, err := st.CompletePayment(context.Background(), store.PaymentParams{OrderID: id, PaymentID: "pay-" + id, AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomePaid {
		t.Fatalf("pay %s: %+v, %v", id, res.Outcome, err)
	}
}

// deadTaskError is long and has a newline: the table clips it to one line.
const deadTaskError = "REJECTED unknown_reservation: the inventory has no reservation of this name\nand refuses to confirm it"

// taskFixture is a store with a stock task in every state: t-00's release
// DONE, t-01's release DEAD, t-02's release PENDING after a failure, t-03's
// confirm DEAD; t-04 is open (no task).
func taskFixture(t *testing.T, url string) (st store.Store, ids map[string]string) {
	t.Helper()
	ctx := context.Background()
	st = openTestStore(t, url)
	for i := range 5 {
		createRemote(t, st, fmt.Sprintf("t-%02d", i), fmt.Sprintf("rsv-t-%02d", i))
	}
	for _, id := range []string{"t-00", "t-01", "t-02"} {
		if _, err := st.CancelOrder(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	payOrder(t, st, "t-03")
	claimed, err := st.ClaimTasks(ctx, store.ClaimTasksParams{Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claimed %d tasks, %v; want 4", len(claimed), err)
	}
	ids = map[string]string{}
	var outcomes []store.TaskOutcome
	for _, c := range claimed {
		ids[c.OrderID] = c.ID
		o := store.TaskOutcome{ID: c.ID, Attempts: c.Attempts}
		switch c.OrderID {
		case "t-00":
			o.Done, o.Result = true, "REPLENISH_SUCCESS"
		case "t-01", "t-03":
			o.Dead, o.Result, o.Error = true, "REJECTED", deadTaskError
		case "t-02":
			o.Error, o.RetryIn = "connection refused", time.Hour
		}
		outcomes = append(outcomes, o)
	}
	if err := st.SettleTasks(ctx, outcomes); err != nil {
		t.Fatal(err)
	}
	return st, ids
}

func TestTasksOnSQLite(t *testing.T) {
	t.Parallel()
	tasksCommands(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestTasksOnPostgres(t *testing.T) {
	t.Parallel()
	tasksCommands(t, postgresURL(t))
}

func tasksCommands(t *testing.T, url string) {
	_, ids := taskFixture(t, url)
	notDone := []string{ids["t-01"], ids["t-02"], ids["t-03"]}
	slices.Sort(notDone)

	// The table: a header and the tasks not DONE, in id order.
	out, stderr, code := tasksCmd(t, "tasks", "list", "--store", url)
	if code != 0 || stderr != "" {
		t.Fatalf("tasks list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "LAST ERROR") {
		t.Fatalf("tasks list: want a header and 3 rows:\n%s", out)
	}
	for i, id := range notDone {
		if !strings.HasPrefix(lines[i+1], id+" ") {
			t.Errorf("row %d: want task %s first:\n%s", i+1, id, out)
		}
	}
	for _, l := range lines[1:] {
		switch {
		case strings.Contains(l, " t-01 "):
			if !strings.Contains(l, "release  rsv-t-01") || !strings.Contains(l, "DEAD") || !strings.Contains(l, "REJECTED unknown_reservation") ||
				!strings.HasSuffix(l, "…") || strings.Contains(l, "refuses") {
				t.Errorf("t-01's row: want release rsv-t-01 DEAD, its error clipped:\n%s", l)
			}
		case strings.Contains(l, " t-02 "):
			if !strings.Contains(l, "PENDING") || !strings.Contains(l, "connection refused") {
				t.Errorf("t-02's row: want PENDING with its error:\n%s", l)
			}
		case strings.Contains(l, " t-03 "):
			if !strings.Contains(l, "confirm  rsv-t-03") || !strings.Contains(l, "DEAD") {
				t.Errorf("t-03's row: want confirm DEAD:\n%s", l)
			}
		default:
			t.Errorf("unexpected row:\n%s", l)
		}
	}

	// JSON lines in the API's shape.
	list := func(args ...string) ([]order.StockTask, string) {
		t.Helper()
		out, stderr, code := tasksCmd(t, append([]string{"tasks", "list", "--json", "--store", url}, args...)...)
		if code != 0 {
			t.Fatalf("tasks list %v: exit %d\n%s", args, code, stderr)
		}
		var ts []order.StockTask
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var task order.StockTask
			if err := json.Unmarshal(sc.Bytes(), &task); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			ts = append(ts, task)
		}
		return ts, stderr
	}
	orders := func(ts []order.StockTask) (s []string) {
		for _, x := range ts {
			s = append(s, x.OrderID+":"+string(x.Status))
		}
		return s
	}
	ts, _ := list()
	var got []string
	for _, x := range ts {
		got = append(got, x.ID)
	}
	if !slices.Equal(got, notDone) {
		t.Errorf("--json: tasks %v, want %v", got, notDone)
	}
	for _, x := range ts {
		if x.OrderID == "t-01" && (x.LastError != deadTaskError || x.DeadAt.IsZero() || x.Attempts != 1) {
			t.Errorf("t-01 in JSON: %+v", x)
		}
	}
	ts, _ = list("--dead")
	if got := orders(ts); !slices.Equal(sortedCopy(got), []string{"t-01:DEAD", "t-03:DEAD"}) {
		t.Errorf("--dead: %v", got)
	}
	ts, _ = list("--order", "t-00")
	if got := orders(ts); !slices.Equal(got, []string{"t-00:DONE"}) || ts[0].DoneAt.IsZero() {
		t.Errorf("--order t-00: %v", ts)
	}
	if ts, stderr := list("--order", "t-00", "--dead"); len(ts) != 0 || !strings.Contains(stderr, "no DEAD stock tasks for order t-00") {
		t.Errorf("--order t-00 --dead: %v, %q", ts, stderr)
	}
	if ts, stderr := list("--limit", "2"); len(ts) != 2 || !strings.Contains(stderr, "first 2; more follow") {
		t.Errorf("--limit 2: %d tasks, %q", len(ts), stderr)
	}
	if ts, stderr := list("--limit", "3"); len(ts) != 3 || stderr != "" {
		t.Errorf("--limit 3: %d tasks, %q", len(ts), stderr)
	}

	// retry: usage errors first, nothing changed.
	for _, args := range [][]string{
		{},
		{"--dead", ids["t-01"]},
		{"bad\x1bid"},
		{ids["t-01"], "--dead"},
	} {
		_, stderr, code := tasksCmd(t, append([]string{"tasks", "retry", "--store", url}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("tasks retry %q: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	out, stderr, code = tasksCmd(t, "tasks", "retry", "--store", url, ids["t-02"])
	if code != 0 || out != "retried 0 DEAD tasks\n" || !strings.Contains(stderr, "none of these ids names a DEAD task") {
		t.Errorf("retry of a PENDING task: exit %d, %q, %q", code, out, stderr)
	}
	out, _, code = tasksCmd(t, "tasks", "retry", "--store", url, ids["t-01"])
	if code != 0 || out != "retried 1 DEAD task\n" {
		t.Errorf("retry t-01: exit %d, %q", code, out)
	}
	if ts, _ := list("--order", "t-01"); len(ts) != 1 || ts[0].Status != order.TaskPending {
		t.Errorf("t-01 after its retry: %+v", ts)
	}
	out, _, code = tasksCmd(t, "tasks", "retry", "--store", url, "--dead")
	if code != 0 || out != "retried 1 DEAD task\n" {
		t.Errorf("retry --dead: exit %d, %q", code, out)
	}
	if ts, stderr := list("--dead"); len(ts) != 0 || !strings.Contains(stderr, "no DEAD stock tasks") {
		t.Errorf("--dead after retrying all: %v, %q", ts, stderr)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestTasksListPages runs the command in this process with tiny pages, so
// that it follows next_after across many of them.
func TestTasksListPages(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "lapse.db")
	st := openTestStore(t, url)
	ctx := context.Background()
	const n = 7
	for i := range n {
		id := fmt.Sprintf("p-%02d", i)
		createRemote(t, st, id, "rsv-"+id)
		if _, err := st.CancelOrder(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	listAll := func(pageSize int, args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := runTasksListPaged(ctx, append([]string{"--json", "--store", url}, args...), &out, &errOut, pageSize)
		if err != nil {
			t.Fatalf("list %v: %v\n%s", args, err, errOut.String())
		}
		return strings.Count(out.String(), "\n"), errOut.String()
	}
	for _, size := range []int{1, 2, 3, 7, 500} {
		if got, stderr := listAll(size); got != n || stderr != "" {
			t.Errorf("pages of %d: %d tasks, %q; want %d", size, got, stderr, n)
		}
		if got, stderr := listAll(size, "--limit", "4"); got != 4 || !strings.Contains(stderr, "more follow") {
			t.Errorf("pages of %d, --limit 4: %d tasks, %q", size, got, stderr)
		}
		if got, stderr := listAll(size, "--limit", "7"); got != 7 || stderr != "" {
			t.Errorf("pages of %d, --limit 7: %d tasks, %q", size, got, stderr)
		}
	}
}

func TestTasksUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"tasks"},
		{"tasks", "frob"},
		{"tasks", "list", "--limit", "-1"},
		{"tasks", "list", "--order", strings.Repeat("o", 65)},
		{"tasks", "list", "--order", "a\nb"},
		{"tasks", "list", "extra"},
	} {
		_, stderr, code := tasksCmd(t, args...)
		if code != 2 || stderr == "" {
			t.Errorf("lapse %q: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	// A store file that does not exist is not created.
	_, stderr, code := tasksCmd(t, "tasks", "list", "--store", "sqlite://"+filepath.Join(t.TempDir(), "nope.db"))
	if code != 1 || !strings.Contains(stderr, "no such database file") {
		t.Errorf("a missing store: exit %d, %q", code, stderr)
	}
}
