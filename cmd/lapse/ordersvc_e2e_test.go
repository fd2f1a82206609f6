package main

// End to end in order-service mode: `lapse serve --order-service` on
// PostgreSQL and a receiver with its own SQLite database as real processes,
// over HTTP (the reference Python receiver, ordersvc/testdata) and over
// RabbitMQ (ordersvc.ServeAMQP in a process of its own, ordersvctest's Go
// receiver). The receiver owns the orders; lapse holds their deadlines. 30%
// of the orders are paid at the shop without telling lapse, 10% answer
// paying, then are paid. Faults on the way, each transport's own: the
// receiver down for a while, failing (503, or an apply error requeued),
// losing answers after applying them, lapse SIGKILLed between sending a
// command and recording its answer, and over RabbitMQ the broker restarting
// mid-run. What both tests check (ordersvcE2E.verify): every order ends the
// same in both places, no cancel is applied twice, no command arrives before
// its cancel_after, every delivery of one order carries one command id, and
// lapse audit passes.
//
// Sizes (environment):
//
//	LAPSE_E2E_ORDERSVC_ORDERS       orders of the HTTP run (default 1000)
//	LAPSE_E2E_ORDERSVC_AMQP_ORDERS  orders of the RabbitMQ run (default 600, for 2 shared cores)

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc/ordersvctest"
	amqp "github.com/rabbitmq/amqp091-go"
)

const e2eOrderServiceSecret = "whsec_ZTJlLW9yZGVyLXNlcnZpY2Utc2VjcmV0LWZvci1sYXBzZQ=="

// holdProxy stands between lapse and the receiver. Armed, it forwards the
// next command, gets the receiver's answer (the command is applied), tells
// the test, and waits for it to kill lapse before dropping the answer: lapse
// dies between sending and recording.
type holdProxy struct {
	target string
	mu     sync.Mutex
	armed  bool
	held   chan string   // the held command's webhook-id
	free   chan struct{} // closed when the test has killed lapse
}

func (p *holdProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// The receiver is down: lapse sees a dropped connection.
		hijackClose(w)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.mu.Lock()
	hold := p.armed && resp.StatusCode == http.StatusOK
	if hold {
		p.armed = false
	}
	p.mu.Unlock()
	if hold {
		p.held <- r.Header.Get("webhook-id")
		<-p.free
		hijackClose(w)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
		}
	}
}

// ordersvcE2E is one end-to-end run: lapse serve on PostgreSQL, a receiver
// process, and the scenario both transports share (register, run the
// transport's fault steps while the deadlines pass, verify).
type ordersvcE2E struct {
	t        *testing.T
	shop     *ordersvctest.Process
	storeURL string
	args     []string // lapse serve's
	srv      *server
	api      *client.Client
	ids      []string
	start    time.Time // deadlines are counted from here
	shopDown bool      // the receiver is killed: its test routes are down too
}

// ordersvcStep is a transport's fault, run at (after the start of the
// run); it may block.
type ordersvcStep struct {
	at time.Duration
	do func(e *ordersvcE2E)
}

// newOrderServiceE2E migrates a fresh PostgreSQL schema and starts lapse
// serve sending its commands to orderService (an http:// or amqp:// URL).
func newOrderServiceE2E(t *testing.T, shop *ordersvctest.Process, orderService string, extra ...string) *ordersvcE2E {
	t.Helper()
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	secretPath := filepath.Join(t.TempDir(), "order-service.secret")
	if err := os.WriteFile(secretPath, []byte(e2eOrderServiceSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &ordersvcE2E{t: t, shop: shop, storeURL: storeURL,
		args: append([]string{"--store", storeURL, "--grace", "0", "--order-service", orderService, "--order-service-secret-file", secretPath,
			"--order-service-max-attempts", "1000", "--order-service-retry-max", "2s"}, extra...)}
	e.srv = startServe(t, nil, e.args...)
	e.api = e.srv.api()
	return e
}

// ordersvcKind is what order i is at the shop: 30% paid at the shop before their
// deadline without telling lapse; 10% with a payment in flight (paying),
// paid once lapse has asked; the rest left pending.
func ordersvcKind(i int) string {
	switch {
	case i%10 < 3:
		return "paid"
	case i%10 == 3:
		return "paying"
	}
	return "pending"
}

// register creates n orders at the shop, each as ordersvcKind says, then
// their deadlines at lapse, from first to first+spread after the start
// whatever the registration costs (8 registrations at once). The shop has
// them paid or paying from the start: a registration slower than first
// must not have the shop pay an order lapse already had it cancel.
func (e *ordersvcE2E) register(n int, first, spread time.Duration) {
	t := e.t
	t.Helper()
	e.ids = make([]string, n)
	seed := make([]ordersvctest.Order, n)
	for i := range n {
		e.ids[i] = fmt.Sprintf("shop-%04d", i)
		seed[i] = ordersvctest.Order{ID: e.ids[i], Status: ordersvcKind(i)}
	}
	e.shop.Seed(seed...)
	e.start = time.Now()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				due := e.start.Add(first + time.Duration(i)*spread/time.Duration(n))
				timeout := max(time.Until(due), 100*time.Millisecond)
				if _, err := e.api.CreateOrder(ctx, client.CreateOrder{ID: e.ids[i], AmountCents: 1999, Currency: "EUR", Timeout: timeout}); err != nil {
					errs <- fmt.Errorf("register %s: %w", e.ids[i], err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("registered %d orders in %s (the first deadline at %s)", n, time.Since(e.start).Round(time.Millisecond), first)
}

// killShop kills the receiver; restartShop starts it again with faults.
func (e *ordersvcE2E) killShop() {
	e.shop.Kill()
	e.shopDown = true
}

func (e *ordersvcE2E) restartShop(f ordersvctest.Faults) {
	e.shop.Restart()
	e.shop.SetFaults(f)
	e.shopDown = false
}

// killLapse SIGKILLs lapse serve, which has sent the command held (and the
// receiver applied it) without hearing the answer, and starts it again;
// then released lets the answer go.
func (e *ordersvcE2E) killLapse(held string, released func()) {
	_ = e.srv.cmd.Process.Kill()
	<-e.srv.done
	released()
	e.t.Logf("lapse killed holding the answer to %s at %s", held, time.Since(e.start).Round(time.Millisecond))
	e.srv = startServe(e.t, nil, e.args...)
	e.api = e.srv.api()
}

// unsettled returns lapse's orders not final yet.
func (e *ordersvcE2E) unsettled() []order.Order {
	e.t.Helper()
	var left []order.Order
	for _, st := range []order.Status{order.Pending, order.Paying, order.Cancelling} {
		for cursor := ""; ; {
			page, err := e.api.ListOrders(context.Background(), client.ListOrders{Status: st, Limit: 500, Cursor: cursor})
			if err != nil {
				e.t.Fatalf("list %s orders: %v", st, err)
			}
			left = append(left, page.Orders...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	return left
}

// run runs steps at their time while the deadlines pass, pays at the shop
// the orders that answered paying, and returns once every step ran and
// every order is final at lapse (3 minutes at most).
func (e *ordersvcE2E) run(steps []ordersvcStep) {
	t := e.t
	t.Helper()
	n := len(e.ids)
	flipped := map[string]bool{}
	var lastLook time.Time
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for len(steps) > 0 && time.Since(e.start) > steps[0].at {
			steps[0].do(e)
			steps = steps[1:]
		}
		// A payment in flight at the shop succeeds once lapse has asked
		// (looked at every 2 s: the receiver is a busy process).
		if len(flipped) < n/10 && time.Since(lastLook) > 2*time.Second && !e.shopDown {
			lastLook = time.Now()
			var paid []ordersvctest.Order
			for _, d := range e.shop.Deliveries() {
				if d.Outcome == "paying" && !flipped[d.OrderID] {
					paid = append(paid, ordersvctest.Order{ID: d.OrderID, Status: "paid"})
					flipped[d.OrderID] = true
				}
			}
			if len(paid) > 0 {
				e.shop.Seed(paid...)
			}
		}
		if len(steps) == 0 {
			left := e.unsettled()
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				by := map[order.Status]int{}
				var sample []string
				for _, o := range left {
					by[o.Status]++
					if len(sample) < 5 {
						sample = append(sample, fmt.Sprintf("%s %s cancel_after %s", o.ID, o.Status, o.CancelAfter.Format(time.RFC3339Nano)))
					}
				}
				t.Fatalf("%d orders not final at lapse after %s: %v, e.g. %v", len(left), time.Since(e.start).Round(time.Second), by, sample)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("every order final at lapse after %s (paying orders paid at the shop: %d)", time.Since(e.start).Round(time.Millisecond), len(flipped))
}

// verify checks what both transports guarantee, stops lapse and runs
// lapse audit; it returns the deliveries' outcomes at the receiver, by
// outcome, for the transport to check its faults happened.
func (e *ordersvcE2E) verify() map[string]int {
	t := e.t
	t.Helper()
	ctx := context.Background()
	shop := e.shop.Orders()
	counts := map[string]int{}
	for _, id := range e.ids {
		o := must(e.api.GetOrder(ctx, id))(t)
		want := map[string]order.Status{"cancelled": order.Cancelled, "paid": order.Paid}[shop[id]]
		if o.Status != want {
			t.Errorf("%s: lapse %s, the shop %s", id, o.Status, shop[id])
		}
		if o.Status == order.Cancelled && o.CancelReason != order.ReasonTimeout {
			t.Errorf("%s: cancelled by %s", id, o.CancelReason)
		}
		counts[string(o.Status)]++
	}
	t.Logf("final: %v", counts)
	applied := map[string]int{}
	for _, a := range e.shop.Applied() {
		applied[a.OrderID]++
	}
	for id, k := range applied {
		if k != 1 {
			t.Errorf("%s: cancelled %d times at the shop", id, k)
		}
	}
	commandIDs := map[string]map[string]bool{}
	outcomes := map[string]int{}
	deliveries := e.shop.Deliveries()
	for _, d := range deliveries {
		ca, err := time.Parse(time.RFC3339Nano, d.CancelAfter)
		if err != nil {
			t.Fatalf("delivery %+v: cancel_after: %v", d, err)
		}
		if d.ReceivedAtMs < ca.UnixMilli() {
			t.Errorf("%s: command received at %d, before cancel_after %s", d.OrderID, d.ReceivedAtMs, d.CancelAfter)
		}
		if commandIDs[d.OrderID] == nil {
			commandIDs[d.OrderID] = map[string]bool{}
		}
		commandIDs[d.OrderID][d.WebhookID] = true
		outcomes[d.Outcome]++
	}
	for id, set := range commandIDs {
		if len(set) != 1 {
			t.Errorf("%s: %d command ids over its deliveries, want one", id, len(set))
		}
	}
	t.Logf("deliveries: %d for %d orders, by outcome %v", len(deliveries), len(commandIDs), outcomes)
	e.srv.stop()
	if out, code := lapseCmd(t, nil, "audit", "--store", e.storeURL); code != 0 {
		t.Fatalf("audit after the run (exit %d):\n%s", code, out)
	}
	return outcomes
}

func TestOrderServiceEndToEndWithFaults(t *testing.T) {
	n := envInt(t, "LAPSE_E2E_ORDERSVC_ORDERS", 1000)
	py := ordersvctest.StartPython(t, ordersvctest.PythonConfig{Secrets: []string{e2eOrderServiceSecret},
		Env: []string{"SEED=25", "PAYING_RETRY_AFTER=1"}})
	proxy := &holdProxy{target: py.URL, held: make(chan string, 1), free: make(chan struct{})}
	// The proxy listens on a port of its own that stays up while the
	// receiver behind it is down or restarting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewUnstartedServer(proxy)
	ps.Listener.Close()
	ps.Listener = ln
	ps.Start()
	t.Cleanup(ps.Close)

	e := newOrderServiceE2E(t, py, ps.URL+"/lapse", "--order-service-lease", "2s")
	py.SetFaults(ordersvctest.Faults{DropAnswerRate: ordersvctest.Float(0.1)})
	e.register(n, 10*time.Second, 20*time.Second)
	e.run([]ordersvcStep{
		{13 * time.Second, func(e *ordersvcE2E) { e.killShop() }}, // down for 5 s
		{18 * time.Second, func(e *ordersvcE2E) {
			e.restartShop(ordersvctest.Faults{Fail503Until: ordersvctest.Int(40), DropAnswerRate: ordersvctest.Float(0.1)})
		}},
		{20 * time.Second, func(e *ordersvcE2E) {
			proxy.mu.Lock()
			proxy.armed = true
			proxy.mu.Unlock()
			select {
			case id := <-proxy.held:
				// lapse sent the command and the receiver applied it: lapse
				// dies before it hears the answer.
				e.killLapse(id, func() { close(proxy.free) })
			case <-time.After(30 * time.Second):
				t.Fatal("no command reached the proxy to hold")
			}
		}},
	})
	outcomes := e.verify()
	if outcomes["dropped"] == 0 || outcomes["503"] == 0 {
		t.Errorf("faults not exercised: %d answers dropped, %d 503s", outcomes["dropped"], outcomes["503"])
	}
}

// TestOrderServiceAMQPReceiverProcess is not a test: it is the receiver
// process of TestOrderServiceOverAMQPEndToEndWithFaults (the test binary
// run again, with ordersvctest.AMQPEnv set), ordersvctest.RunAMQP until
// killed.
func TestOrderServiceAMQPReceiverProcess(t *testing.T) {
	if os.Getenv(ordersvctest.AMQPEnv) == "" {
		return // a normal run of the tests: nothing to do
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ordersvctest.RunAMQP(ctx); err != nil {
		t.Fatal(err)
	}
}

// The same over RabbitMQ: lapse publishes its commands to the broker, and
// the receiver (ordersvc.ServeAMQP in a process of its own, on its own
// SQLite database) consumes the command queue and replies. The broker is a
// node of this test's own (rabbittest.StartNode), so that it can really
// restart mid-run — stopped (SIGTERM) and started again on its data:
// every connection cut, the durable command queue and its persistent
// messages recovered, the non-durable reply queues lost — while the other
// tests keep the machine's broker. Faults, in order: the receiver killed
// with commands in its hands and more waiting in the queue, then failing
// applies (requeued) and answers lost after the commit (requeued, answered
// from the stored answer); lapse SIGKILLed after the receiver applied a
// command, before its answer; the broker killed and restarted while
// deadlines keep falling due.
func TestOrderServiceOverAMQPEndToEndWithFaults(t *testing.T) {
	n := envInt(t, "LAPSE_E2E_ORDERSVC_AMQP_ORDERS", 600)
	node := rabbittest.StartNode(t)
	prefix := rabbittest.Name("orders")
	u, err := url.Parse(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery = url.Values{"prefix": {prefix}}.Encode()
	orderService := u.String()

	shop := ordersvctest.StartAMQP(t, ordersvctest.AMQPConfig{
		Command: []string{os.Args[0], "-test.run=^TestOrderServiceAMQPReceiverProcess$", "-test.count=1", "-test.timeout=10m"},
		URL:     orderService, Secrets: []string{e2eOrderServiceSecret},
		Env: []string{"SEED=25", "PAYING_RETRY_AFTER=1", "DROP_ANSWER_RATE=0.1"},
	})
	// Every command lapse publishes, seen on the broker by a queue of the
	// test's own (lost with the restart: a second one records after it).
	record := func() *rabbittest.Recorder {
		admin := rabbittest.AdminAt(t, node.URL)
		var q string
		rabbittest.Eventually(t, 30*time.Second, func() bool {
			ch, err := admin.Channel()
			if err != nil {
				return false
			}
			defer ch.Close()
			// The exchange is lapse's: bind once it has declared it.
			if err := ch.ExchangeDeclarePassive(prefix, "topic", true, false, false, false, nil); err != nil {
				return false
			}
			q = rabbittest.Queue(t, admin, nil, prefix, "order.*")
			return true
		}, func() string { return "lapse's exchange " + prefix + " never appeared on the broker" })
		return rabbittest.Record(t, admin, q)
	}
	published := []*rabbittest.Recorder{record()}

	// Commands expire in the queue after 3 s unanswered, and lapse sends
	// them again; a batch whose lapse died goes again after 5 s.
	e := newOrderServiceE2E(t, shop, orderService, "--order-service-timeout", "3s", "--order-service-lease", "5s")
	e.register(n, 10*time.Second, 20*time.Second)
	var restartedAt time.Time
	e.run([]ordersvcStep{
		{13 * time.Second, func(e *ordersvcE2E) { e.killShop() }}, // down for 4 s
		{17 * time.Second, func(e *ordersvcE2E) {
			e.restartShop(ordersvctest.Faults{Fail503Until: ordersvctest.Int(40)})
		}},
		{20 * time.Second, func(e *ordersvcE2E) {
			// The receiver commits the next command and holds its answer
			// while lapse dies.
			e.killLapse(shop.Hold(), shop.Release)
		}},
		{24 * time.Second, func(e *ordersvcE2E) {
			restartedAt = time.Now()
			took := node.Restart(t)
			t.Logf("broker stopped at %s, taking connections again %s later", restartedAt.Sub(e.start).Round(time.Millisecond), took.Round(time.Millisecond))
			published = append(published, record())
			// Settled: every order due before the restart has its final
			// answer, or paying (the shop's to decide).
			for due := 1; due > 0; time.Sleep(200 * time.Millisecond) {
				due = 0
				for _, o := range e.unsettled() {
					if o.Status != order.Paying && o.CancelAfter.Before(restartedAt) {
						due++
					}
				}
				if due > 0 && time.Since(restartedAt) > time.Minute {
					t.Fatalf("%d orders due before the broker restart not settled a minute after it", due)
				}
			}
			t.Logf("settled %s after the broker restart", time.Since(restartedAt).Round(time.Millisecond))
		}},
	})
	outcomes := e.verify()
	if outcomes["dropped"] == 0 || outcomes["failed"] == 0 {
		t.Errorf("faults not exercised: %d answers lost, %d applies failed", outcomes["dropped"], outcomes["failed"])
	}
	after := 0
	for _, d := range shop.Deliveries() {
		if d.ReceivedAtMs > restartedAt.UnixMilli() {
			after++
		}
	}
	if after == 0 {
		t.Error("no command reached the receiver after the broker restart")
	}
	// On the broker too, every command of one order carried one id.
	ids := map[string]map[string]bool{}
	var deliveries []amqp.Delivery
	for _, r := range published {
		deliveries = append(deliveries, r.Deliveries()...)
	}
	for _, d := range deliveries {
		var c struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(d.Body, &c); err != nil {
			t.Fatalf("a published command: %v", err)
		}
		if ids[c.OrderID] == nil {
			ids[c.OrderID] = map[string]bool{}
		}
		ids[c.OrderID][d.MessageId] = true
	}
	for id, set := range ids {
		if len(set) != 1 {
			t.Errorf("%s: published with %d message ids, want one", id, len(set))
		}
	}
	t.Logf("%d orders, %d commands published (%d after the restart), %d deliveries after the broker restart",
		n, len(deliveries), len(published[1].Deliveries()), after)
}
