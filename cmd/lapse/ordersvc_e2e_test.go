package main

// End to end in order-service mode: `lapse serve --order-service` on
// PostgreSQL and the reference Python receiver (ordersvc/testdata, its own
// SQLite database) as real processes. The receiver owns the orders; lapse
// holds their deadlines. Faults on the way: the receiver down for a while,
// answering 503, dropping answers after applying them, and lapse SIGKILLed
// between sending a command and recording its answer. What the test checks:
// every order ends the same in both places, no cancel is applied twice, no
// command arrives before its cancel_after, every delivery of one order
// carries one webhook-id, and lapse audit passes.
//
// Sizes (environment):
//
//	LAPSE_E2E_ORDERSVC_ORDERS  orders of the run (default 1000)

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc/ordersvctest"
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

	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	secretPath := filepath.Join(t.TempDir(), "order-service.secret")
	if err := os.WriteFile(secretPath, []byte(e2eOrderServiceSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--store", storeURL, "--grace", "0", "--order-service", ps.URL + "/lapse",
		"--order-service-secret-file", secretPath, "--order-service-lease", "2s", "--order-service-max-attempts", "1000", "--order-service-retry-max", "2s"}
	srv := startServe(t, nil, args...)
	api := srv.api()
	ctx := context.Background()

	// The shop's orders, then their deadlines at lapse: 4 s to 20 s out.
	// 30% are paid at the shop before their deadline without telling lapse;
	// 10% have a payment in flight (paying), paid once lapse has asked.
	py.SetFaults(ordersvctest.Faults{DropAnswerRate: ordersvctest.Float(0.1)})
	kind := func(i int) string {
		switch {
		case i%10 < 3:
			return "paid"
		case i%10 == 3:
			return "paying"
		}
		return "pending"
	}
	ids := make([]string, n)
	seed := make([]ordersvctest.Order, n)
	for i := range n {
		ids[i] = fmt.Sprintf("shop-%04d", i)
		seed[i] = ordersvctest.Order{ID: ids[i], Status: "pending"}
	}
	py.Seed(seed...)
	// Deadlines 10 s to 30 s after the start, whatever the registration
	// costs: 8 registrations at once.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				due := start.Add(10*time.Second + time.Duration(i)*20*time.Second/time.Duration(n))
				timeout := max(time.Until(due), 100*time.Millisecond)
				if _, err := api.CreateOrder(ctx, client.CreateOrder{ID: ids[i], AmountCents: 1999, Currency: "EUR", Timeout: timeout}); err != nil {
					errs <- fmt.Errorf("register %s: %w", ids[i], err)
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
	var atShop []ordersvctest.Order
	for i, id := range ids {
		if k := kind(i); k != "pending" {
			atShop = append(atShop, ordersvctest.Order{ID: id, Status: k})
		}
	}
	py.Seed(atShop...)
	t.Logf("registered %d orders in %s", n, time.Since(start).Round(time.Millisecond))

	final := func(st order.Status) bool { return st == order.Cancelled || st == order.Paid }
	flipped := map[string]bool{}
	var lastLook time.Time
	down, up, killed := false, false, false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		el := time.Since(start)
		switch {
		case !down && el > 13*time.Second:
			py.Kill() // the receiver is down for 5 s
			down = true
		case down && !up && el > 18*time.Second:
			py.Restart()
			py.SetFaults(ordersvctest.Faults{Fail503Until: ordersvctest.Int(40), DropAnswerRate: ordersvctest.Float(0.1)})
			up = true
		case up && !killed && el > 20*time.Second:
			proxy.mu.Lock()
			proxy.armed = true
			proxy.mu.Unlock()
			select {
			case id := <-proxy.held:
				// lapse sent the command and the receiver applied it: lapse
				// dies before it hears the answer.
				_ = srv.cmd.Process.Kill()
				<-srv.done
				close(proxy.free)
				t.Logf("lapse killed holding the answer to %s at %s", id, time.Since(start).Round(time.Millisecond))
				srv = startServe(t, nil, args...)
				api = srv.api()
			case <-time.After(30 * time.Second):
				t.Fatal("no command reached the proxy to hold")
			}
			killed = true
		}
		// A payment in flight at the shop succeeds once lapse has asked
		// (looked at every 2 s: the receiver is a busy Python process).
		if len(flipped) < n/10 && time.Since(lastLook) > 2*time.Second && !(down && !up) {
			lastLook = time.Now()
			var paid []ordersvctest.Order
			for _, d := range py.Deliveries() {
				if d.Outcome == "paying" && !flipped[d.OrderID] {
					paid = append(paid, ordersvctest.Order{ID: d.OrderID, Status: "paid"})
					flipped[d.OrderID] = true
				}
			}
			if len(paid) > 0 {
				py.Seed(paid...)
			}
		}
		if killed {
			left := 0
			for _, st := range []order.Status{order.Pending, order.Paying, order.Cancelling} {
				page, err := api.ListOrders(ctx, client.ListOrders{Status: st, Limit: 500})
				if err != nil {
					t.Fatalf("list %s orders: %v", st, err)
				}
				left += len(page.Orders)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				by := map[order.Status]int{}
				var sample []string
				for _, id := range ids {
					if o, err := api.GetOrder(ctx, id); err == nil {
						by[o.Status]++
						if !final(o.Status) && len(sample) < 5 {
							sample = append(sample, fmt.Sprintf("%s %s cancel_after %s", id, o.Status, o.CancelAfter.Format(time.RFC3339Nano)))
						}
					}
				}
				t.Fatalf("%d orders not final at lapse after %s: %v, e.g. %v", left, time.Since(start).Round(time.Second), by, sample)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("every order final at lapse after %s", time.Since(start).Round(time.Millisecond))

	shop := py.Orders()
	counts := map[string]int{}
	for _, id := range ids {
		o := must(api.GetOrder(ctx, id))(t)
		want := map[string]order.Status{"cancelled": order.Cancelled, "paid": order.Paid}[shop[id]]
		if o.Status != want {
			t.Errorf("%s: lapse %s, the shop %s", id, o.Status, shop[id])
		}
		if o.Status == order.Cancelled && o.CancelReason != order.ReasonTimeout {
			t.Errorf("%s: cancelled by %s", id, o.CancelReason)
		}
		counts[string(o.Status)]++
	}
	t.Logf("final: %v (paying orders flipped: %d)", counts, len(flipped))
	applied := map[string]int{}
	for _, a := range py.Applied() {
		applied[a.OrderID]++
	}
	for id, k := range applied {
		if k != 1 {
			t.Errorf("%s: cancelled %d times at the shop", id, k)
		}
	}
	webhookIDs := map[string]map[string]bool{}
	dropped, fail503 := 0, 0
	for _, d := range py.Deliveries() {
		ca, err := time.Parse(time.RFC3339Nano, d.CancelAfter)
		if err != nil {
			t.Fatalf("delivery %+v: cancel_after: %v", d, err)
		}
		if d.ReceivedAtMs < ca.UnixMilli() {
			t.Errorf("%s: command received at %d, before cancel_after %s", d.OrderID, d.ReceivedAtMs, d.CancelAfter)
		}
		if webhookIDs[d.OrderID] == nil {
			webhookIDs[d.OrderID] = map[string]bool{}
		}
		webhookIDs[d.OrderID][d.WebhookID] = true
		switch d.Outcome {
		case "dropped":
			dropped++
		case "503":
			fail503++
		}
	}
	for id, set := range webhookIDs {
		if len(set) != 1 {
			t.Errorf("%s: %d webhook-ids over its deliveries, want one", id, len(set))
		}
	}
	if dropped == 0 || fail503 == 0 {
		t.Errorf("faults not exercised: %d answers dropped, %d 503s", dropped, fail503)
	}
	t.Logf("deliveries: %d orders, %d answers dropped, %d 503s", len(webhookIDs), dropped, fail503)
	srv.stop()
	if out, code := lapseCmd(t, nil, "audit", "--store", storeURL); code != 0 {
		t.Fatalf("audit after the run (exit %d):\n%s", code, out)
	}
}
