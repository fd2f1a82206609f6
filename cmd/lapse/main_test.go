package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc/ordersvctest"
)

// binary is the lapse command built once for the end-to-end tests, which run
// it as a real process: flags, environment, signals and exit codes included.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(ordersvctest.AMQPEnv) != "" {
		// The receiver process of the order-service test over RabbitMQ
		// (TestOrderServiceAMQPReceiverProcess): it needs no lapse binary.
		os.Exit(m.Run())
	}
	// Most of these tests wait on processes — lapse serve, a receiver, a
	// broker — far more than they compute: four at a time, not GOMAXPROCS
	// (the CI machine's 2), unless -parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	dir, err := os.MkdirTemp("", "lapse-cli-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "lapse")
	// The lapse processes these tests start are built without the race
	// detector: under it they took most of this package's CPU (hundreds of
	// processes, each 5–10 times slower), the most of CI's time. The service
	// they run is raced in process by the root package's tests, with the
	// same scenarios; LAPSE_TEST_RACE_BINARY=1 races these processes too.
	build := []string{"build", "-o", binary, "."}
	if os.Getenv("LAPSE_TEST_RACE_BINARY") == "1" {
		build = []string{"build", "-race", "-o", binary, "."}
		// A race-built process sleeps a second at exit unless told not
		// to: the suite starts hundreds of them.
		if os.Getenv("GORACE") == "" {
			os.Setenv("GORACE", "atexit_sleep_ms=0")
		}
	}
	if out, err := exec.Command("go", build...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build lapse: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running `lapse serve`.
type server struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var addrRE = regexp.MustCompile(`msg="lapse serving" addr=(\S+)`)

// startServe runs `lapse serve` on a free port and waits for it to listen.
func startServe(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	s := &server{t: t, cmd: cmd, logs: &syncBuffer{}, done: make(chan error, 1)}
	// The log first, then the pipe: once the pipe shows a line, s.logs holds it.
	cmd.Stderr = io.MultiWriter(s.logs, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("lapse serve log:\n%s", s.logs.String())
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("lapse serve exited before listening:\n%s", s.logs.String())
		}
		s.url = "http://" + addr
	case <-time.After(20 * time.Second):
		t.Fatalf("lapse serve did not start:\n%s", s.logs.String())
	}
	return s
}

// stop sends SIGTERM and expects a clean exit.
func (s *server) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Fatalf("lapse serve exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		s.t.Fatal("lapse serve did not exit within 15s of SIGTERM")
	}
	if !strings.Contains(s.logs.String(), "msg=stopped") {
		s.t.Fatalf("no orderly stop in the log:\n%s", s.logs.String())
	}
}

// api is a client of s (package client), as a program using lapse would have.
func (s *server) api() *client.Client {
	s.t.Helper()
	c, err := client.New(s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// must takes a call's results and returns what fails t on its error, else
// gives its value: must(c.GetOrder(ctx, id))(t).
func must[V any](v V, err error) func(testing.TB) V {
	return func(t testing.TB) V {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// call sends a request and decodes the JSON answer, checking the status: for
// what the client does not send (foreign Host headers, wrong content types).
func (s *server) call(method, path, body string, wantStatus int, header ...string) map[string]any {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		s.t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	if resp.StatusCode != wantStatus {
		s.t.Fatalf("%s %s: status %d, want %d: %v", method, path, resp.StatusCode, wantStatus, out)
	}
	return out
}

func lapseCmd(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// endToEnd is the README's walk-through against a running server on storeURL:
// stock, an order that times out, one that is paid, a buyer cancel, a late
// callback for a cancelled order, then SIGTERM and a clean audit.
func endToEnd(t *testing.T, storeURL, timers string) {
	const secret = "e2e-secret"
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	env := []string{"LAPSE_STORE=" + storeURL, "LAPSE_CALLBACK_SECRET=" + secret} // flags through the environment
	s := startServe(t, env, "--timers", timers, "--grace", "0s", "--sweep-interval", "1s", "--sweep-lag", "1s")
	sku := "tee-" + run
	c, ctx := s.api(), t.Context()
	must(c.SetStock(ctx, sku, 5))(t)
	item := func(qty int64) []order.Item { return []order.Item{{SKU: sku, Qty: qty}} }
	timeout := must(c.CreateOrder(ctx, client.CreateOrder{ID: "to-" + run, Items: item(2), AmountCents: 1999, Timeout: time.Second}))(t)
	must(c.CreateOrder(ctx, client.CreateOrder{ID: "pd-" + run, Items: item(1), AmountCents: 999}))(t)
	must(c.CreateOrder(ctx, client.CreateOrder{ID: "bc-" + run, Items: item(1), AmountCents: 500}))(t)
	if got := must(c.Pay(ctx, "pd-"+run, ""))(t); got.Status != order.Paying {
		t.Fatalf("pay: status %v", got.Status)
	}
	notify := func(orderID string, amount int64) client.NotifyResult {
		return must(c.NotifyPayment(ctx, client.Notification{OrderID: orderID, PaymentID: "pay-" + orderID, Succeeded: true, AmountCents: amount}, []byte(secret)))(t)
	}
	if got := notify("pd-"+run, 999); got.Result != "paid" {
		t.Fatalf("callback: result %v", got.Result)
	}
	if got := must(c.Cancel(ctx, "bc-"+run))(t); got.CancelReason != order.ReasonBuyer {
		t.Fatalf("buyer cancel: reason %v", got.CancelReason)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		o := must(c.GetOrder(ctx, "to-"+run))(t)
		if o.Status == order.Cancelled {
			if o.CancelReason != order.ReasonTimeout || o.CancelledAt.Before(timeout.CancelAfter) {
				t.Fatalf("timeout cancel: %+v", o)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order not cancelled 15s after its deadline: %+v", o)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := notify("to-"+run, 1999); got.Result != "refund_required" || got.Order.Status != order.Cancelled {
		t.Fatalf("late callback: %+v", got)
	}
	if got := must(c.GetSKU(ctx, sku))(t); got != (client.SKU{SKU: sku, Available: 4, Sold: 1}) {
		t.Fatalf("stock after the flows: %+v", got)
	}
	s.stop()
	out, code := lapseCmd(t, nil, "audit", "--store", storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit exit %d:\n%s", code, out)
	}
}

func TestServeEndToEndOnSQLite(t *testing.T) {
	t.Parallel()
	for _, timers := range []string{"memory", "sql"} {
		t.Run(timers, func(t *testing.T) {
			t.Parallel()
			endToEnd(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"), timers)
		})
	}
}

func TestAuditExitsOneOnAViolation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lapse.db")
	url := "sqlite://" + path
	if out, code := lapseCmd(t, nil, "migrate", "--store", url); code != 0 {
		t.Fatalf("migrate: %d %s", code, out)
	}
	if out, code := lapseCmd(t, nil, "audit", "--store", url, "--json"); code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("audit of an empty store: %d %s", code, out)
	}
	// Stock that appears from nowhere breaks available + locked + sold = total.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO lapse_skus (sku, available, total, updated_at) VALUES ('ghost', 7, 0, 0)`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, code := lapseCmd(t, nil, "audit", "--store", url)
	if code != 1 || !strings.Contains(out, "FAIL  stock_conserved") {
		t.Fatalf("audit after corruption: exit %d\n%s", code, out)
	}
}

// lapse audit exits 1 for a violation (TestAuditExitsOneOnAViolation) and 2
// when it could not audit at all, saying why; a database it is pointed at
// that does not exist is an error, not a new empty file.
func TestAuditExitsTwoWhenItCannotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "typo.db")
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		store, want string
	}{
		{"sqlite://" + missing, "no such database file"},
		{"sqlite://" + empty, "audit"}, // a file that is no lapse database
		{"postgres://postgres@" + freePort(t) + "/x?connect_timeout=5", "lapse audit: "},
		{"oracle://x", "unsupported scheme"},
	} {
		for _, json := range []string{"--json=false", "--json"} {
			out, code := lapseCmd(t, nil, "audit", "--store", c.store, json)
			if code != 2 || !strings.Contains(out, c.want) {
				t.Errorf("audit --store %s %s: exit %d, want 2 and %q:\n%s", c.store, json, code, c.want, out)
			}
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("audit created the database file it was pointed at")
	}
}

// A command that does not migrate, pointed at a database an earlier lapse
// created (unprefixed tables) or at one no lapse migrated, says to run lapse
// migrate; lapse migrate renames the earlier tables and audit then runs.
func TestReadOnlyCommandsOnAnUnmigratedSchemaSayRunMigrate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	earlier := filepath.Join(dir, "earlier.db")
	db, err := sql.Open("sqlite", "file:"+earlier)
	if err != nil {
		t.Fatal(err)
	}
	// The tables of lapse 001_init as far as the check reads them.
	_, err = db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
INSERT INTO schema_migrations VALUES (1, 'init', 0);
CREATE TABLE orders (id TEXT PRIMARY KEY, cancel_after INTEGER, payment_attempts INTEGER);
CREATE TABLE order_items (order_id TEXT, qty INTEGER);
CREATE TABLE stock_ledger (order_id TEXT, action TEXT);
CREATE TABLE unrelated (x INTEGER);`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "shop.db")
	db, err = sql.Open("sqlite", "file:"+empty)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY)`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{earlier, "unprefixed tables of a lapse before version 9"},
		{empty, "holds no lapse schema"},
	} {
		for _, args := range [][]string{
			{"audit", "--store", "sqlite://" + c.path},
			{"events", "list", "--store", "sqlite://" + c.path},
		} {
			out, code := lapseCmd(t, nil, args...)
			if code == 0 || !strings.Contains(out, c.want) || !strings.Contains(out, "run lapse migrate") {
				t.Errorf("%v: exit %d, want an error saying %q and run lapse migrate:\n%s", args, code, c.want, out)
			}
		}
	}
}

func TestServeRefusesAnOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, code := lapseCmd(t, nil, "serve", "--addr", "0.0.0.0:0", "--store", "sqlite://"+filepath.Join(dir, "x.db"))
	if code == 0 || !strings.Contains(out, "without --api-token") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Fatal("a refused start created the database")
	}
}

// Without a token, the running server answers only requests addressed to
// the address it listens on (the port it really got, here from :0): a page
// of another site cannot drive it from a browser.
func TestServeRefusesForeignOriginWithoutToken(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
	port := s.url[strings.LastIndex(s.url, ":")+1:]
	s.call("PUT", "/v1/skus/tee", `{"available": 1}`, 200)
	s.call("GET", "/v1/skus/tee", "", 200, "Host", "localhost:"+port)
	for _, h := range [][]string{{"Host", "rebound.example:" + port}, {"Origin", "http://shop.example"}} {
		got := s.call("PUT", "/v1/skus/tee", `{"available": 9}`, 403, h...)
		if e, _ := got["error"].(map[string]any); e["code"] != "foreign_origin" {
			t.Errorf("%s %s: %v, want foreign_origin", h[0], h[1], got)
		}
	}
	s.call("PUT", "/v1/skus/tee", `{"available": 2}`, 415, "Content-Type", "text/plain")
	if got := s.call("GET", "/v1/skus/tee", "", 200); got["available"] != 1.0 {
		t.Errorf("refused requests changed the stock: %v", got)
	}
	s.stop()
}

func TestBadFlagsAndCommands(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"nope"}, 2, "unknown command"},
		{nil, []string{"serve", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"LAPSE_GRACE=soon"}, []string{"serve"}, 1, "LAPSE_GRACE"},
		{nil, []string{"serve", "--timers", "cron"}, 2, "unsupported"},
		{nil, []string{"audit", "--store", "oracle://x"}, 2, "unsupported scheme"}, // audit: 2 when it could not run
		{nil, []string{"version"}, 0, "lapse "},
	}
	for _, c := range cases {
		out, code := lapseCmd(t, c.env, c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("lapse %v: exit %d, output %q; want exit %d containing %q", c.args, code, out, c.code, c.want)
		}
	}
}

func TestEnvironmentFillsFlagsTheCommandLineWins(t *testing.T) {
	t.Setenv("LAPSE_GRACE", "5s")
	t.Setenv("LAPSE_DEFAULT_TIMEOUT", "1m")
	fs := newFlagSet("x", io.Discard)
	grace := fs.Duration("grace", time.Minute, none, "")
	timeout := fs.Duration("default-timeout", 15*time.Minute, positive, "")
	if err := parseFlags(fs, []string{"--default-timeout", "2m"}); err != nil {
		t.Fatal(err)
	}
	if *grace != 5*time.Second || *timeout != 2*time.Minute {
		t.Fatalf("grace %s (want 5s from env), timeout %s (want 2m from the flag)", *grace, *timeout)
	}
}
