package main

// End to end against the reference inventory: `lapse inventory` and `lapse
// serve --inventory …` as real processes, over HTTP and over the RabbitMQ of
// LAPSE_TEST_AMQP, lapse's store on PostgreSQL. Each order is reserved at the
// inventory first (POST /reservations) and created with its reservation_id;
// its cancel or payment writes a stock task that lapse's dispatcher sends.
// What the tests check is the inventory's ledger: every reservation released
// or confirmed exactly once, as its order ended.
//
// Sizes (environment):
//
//	LAPSE_E2E_INVENTORY_ORDERS  orders of the run without faults (default 500, for CI on 2 shared cores; the figure is 2000)
//	LAPSE_E2E_INVENTORY_OUTAGE  how long the inventory is down mid-run (default 5s; the figure is 30s)

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

const invSecret = "inventory-e2e-secret"

// invSKU is the one SKU the tests' orders take.
const invSKU = "tee"

// invStock is the stock the inventory starts with: more than any test takes.
const invStock = 1_000_000

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration such as 30s", name, v)
	}
	return d
}

// invRig is one lapse serve and the reference inventory it sends its stock
// tasks to, either of which can be stopped and started again on the same
// store (and the inventory on the same address).
type invRig struct {
	t         *testing.T
	transport string // "http" or "amqp"
	invAddr   string
	invArgs   []string // lapse inventory's, after --listen
	inv       *inventoryProc
	storeURL  string // lapse's
	lapseArgs []string
	lapse     *server
	client    *http.Client
	// broker and prefix: the AMQP transport's
	broker, prefix string
}

// newInvRig starts the inventory (its store on SQLite for HTTP, on a
// PostgreSQL schema of its own for AMQP, so that both stores are covered)
// and lapse serve on a PostgreSQL schema, over transport.
func newInvRig(t *testing.T, transport string, lapseFlags ...string) *invRig {
	t.Helper()
	r := &invRig{t: t, transport: transport, invAddr: freePort(t), storeURL: postgresURL(t),
		client: &http.Client{Timeout: 30 * time.Second}}
	if out, code := lapseCmd(t, nil, "migrate", "--store", r.storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	var target string
	switch transport {
	case "http":
		r.invArgs = []string{"--store", "sqlite://" + filepath.Join(t.TempDir(), "inventory.db")}
		target = "http://" + r.invAddr
	case "amqp":
		broker := os.Getenv("LAPSE_TEST_AMQP")
		if broker == "" {
			t.Skip("set LAPSE_TEST_AMQP=amqp://guest:guest@127.0.0.1:5672/ to run")
		}
		prefix := randomName("lapsetest.stock.")
		r.broker, r.prefix = broker, prefix
		t.Cleanup(func() { deleteStockTopology(t, broker, prefix) })
		target = withQuery(t, broker, "prefix", prefix)
		r.invArgs = []string{"--store", postgresURL(t), "--amqp", target}
	default:
		t.Fatalf("transport %q", transport)
	}
	r.startInventory()
	if status, body := r.inv.call("PUT", "/skus/"+invSKU, fmt.Sprintf(`{"available": %d}`, invStock)); status != 200 {
		t.Fatalf("PUT /skus/%s: %d %s", invSKU, status, body)
	}
	r.lapseArgs = []string{"--store", r.storeURL, "--no-migrate", "--grace", "0s", "--callback-secret", invSecret,
		"--inventory", target, "--inventory-timeout", "1s"}
	r.lapseArgs = append(r.lapseArgs, lapseFlags...) // the last of a flag wins
	r.startLapse()
	return r
}

func withQuery(t *testing.T, raw, k, v string) string {
	t.Helper()
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + k + "=" + v
}

// deleteStockTopology deletes what the AMQP transport declared under
// prefix; the reply queues expire by themselves.
func deleteStockTopology(t *testing.T, broker, prefix string) {
	conn, err := amqp091.Dial(broker)
	if err != nil {
		t.Errorf("delete %s.*: %v", prefix, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete %s.*: %v", prefix, err)
		return
	}
	defer ch.Close()
	for _, q := range []string{prefix + ".commands", prefix + ".dead"} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", q, err)
		}
	}
	for _, x := range []string{prefix, prefix + ".dead"} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", x, err)
		}
	}
}

// startInventory starts lapse inventory on r's address and store and waits
// until it answers.
func (r *invRig) startInventory() {
	t := r.t
	t.Helper()
	cmd := exec.Command(binary, append([]string{"inventory", "--listen", r.invAddr}, r.invArgs...)...)
	logs := &syncBuffer{}
	cmd.Stderr, cmd.Stdout = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &inventoryProc{t: t, cmd: cmd, logs: logs, url: "http://" + r.invAddr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("lapse inventory log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && (r.transport != "amqp" || strings.Contains(logs.String(), "amqp")) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lapse inventory did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.inv = p
}

// deleteCommandQueue deletes the inventory's command queue (AMQP): until
// the inventory declares it again, lapse's commands are unroutable.
func (r *invRig) deleteCommandQueue() {
	r.t.Helper()
	conn, err := amqp091.Dial(r.broker)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	if n, err := ch.QueueDelete(r.prefix+".commands", false, false, false); err != nil || n != 0 {
		r.t.Fatalf("delete the command queue: %d commands in it, %v", n, err)
	}
}

// killInventory ends the inventory with SIGKILL: it goes away mid-command.
func (r *invRig) killInventory() {
	r.t.Helper()
	if err := r.inv.cmd.Process.Kill(); err != nil {
		r.t.Fatal(err)
	}
	_ = r.inv.cmd.Wait()
}

func (r *invRig) startLapse() { r.t.Helper(); r.lapse = startServe(r.t, nil, r.lapseArgs...) }

func (r *invRig) killLapse() {
	r.t.Helper()
	if err := r.lapse.cmd.Process.Kill(); err != nil {
		r.t.Fatal(err)
	}
	<-r.lapse.done
}

// faults sets the inventory's fault switches (POST /faults).
func (r *invRig) faults(body string) {
	r.t.Helper()
	if status, out := r.inv.call("POST", "/faults", body); status != 200 {
		r.t.Fatalf("POST /faults %s: %d %s", body, status, out)
	}
}

// do sends a request and decodes its JSON answer into out (when not nil);
// it is safe to call from any goroutine.
func (r *invRig) do(method, url, body string, want int, out any, header ...string) error {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s %s: status %d, want %d: %s", method, url, body, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, url, b, err)
		}
	}
	return nil
}

// batch is a set of orders one phase of a test places: order <name>-<i>,
// reservation res-<name>-<i>, one unit of invSKU each; paid(i) says which
// are paid (the rest time out).
type batch struct {
	name string
	n    int
	paid func(i int) bool
	// timeout is the unpaid orders' timeout; paid orders get a minute, so
	// that a slow machine cannot turn a payment into a timeout.
	timeout func(i int) time.Duration
	// skip, when set, leaves orders out of place.
	skip func(i int) bool
}

func (b batch) order(i int) string       { return fmt.Sprintf("%s-%04d", b.name, i) }
func (b batch) reservation(i int) string { return "res-" + b.order(i) }

func (b batch) paidCount() int {
	n := 0
	for i := range b.n {
		if b.paid(i) {
			n++
		}
	}
	return n
}

// every30 pays 3 orders in 10.
func every30(i int) bool { return i%10 < 3 }

// reserve makes b's reservations at the inventory, workers at once.
func (r *invRig) reserve(b batch, workers int) {
	r.t.Helper()
	r.parallel(b.n, workers, func(i int) error { return r.reserveOne(b, i) })
}

func (r *invRig) reserveOne(b batch, i int) error {
	var got struct {
		ReservationID string `json:"reservation_id"`
		Status        string `json:"status"`
	}
	body := fmt.Sprintf(`{"reservation_id":%q,"order_id":%q,"items":[{"sku":%q,"qty":1}]}`, b.reservation(i), b.order(i), invSKU)
	if err := r.do("POST", r.inv.url+"/reservations", body, 201, &got); err != nil {
		return err
	}
	if got.ReservationID != b.reservation(i) || got.Status != "RESERVED" {
		return fmt.Errorf("reserve %s: %+v", b.reservation(i), got)
	}
	return nil
}

// place creates b's orders with their reservations and pays the paid ones,
// workers at once; with reserveToo each is reserved just before.
func (r *invRig) place(b batch, workers int, reserveToo bool) {
	r.t.Helper()
	base := r.lapse.url
	r.parallel(b.n, workers, func(i int) error {
		if b.skip != nil && b.skip(i) {
			return nil
		}
		if reserveToo {
			if err := r.reserveOne(b, i); err != nil {
				return err
			}
		}
		timeout := time.Minute
		if !b.paid(i) {
			timeout = b.timeout(i)
		}
		body := fmt.Sprintf(`{"id":%q,"items":[{"sku":%q,"qty":1}],"amount_cents":100,"timeout_seconds":%.3f,"reservation_id":%q}`,
			b.order(i), invSKU, timeout.Seconds(), b.reservation(i))
		if err := r.do("POST", base+"/v1/orders", body, 201, nil); err != nil {
			return err
		}
		if b.paid(i) {
			return r.payAt(base, b.order(i))
		}
		return nil
	})
}

// payAt starts a payment and sends its signed success callback.
func (r *invRig) payAt(base, id string) error {
	if err := r.do("POST", base+"/v1/orders/"+id+"/pay", "", 200, nil); err != nil {
		return err
	}
	body := fmt.Sprintf(`{"order_id":%q,"payment_id":"pay-%s","status":"SUCCEEDED","amount_cents":100}`, id, id)
	var got struct{ Result string }
	if err := r.do("POST", base+"/v1/payments/notify", body, 200, &got,
		payment.SignatureHeader, payment.Sign([]byte(invSecret), time.Now(), []byte(body))); err != nil {
		return err
	}
	if got.Result != "paid" {
		return fmt.Errorf("callback for %s: result %q, want paid", id, got.Result)
	}
	return nil
}

// parallel runs f(0…n-1) on workers goroutines and fails the test with the
// first errors.
func (r *invRig) parallel(n, workers int, f func(i int) error) {
	r.t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		r.t.Fatalf("%d workers failed; first: %v", len(errs), errs[0])
	}
}

// tasks returns lapse's stock tasks not DONE (with dead, only the DEAD ones).
func (r *invRig) tasks(dead bool) []order.StockTask {
	r.t.Helper()
	var all []order.StockTask
	after := ""
	for {
		var page struct {
			Tasks     []order.StockTask `json:"tasks"`
			NextAfter string            `json:"next_after"`
		}
		if err := r.do("GET", fmt.Sprintf("%s/v1/tasks?dead=%t&limit=500&after=%s", r.lapse.url, dead, after), "", 200, &page); err != nil {
			r.t.Fatal(err)
		}
		all = append(all, page.Tasks...)
		if after = page.NextAfter; after == "" {
			return all
		}
	}
}

// ordersIn reports whether any order is in status.
func (r *invRig) ordersIn(status string) bool {
	r.t.Helper()
	var page struct {
		Orders []json.RawMessage `json:"orders"`
	}
	if err := r.do("GET", r.lapse.url+"/v1/orders?limit=1&status="+status, "", 200, &page); err != nil {
		r.t.Fatal(err)
	}
	return len(page.Orders) > 0
}

// waitFor polls cond until it holds, failing the test after within.
func (r *invRig) waitFor(what string, within time.Duration, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until no order is PENDING or PAYING and every stock task is
// DONE.
func (r *invRig) settle(within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	r.waitFor("no order PENDING or PAYING", within, func() bool { return !r.ordersIn("PENDING") && !r.ordersIn("PAYING") })
	var left []order.StockTask
	r.waitFor("every stock task DONE", time.Until(deadline), func() bool { left = r.tasks(false); return len(left) == 0 })
}

// ledgerRow is one row of the inventory's GET /ledger.
type ledgerRow struct {
	Seq           int64  `json:"seq"`
	ReservationID string `json:"reservation_id"`
	Action        string `json:"action"`
	TaskID        string `json:"task_id"`
	Tombstone     bool   `json:"tombstone"`
}

// ledger returns the inventory's whole ledger, by reservation.
func (r *invRig) ledger() map[string][]ledgerRow {
	r.t.Helper()
	byRes := map[string][]ledgerRow{}
	after := ""
	for {
		var page struct {
			Rows []ledgerRow `json:"rows"`
			Next *int64      `json:"next"`
		}
		if err := r.do("GET", r.inv.url+"/ledger?limit=1000"+after, "", 200, &page); err != nil {
			r.t.Fatal(err)
		}
		for _, row := range page.Rows {
			byRes[row.ReservationID] = append(byRes[row.ReservationID], row)
		}
		if page.Next == nil {
			return byRes
		}
		after = fmt.Sprintf("&after=%d", *page.Next)
	}
}

// actions lists a reservation's ledger actions in order.
func actions(rows []ledgerRow) []string {
	var a []string
	for _, row := range rows {
		s := row.Action
		if row.Tombstone {
			s += "(tombstone)"
		}
		a = append(a, s)
	}
	return a
}

// checkLedger checks that each of b's reservations was reserved, then
// confirmed (paid) or released (timed out) exactly once, and returns the
// ledger.
func (r *invRig) checkLedger(b batch) map[string][]ledgerRow {
	r.t.Helper()
	led := r.ledger()
	bad := 0
	for i := range b.n {
		want := []string{"reserve", "release"}
		if b.paid(i) {
			want = []string{"reserve", "confirm"}
		}
		if got := actions(led[b.reservation(i)]); !slices.Equal(got, want) {
			if bad++; bad <= 10 {
				r.t.Errorf("reservation %s: ledger %v, want %v", b.reservation(i), got, want)
			}
		}
	}
	if bad > 0 {
		r.t.Fatalf("%d of %d reservations of %s not applied exactly once", bad, b.n, b.name)
	}
	return led
}

// checkStock checks the SKU's counters after paid units were sold and the
// rest released.
func (r *invRig) checkStock(sold int) {
	r.t.Helper()
	var got struct{ Available, Reserved, Sold int64 }
	if err := r.do("GET", r.inv.url+"/skus/"+invSKU, "", 200, &got); err != nil {
		r.t.Fatal(err)
	}
	if got.Available != int64(invStock-sold) || got.Reserved != 0 || got.Sold != int64(sold) {
		r.t.Fatalf("SKU %s: %+v, want available %d, reserved 0, sold %d", invSKU, got, invStock-sold, sold)
	}
}

// audit runs lapse audit on lapse's store and wants every invariant to hold.
func (r *invRig) audit() {
	r.t.Helper()
	out, code := lapseCmd(r.t, nil, "audit", "--store", r.storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		r.t.Fatalf("audit exit %d:\n%s", code, out)
	}
}

// orderTasks returns an order's stock tasks (GET /v1/orders/{id}).
func (r *invRig) orderTasks(id string) []order.StockTask {
	r.t.Helper()
	var o struct {
		Tasks []order.StockTask `json:"tasks"`
	}
	if err := r.do("GET", r.lapse.url+"/v1/orders/"+id, "", 200, &o); err != nil {
		r.t.Fatal(err)
	}
	return o.Tasks
}

func forEachTransport(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tr := range []string{"http", "amqp"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			f(t, tr)
		})
	}
}

// The run (LAPSE_E2E_INVENTORY_ORDERS=2000): orders each reserved at the inventory and created
// with its reservation, 30% paid, the rest timing out after 1 to 2 s while
// others are still being placed → every task DONE, every reservation
// confirmed (paid) or released (timed out) exactly once, the inventory's
// counters right, audit ok.
func TestInventoryEndToEnd(t *testing.T) {
	t.Parallel()
	n := envInt(t, "LAPSE_E2E_INVENTORY_ORDERS", 500)
	forEachTransport(t, func(t *testing.T, transport string) {
		r := newInvRig(t, transport)
		b := batch{name: "e2e", n: n, paid: every30, timeout: func(i int) time.Duration { return time.Second + time.Duration(i%10)*100*time.Millisecond }}
		start := time.Now()
		r.place(b, 8, true)
		placed := time.Since(start)
		r.settle(2 * time.Minute)
		t.Logf("%s: %d orders placed in %s, every task DONE %s after the first", transport, n, placed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		r.checkLedger(b)
		r.checkStock(b.paidCount())
		var res struct {
			Status string `json:"status"`
		}
		for i, want := range map[int]string{0: "CONFIRMED", 5: "RELEASED"} {
			if err := r.do("GET", r.inv.url+"/reservations/"+b.reservation(i), "", 200, &res); err != nil || res.Status != want {
				t.Fatalf("GET /reservations/%s: %+v %v, want %s", b.reservation(i), res, err, want)
			}
		}
		r.lapse.stop()
		r.audit()
	})
}

// The faults of the issue, one after the other on one lapse and one
// inventory: the inventory going away mid-run, answers dropped, commands
// rejected, lapse killed between commit and send.
func TestInventoryFaults(t *testing.T) {
	t.Parallel()
	outage := envDuration(t, "LAPSE_E2E_INVENTORY_OUTAGE", 5*time.Second)
	forEachTransport(t, func(t *testing.T, transport string) {
		r := newInvRig(t, transport)
		sold := 0
		short := func(i int) time.Duration { return 300 * time.Millisecond }

		// 1. The inventory is killed mid-run and comes back after the
		// outage: orders time out before, during and after, and the paid
		// ones are paid while it is away.
		b := batch{name: "outage", n: 300, paid: every30}
		r.reserve(b, 8)
		first := time.Now().Add(1500 * time.Millisecond)
		b.timeout = func(i int) time.Duration {
			return max(50*time.Millisecond, time.Until(first.Add(time.Duration(i)*(outage+time.Second)/time.Duration(b.n))))
		}
		r.place(b.only(func(i int) bool { return !b.paid(i) }), 8, false)
		r.waitFor("a first release applied before the inventory goes away", 10*time.Second, func() bool {
			return countAction(r.ledger(), "release") > 0
		})
		r.killInventory()
		down := time.Now()
		r.place(b.only(b.paid), 8, false)
		r.waitFor("tasks failing while the inventory is down", outage, func() bool {
			for _, tk := range r.tasks(false) {
				if tk.Attempts > 0 && tk.LastError != "" {
					return true
				}
			}
			return false
		})
		time.Sleep(time.Until(down.Add(outage))) // the outage itself: the inventory stays away this long
		r.startInventory()
		back := time.Now()
		r.settle(outage + 60*time.Second)
		t.Logf("%s: outage of %s; every task DONE %s after the inventory came back", transport, outage, time.Since(back).Round(time.Millisecond))
		r.checkLedger(b)
		sold += b.paidCount()

		// 2. Answers dropped: applied, not answered; lapse sends again and
		// the inventory answers ALREADY_DONE.
		b = batch{name: "drop", n: 50, paid: every30, timeout: short}
		r.reserve(b, 8)
		r.faults(`{"drop_answers": true}`)
		r.place(b, 8, false)
		r.waitFor("every command applied although unanswered", 30*time.Second, func() bool {
			led := r.ledger()
			for i := range b.n {
				if len(led[b.reservation(i)]) < 2 {
					return false
				}
			}
			return true
		})
		if len(r.tasks(false)) != b.n {
			t.Fatalf("with answers dropped: %d tasks not DONE, want %d", len(r.tasks(false)), b.n)
		}
		r.faults(`{"drop_answers": false}`)
		r.settle(30 * time.Second)
		r.checkLedger(b)
		for i := range b.n {
			ts := r.orderTasks(b.order(i))
			if len(ts) != 1 || ts[0].Status != order.TaskDone || ts[0].Result != string(inventory.AlreadyDone) || ts[0].Attempts < 2 {
				t.Fatalf("order %s after dropped answers: tasks %+v, want one DONE by ALREADY_DONE after 2 sends or more", b.order(i), ts)
			}
		}
		sold += b.paidCount()

		// 3. Commands rejected: the tasks are DEAD, nothing is applied;
		// once the switch is off an operator's retry makes them DONE.
		b = batch{name: "reject", n: 50, paid: every30, timeout: short}
		r.reserve(b, 8)
		r.faults(`{"reject": true}`)
		r.place(b, 8, false)
		r.waitFor("every rejected task DEAD", 30*time.Second, func() bool { return len(r.tasks(true)) == b.n })
		for _, tk := range r.tasks(true) {
			if tk.Result != string(inventory.Rejected) || !strings.Contains(tk.LastError, "rejected_by_fault_switch") {
				t.Fatalf("dead task %+v: want result REJECTED, reason rejected_by_fault_switch", tk)
			}
		}
		led := r.ledger()
		for i := range b.n {
			if got := actions(led[b.reservation(i)]); !slices.Equal(got, []string{"reserve"}) {
				t.Fatalf("reservation %s after rejections: ledger %v, want only the reserve", b.reservation(i), got)
			}
		}
		r.faults(`{"reject": false}`)
		var retried struct{ Retried int }
		if err := r.do("POST", r.lapse.url+"/v1/tasks/retry", `{"dead": true}`, 200, &retried); err != nil || retried.Retried != b.n {
			t.Fatalf("POST /v1/tasks/retry: %+v %v, want %d retried", retried, err, b.n)
		}
		r.settle(30 * time.Second)
		r.checkLedger(b)
		sold += b.paidCount()

		// 4. lapse killed between commit and send: the inventory is away,
		// so the tasks are committed and none is sent; lapse is killed
		// (SIGKILL), the inventory comes back, lapse starts again and
		// sends them. Over AMQP the broker would take the commands while
		// the inventory is away (its queue is durable): its queue is
		// deleted too, so that they are refused as unroutable and not
		// sent.
		b = batch{name: "kill", n: 100, paid: every30, timeout: short}
		r.reserve(b, 8)
		r.killInventory()
		if transport == "amqp" {
			r.deleteCommandQueue()
		}
		r.place(b, 8, false)
		r.waitFor("every task committed", 30*time.Second, func() bool {
			return !r.ordersIn("PENDING") && !r.ordersIn("PAYING") && len(r.tasks(false)) == b.n
		})
		r.killLapse()
		r.startInventory()
		if got := r.ledger(); len(got[b.reservation(0)]) != 1 {
			t.Fatalf("before lapse's restart: %s ledger %v, want only the reserve", b.reservation(0), actions(got[b.reservation(0)]))
		}
		r.startLapse()
		// A claim in flight at the kill holds its tasks for the
		// dispatcher's lease (30 s) before they are sent again.
		r.settle(90 * time.Second)
		r.checkLedger(b)
		sold += b.paidCount()

		r.checkStock(sold)
		r.lapse.stop()
		r.audit()
	})
}

// lapse killed while some of its commands are in flight and others are
// committed but not sent yet: the inventory holds each command 20 s (lapse
// waits up to 24 s, within its claim's lease) and lapse is killed (SIGKILL)
// once every order has ended and the dispatcher has sent its first tasks.
// Over AMQP the inventory applies what the broker queued; over HTTP the
// closed connection cancels the held commands. The restarted lapse sends
// the unsent tasks at once and the ones in flight once the dead claim's
// lease (30 s) ran out: each reservation moved once, the commands applied
// from the dead lapse's sends answered ALREADY_DONE.
func TestInventoryLapseKilledMidSend(t *testing.T) {
	t.Parallel()
	forEachTransport(t, func(t *testing.T, transport string) {
		r := newInvRig(t, transport, "--inventory-timeout", "30s", "--task-workers", "8")
		b := batch{name: "inflight", n: 100, paid: every30, timeout: func(int) time.Duration { return 300 * time.Millisecond }}
		r.reserve(b, 8)
		r.faults(`{"delay_ms": 20000}`)
		r.place(b, 8, false)
		var inFlight []string
		r.waitFor("every order ended, tasks in flight", 15*time.Second, func() bool {
			if r.ordersIn("PENDING") || r.ordersIn("PAYING") {
				return false
			}
			inFlight = inFlight[:0]
			ts := r.tasks(false)
			for _, tk := range ts {
				if tk.Attempts > 0 {
					inFlight = append(inFlight, tk.OrderID)
				}
			}
			return len(ts) == b.n && len(inFlight) > 0
		})
		r.killLapse()
		if led := r.ledger(); countAction(led, "release")+countAction(led, "confirm") != 0 {
			t.Fatal("commands applied before the kill: the delay did not hold them")
		}
		r.faults(`{"delay_ms": 0}`)
		r.startLapse()
		r.settle(90 * time.Second)
		r.checkLedger(b)
		again := 0
		for _, id := range inFlight {
			ts := r.orderTasks(id)
			if len(ts) != 1 || ts[0].Attempts < 2 {
				t.Fatalf("order %s: tasks %+v, want one sent again after the restart", id, ts)
			}
			if ts[0].Result == string(inventory.AlreadyDone) {
				again++
			}
		}
		t.Logf("%s: %d of %d tasks in flight at the kill; %d of them answered ALREADY_DONE after the restart", transport, len(inFlight), b.n, again)
		if transport == "amqp" && again != len(inFlight) {
			t.Fatalf("over AMQP every command in flight was queued and applied: want %d ALREADY_DONE, got %d", len(inFlight), again)
		}
		r.checkStock(b.paidCount())
		r.lapse.stop()
		r.audit()
	})
}

// only is b with the orders for which keep is false left out (the others
// keep their numbers).
func (b batch) only(keep func(i int) bool) batch {
	b.skip = func(i int) bool { return !keep(i) }
	return b
}

// countAction counts the ledger rows of action.
func countAction(led map[string][]ledgerRow, action string) int {
	n := 0
	for _, rows := range led {
		for _, row := range rows {
			if row.Action == action {
				n++
			}
		}
	}
	return n
}

// The prefix parameter of an AMQP inventory URL is taken out, checked, and
// leaves the rest alone.
func TestInventoryAMQPURL(t *testing.T) {
	t.Parallel()
	broker, opts, err := inventoryAMQPURL("amqp://u:hunter2@h:5672/v?heartbeat=5&prefix=shop.stock")
	if err != nil || broker != "amqp://u:hunter2@h:5672/v?heartbeat=5" || len(opts) != 1 {
		t.Fatalf("got %q, %d options, %v", broker, len(opts), err)
	}
	if broker, opts, err := inventoryAMQPURL("amqp://h/"); err != nil || broker != "amqp://h/" || len(opts) != 0 {
		t.Fatalf("without a prefix: %q, %d options, %v", broker, len(opts), err)
	}
	if broker, opts, err := inventoryAMQPURL("amqp://h/?prefetch=128&prefix=p"); err != nil || broker != "amqp://h/" || len(opts) != 2 {
		t.Fatalf("with a prefetch: %q, %d options, %v", broker, len(opts), err)
	}
	for _, bad := range []string{"amqp://h/?prefix=", "amqp://h/?prefix=amq.x", "amqp://h/?prefix=a&prefix=b", "amqp://h/?prefetch=0", "amqp://h/?prefetch=x"} {
		if _, _, err := inventoryAMQPURL(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
