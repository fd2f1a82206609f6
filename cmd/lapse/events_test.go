package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// eventsCmd runs lapse with args and returns its stdout and stderr apart
// (data goes to one, feedback to the other) and its exit status. A command
// still running after a minute is killed and fails the test.
func eventsCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return eventsCmdEnv(t, nil, args...)
}

// eventsCmdEnv is eventsCmd with env added to the environment.
func eventsCmdEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lapse %s: still running after a minute (killed)\n%s", strings.Join(args, " "), errOut.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// deadLetters is a store with dead events, shared by the events tests.
type deadLetters struct {
	url string
	st  store.Store
	clk *clock.Fake
	// ids are the dead events' ids, in seq order. Each is dl-NN's
	// order.created; dl-00 has an order.cancelled behind its dead one.
	ids []string
	// hookDied and mqDied are when each sink refused them all.
	hookDied, mqDied time.Time
}

const (
	deadOrders = 5
	// hookError is long and has a newline: the table clips it to one line.
	hookError = "422 Unprocessable Entity: the customer this order names does not exist\nat the CRM; refusing it for good"
)

// hookDiedAgo and mqDiedAgo are how long ago each sink refused every event
// for good, measured from when the test starts.
const (
	hookDiedAgo = 100 * time.Hour
	mqDiedAgo   = time.Hour
)

// newDeadLetters migrates the store at url, registers sinks hook and mq,
// and has both refuse every order.created for good: hook hookDiedAgo, mq
// mqDiedAgo (the store runs on a fake clock for that). The clock is then set
// an hour ahead of the wall clock, so that what a command makes due on its
// own clock is due for the test's claims.
func newDeadLetters(t *testing.T, url string) *deadLetters {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	clk := clock.NewFake(now.Add(-hookDiedAgo))
	var st store.Store
	var err error
	if path, ok := strings.CutPrefix(url, "sqlite://"); ok {
		st, err = sqlite.Open(ctx, sqlite.Config{Path: path, Clock: clk, Synchronous: "NORMAL"})
	} else {
		st, err = postgres.Open(ctx, postgres.Config{URL: url, Clock: clk, MaxConns: 2})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterSinks(ctx, []string{"hook", "mq"}); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, st, 100, "sku")
	for i := range deadOrders {
		storetest.Create(t, st, fmt.Sprintf("dl-%02d", i), "sku")
	}
	if _, err := st.CancelOrder(ctx, "dl-00"); err != nil {
		t.Fatal(err)
	}
	d := &deadLetters{url: url, st: st, clk: clk}
	kill := func(sink, why string) {
		ds := d.claim(t, sink)
		if len(ds) != deadOrders {
			t.Fatalf("%s claimed %d events, want each order's first", sink, len(ds))
		}
		outcomes := make([]store.Outcome, len(ds))
		for i, x := range ds {
			outcomes[i] = store.Outcome{Seq: x.Seq, Attempts: x.Attempts, Error: why, Refused: true, Dead: true}
		}
		if err := st.SettleEvents(ctx, sink, outcomes); err != nil {
			t.Fatal(err)
		}
		if d.ids == nil {
			for _, x := range ds {
				d.ids = append(d.ids, x.ID)
			}
		}
	}
	d.hookDied = clk.Now()
	kill("hook", hookError)
	clk.Set(now.Add(-mqDiedAgo))
	d.mqDied = clk.Now()
	kill("mq", "no route to the queue")
	clk.Set(now.Add(time.Hour))
	return d
}

func (d *deadLetters) claim(t *testing.T, sink string) []store.Delivery {
	t.Helper()
	ds, err := d.st.ClaimEvents(context.Background(), store.ClaimEventsParams{Sink: sink, Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim for %s: %v", sink, err)
	}
	return ds
}

func (d *deadLetters) claimedIDs(t *testing.T, sink string) []string {
	t.Helper()
	var out []string
	for _, x := range d.claim(t, sink) {
		out = append(out, x.ID)
	}
	return out
}

// listJSON runs `lapse events list --json` with args and decodes its lines.
func (d *deadLetters) listJSON(t *testing.T, args ...string) (events []map[string]any, stderr string) {
	t.Helper()
	out, stderr, code := eventsCmd(t, append([]string{"events", "list", "--store", d.url, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("events list --json %v: exit %d\n%s", args, code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line of --json is not one JSON object: %v: %q", err, line)
		}
		events = append(events, m)
	}
	return events, stderr
}

func TestEventsListOnSQLite(t *testing.T) {
	t.Parallel()
	eventsList(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestEventsListOnPostgres(t *testing.T) {
	t.Parallel()
	eventsList(t, postgresURL(t))
}

func eventsList(t *testing.T, url string) {
	d := newDeadLetters(t, url)

	// The table: a header, then a line per event and sink, oldest first;
	// dl-00's order.cancelled waits (pending) behind its dead order.created.
	out, stderr, code := eventsCmd(t, "events", "list", "--store", url)
	if code != 0 || stderr != "" {
		t.Fatalf("events list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1+2*(deadOrders+1) {
		t.Fatalf("events list printed %d lines, want a header and %d rows:\n%s", len(lines), 2*(deadOrders+1), out)
	}
	for _, h := range []string{"SEQ", "EVENT ID", "TYPE", "ORDER ID", "SINK", "STATE", "ATTEMPTS", "REFUSALS", "NEXT ATTEMPT / DIED", "LAST ERROR"} {
		if !strings.Contains(lines[0], h) {
			t.Errorf("the header lacks %s: %q", h, lines[0])
		}
	}
	first := strings.Fields(lines[1])
	hookDied := order.FormatTime(d.hookDied)
	if want := []string{d.ids[0], "order.created", "dl-00", "hook", "dead", "1", "1", hookDied}; len(first) < 9 || !slices.Equal(first[1:9], want) {
		t.Errorf("first row %q, want seq then %v", lines[1], want)
	}
	if !strings.Contains(lines[1], "422 Unprocessable Entity: the customer") || !strings.HasSuffix(lines[1], "…") || strings.Contains(out, "refusing it for good") {
		t.Errorf("the last error is not clipped to one cell: %q", lines[1])
	}
	var pending []string
	for _, l := range lines[1:] {
		if f := strings.Fields(l); f[5] == "pending" {
			pending = append(pending, f[3]+" "+f[2]+" "+f[4])
		}
	}
	if want := []string{"dl-00 order.cancelled hook", "dl-00 order.cancelled mq"}; !slices.Equal(pending, want) {
		t.Errorf("pending rows %v, want %v", pending, want)
	}

	// --dead, --sink, --json.
	dead, _ := d.listJSON(t, "--dead")
	if len(dead) != 2*deadOrders {
		t.Fatalf("--dead listed %d, want %d", len(dead), 2*deadOrders)
	}
	for _, ev := range dead {
		if ev["dead"] != true || ev["type"] != "order.created" || ev["dead_at"] == nil {
			t.Errorf("--dead listed %v", ev)
		}
	}
	mq, _ := d.listJSON(t, "--dead", "--sink", "mq")
	if len(mq) != deadOrders {
		t.Fatalf("--dead --sink mq listed %d, want %d", len(mq), deadOrders)
	}
	for i, ev := range mq {
		want := map[string]any{"id": d.ids[i], "sink": "mq", "dead": true, "attempts": 1.0, "refusals": 1.0,
			"last_error": "no route to the queue", "dead_at": order.FormatTime(d.mqDied), "type": "order.created", "order_id": fmt.Sprintf("dl-%02d", i)}
		for k, v := range want {
			if ev[k] != v {
				t.Errorf("mq event %d: %s = %v, want %v", i, k, ev[k], v)
			}
		}
		for _, k := range []string{"seq", "next_attempt_at", "created_at", "payload"} {
			if ev[k] == nil {
				t.Errorf("mq event %d lacks %s: %v", i, k, ev)
			}
		}
		if p, ok := ev["payload"].(map[string]any); !ok || p["id"] != ev["order_id"] {
			t.Errorf("mq event %d: payload %v, want the order's JSON", i, ev["payload"])
		}
	}

	// Paging: a page of 3 ends after a whole event (2 deliveries), and
	// --after walks on from the cursor stderr names.
	var walked []string
	after := "0"
	for pages := 0; ; pages++ {
		if pages > 2*deadOrders {
			t.Fatal("paging does not end")
		}
		page, stderr := d.listJSON(t, "--dead", "--limit", "3", "--after", after)
		if len(page) != 2 {
			t.Fatalf("--limit 3 --after %s: %d events, want one event's 2", after, len(page))
		}
		for _, ev := range page {
			walked = append(walked, ev["id"].(string)+" "+ev["sink"].(string))
		}
		more, ok := strings.CutPrefix(stderr, "more after seq ")
		if !ok {
			break
		}
		after, _, _ = strings.Cut(more, ":")
		if n, err := strconv.ParseInt(after, 10, 64); err != nil || float64(n) != page[len(page)-1]["seq"] {
			t.Fatalf("the cursor %q is not the page's last seq %v", after, page[len(page)-1]["seq"])
		}
	}
	var want []string
	for _, ev := range dead {
		want = append(want, ev["id"].(string)+" "+ev["sink"].(string))
	}
	if !slices.Equal(walked, want) {
		t.Errorf("paging walked %v\nwant %v", walked, want)
	}

	// The store comes from LAPSE_STORE like every flag's variable, but
	// --sink never from LAPSE_SINK: that is lapse serve's list of sinks, and
	// read as a filter it would hide every dead letter.
	out, stderr, code = eventsCmdEnv(t, []string{"LAPSE_STORE=" + url, "LAPSE_SINK=https://hooks.example.com/lapse log", "LAPSE_DEAD=true"}, "events", "list", "--json")
	if n := strings.Count(out, "\n"); code != 0 || n != 2*deadOrders {
		t.Errorf("events list with LAPSE_STORE, LAPSE_SINK and LAPSE_DEAD: exit %d, %d events (want every sink's %d dead)\n%s", code, n, 2*deadOrders, stderr)
	}

	// Nothing to list: nothing on stdout, a word on stderr.
	out, stderr, code = eventsCmd(t, "events", "list", "--store", url, "--dead", "--sink", "nope")
	if code != 0 || out != "" || !strings.Contains(stderr, "no dead events for sink nope") {
		t.Errorf("an empty list: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestEventsRetryOnSQLite(t *testing.T) {
	t.Parallel()
	eventsRetry(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestEventsRetryOnPostgres(t *testing.T) {
	t.Parallel()
	eventsRetry(t, postgresURL(t))
}

func eventsRetry(t *testing.T, url string) {
	d := newDeadLetters(t, url)
	if got := d.claimedIDs(t, "hook"); len(got) != 0 {
		t.Fatalf("hook claimed %v while everything is dead", got)
	}

	// By id, narrowed to a sink: due again there only.
	out, stderr, code := eventsCmd(t, "events", "retry", "--store", url, "--sink", "hook", d.ids[0], d.ids[1])
	if code != 0 || out != "retried 2 dead deliveries\n" {
		t.Fatalf("retry by id: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := d.claimedIDs(t, "hook"); !slices.Equal(got, d.ids[:2]) {
		t.Fatalf("hook claimed %v after the retry, want %v", got, d.ids[:2])
	}
	if got := d.claimedIDs(t, "mq"); len(got) != 0 {
		t.Fatalf("mq claimed %v: the retry named hook only", got)
	}

	// An id that names no dead delivery retries nothing, and says so.
	out, stderr, code = eventsCmd(t, "events", "retry", "--store", url, d.ids[0]+"x")
	if code != 0 || out != "retried 0 dead deliveries\n" || !strings.Contains(stderr, "none of these ids names a dead delivery") {
		t.Errorf("retry of an unknown id: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	// Every dead one of a sink.
	out, stderr, code = eventsCmd(t, "events", "retry", "--store", url, "--dead", "--sink", "mq")
	if code != 0 || out != "retried 5 dead deliveries\n" {
		t.Fatalf("retry --dead --sink mq: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := d.claimedIDs(t, "mq"); !slices.Equal(got, d.ids) {
		t.Fatalf("mq claimed %v after retry --dead, want %v", got, d.ids)
	}
	if left, _ := d.listJSON(t, "--dead"); len(left) != deadOrders-2 {
		t.Fatalf("%d dead left, want hook's %d not retried", len(left), deadOrders-2)
	}

	// Usage: neither, both (a flag may follow the ids, as anywhere).
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "name the events to retry"},
		{[]string{"--dead", d.ids[2]}, "give event ids or --dead, not both"},
		{[]string{d.ids[2], "--dead"}, "give event ids or --dead, not both"},
	} {
		out, stderr, code := eventsCmd(t, append([]string{"events", "retry", "--store", url}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("retry %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
	if left, _ := d.listJSON(t, "--dead"); len(left) != deadOrders-2 {
		t.Fatalf("a refused retry changed something: %d dead, want %d", len(left), deadOrders-2)
	}
}

func TestEventsPurgeOnSQLite(t *testing.T) {
	t.Parallel()
	eventsPurge(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestEventsPurgeOnPostgres(t *testing.T) {
	t.Parallel()
	eventsPurge(t, postgresURL(t))
}

func eventsPurge(t *testing.T, url string) {
	d := newDeadLetters(t, url)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--before", "72h"}, "--dead is required"},
		{[]string{"--dead"}, "--before is required"},
		{[]string{"--dead", "--before", "3d"}, `--before "3d": want an RFC 3339 time`},
		{[]string{"--dead", "--before", "0s"}, "want a duration above 0"},
		{[]string{"--dead", "--before", "-72h"}, "want a duration above 0"},
		{[]string{"--dead", "--before", "72h", "hook"}, `unexpected argument "hook"`},
	} {
		out, stderr, code := eventsCmd(t, append([]string{"events", "purge", "--store", url}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("purge %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
	if left, _ := d.listJSON(t, "--dead"); len(left) != 2*deadOrders {
		t.Fatalf("a refused purge deleted something: %d dead left", len(left))
	}

	// A duration: dead for longer than 72 h is hook's, not mq's (1 h).
	out, stderr, code := eventsCmd(t, "events", "purge", "--store", url, "--dead", "--before", "72h")
	if code != 0 || !strings.HasPrefix(out, "purged 5 dead deliveries that died before ") {
		t.Fatalf("purge --before 72h: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	left, _ := d.listJSON(t, "--dead")
	if len(left) != deadOrders {
		t.Fatalf("%d dead after purging hook's, want mq's %d", len(left), deadOrders)
	}
	for _, ev := range left {
		if ev["sink"] != "mq" {
			t.Errorf("purge --before 72h left %s's %v", ev["sink"], ev["id"])
		}
	}
	// dl-00's order.cancelled no longer waits behind its purged event.
	if got, _ := d.listJSON(t, "--sink", "hook"); len(got) != 1 || got[0]["type"] != "order.cancelled" {
		t.Fatalf("hook's undelivered after the purge: %v, want dl-00's order.cancelled", got)
	}
	if ds := d.claim(t, "hook"); len(ds) != 1 || ds[0].OrderID != "dl-00" || ds[0].Type != "order.cancelled" {
		t.Fatalf("hook claimed %+v after the purge, want dl-00's order.cancelled", ds)
	}

	// A time: mq's died an hour ago, so not before two hours ago; all of
	// them before a minute from now.
	twoHoursAgo := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	out, _, code = eventsCmd(t, "events", "purge", "--store", url, "--dead", "--sink", "mq", "--before", twoHoursAgo)
	if code != 0 || out != "purged 0 dead deliveries for sink mq that died before "+order.FormatTime(mustParse(t, twoHoursAgo))+"\n" {
		t.Fatalf("purge --before %s: exit %d, stdout %q", twoHoursAgo, code, out)
	}
	soon := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	out, _, code = eventsCmd(t, "events", "purge", "--store", url, "--dead", "--sink", "mq", "--before", soon)
	if code != 0 || !strings.HasPrefix(out, "purged 5 dead deliveries for sink mq") {
		t.Fatalf("purge --before %s: exit %d, stdout %q", soon, code, out)
	}
	if left, stderr := d.listJSON(t, "--dead"); len(left) != 0 || !strings.Contains(stderr, "no dead events") {
		t.Fatalf("dead after purging all: %v (%q)", left, stderr)
	}
}

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEventsUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := "sqlite://" + filepath.Join(dir, "typo.db")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"events"}, 2, "lapse events [command]"},
		{[]string{"events", "-h"}, 0, "Available Commands:\n  forget-sink"},
		{[]string{"events", "nope"}, 2, `unknown subcommand "nope"`},
		{[]string{"events", "list", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"events", "list", "--limit", "0"}, 2, "--limit 0: want at least 1"},
		{[]string{"events", "list", "--after", "-1"}, 2, "--after -1: want a seq"},
		{[]string{"events", "list", "--dead", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"events", "retry", "-h"}, 0, "Usage:\n  lapse events retry [ID…] [flags]"},
		{[]string{"events", "retry", "x", "--help", "--dead"}, 0, "Usage:\n  lapse events retry [ID…] [flags]"},
		{[]string{"events", "list", "--store", missing}, 1, "no such database file"},
		{[]string{"events", "retry", "--store", missing, "--dead"}, 1, "no such database file"},
		{[]string{"events", "purge", "--store", missing, "--dead", "--before", "1h"}, 1, "no such database file"},
		{[]string{"events", "list", "--store", "oracle://x"}, 2, "unsupported scheme"}, // a flag wrong in itself: usage, exit 2
	} {
		// Help goes to stdout, anything else to stderr.
		out, stderr, code := eventsCmd(t, c.args...)
		got, other := stderr, out
		if c.code == 0 {
			got, other = out, stderr
		}
		if code != c.code || !strings.Contains(got, c.want) || other != "" {
			t.Errorf("lapse %s: exit %d, stdout %q, stderr %q; want exit %d and %q (help on stdout, errors on stderr)", strings.Join(c.args, " "), code, out, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "typo.db")); err == nil {
		t.Error("an events command created the database file it was pointed at")
	}
}

// A command that takes arguments gets them among its flags, before,
// between or after them (retry ID --sink hook narrows the retry to hook, as
// in every Go CLI), "--" ends the flags, and a long flag still reads with
// one dash; a command that takes none still refuses any argument.
func TestParseFlagsArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--sink", "hook", "a", "b"},
		{"a", "--sink", "hook", "b"},
		{"a", "b", "--sink=hook"},
		{"-sink", "hook", "a", "b"},
		{"--sink", "hook", "--", "a", "b"},
	} {
		fs := newFlagSet("x", io.Discard)
		fs.args = "[ID…]"
		sink := fs.String("sink", "", "")
		if err := parseFlags(fs, args); err != nil || *sink != "hook" || !slices.Equal(fs.Args(), []string{"a", "b"}) {
			t.Errorf("%q: err %v, sink %q, args %v", args, err, *sink, fs.Args())
		}
	}
	fs := newFlagSet("x", io.Discard)
	fs.args = "[ID…]"
	sink := fs.String("sink", "", "")
	if err := parseFlags(fs, []string{"--", "--sink", "-h"}); err != nil || *sink != "" || !slices.Equal(fs.Args(), []string{"--sink", "-h"}) {
		t.Fatalf(`after "--": err %v, sink %q, args %v`, err, *sink, fs.Args())
	}
	fs = newFlagSet("x", io.Discard)
	if err := parseFlags(fs, []string{"a"}); err != errUsage {
		t.Fatalf("an argument to a command that takes none: %v, want errUsage", err)
	}
}

func TestEventsForgetSinkOnSQLite(t *testing.T) {
	t.Parallel()
	eventsForgetSink(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestEventsForgetSinkOnPostgres(t *testing.T) {
	t.Parallel()
	eventsForgetSink(t, postgresURL(t))
}

func eventsForgetSink(t *testing.T, url string) {
	d := newDeadLetters(t, url)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "name one sink"},
		{[]string{"hook", "mq"}, 2, "name one sink"},
		{[]string{"hook", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"hoo"}, 1, `no sink "hoo" is registered (registered: hook, mq)`},
	} {
		out, stderr, code := eventsCmd(t, append([]string{"events", "forget-sink", "--store", url}, c.args...)...)
		if code != c.code || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("forget-sink %v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, stderr, c.code, c.want)
		}
	}
	// mq: its 5 dead events and dl-00's order.cancelled behind one.
	out, stderr, code := eventsCmd(t, "events", "forget-sink", "--store", url, "mq")
	if code != 0 || out != "forgot sink mq and its 6 undelivered events\n" || !strings.Contains(stderr, "registers it again") {
		t.Fatalf("forget-sink mq: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if left, _ := d.listJSON(t, "--sink", "mq"); len(left) != 0 {
		t.Fatalf("mq still has %d undelivered events", len(left))
	}
	if left, _ := d.listJSON(t, "--dead"); len(left) != deadOrders || left[0]["sink"] != "hook" {
		t.Fatalf("forgetting mq touched hook: %d dead left, want hook's %d", len(left), deadOrders)
	}
	if ds := d.claim(t, "mq"); len(ds) != 0 {
		t.Fatalf("mq claimed %d events after it was forgotten", len(ds))
	}
}
