package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// testWebhookSecret is a whsec_ secret of 32 bytes, for tests only.
const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is a webhook endpoint that verifies every request with the
// Standard Webhooks library and records what arrived, in arrival order.
type receiver struct {
	t   *testing.T
	wh  *standardwebhooks.Webhook
	srv *httptest.Server

	mu      sync.Mutex
	status  int // what to answer; 0: 204
	arrived []outbox.Envelope
	bad     int
	// onFirst, when set, runs once after the first event is recorded and
	// before it is answered (without the lock).
	onFirst func()
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, wh: wh}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if r.status != 0 {
		w.WriteHeader(r.status)
		return
	}
	var env outbox.Envelope
	if err := json.Unmarshal(body, &env); err != nil || req.Header.Get("webhook-id") != env.ID {
		r.bad++
		http.Error(w, "not an envelope, or webhook-id is not the event id", http.StatusBadRequest)
		return
	}
	r.arrived = append(r.arrived, env)
	if f := r.onFirst; f != nil {
		r.onFirst = nil
		r.mu.Unlock()
		f()
		r.mu.Lock()
	}
	w.WriteHeader(204)
}

func (r *receiver) answer(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

func (r *receiver) url() string { return r.srv.URL + "/hooks/lapse" }

// events returns what arrived.
func (r *receiver) events() []outbox.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Envelope(nil), r.arrived...)
}

// waitDistinct waits until n distinct event ids arrived.
func (r *receiver) waitDistinct(n int, within time.Duration) []outbox.Envelope {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		evs := r.events()
		ids := map[string]bool{}
		for _, e := range evs {
			ids[e.ID] = true
		}
		if len(ids) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d distinct events arrived in %s, want %d", len(ids), within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rank orders an order's event types.
var rank = map[string]int{"order.created": 0, "order.paid": 1, "order.cancelled": 1, "order.refund_required": 2}

// checkArrivals checks that every order's events arrived in their order
// (a repeat of an event is allowed, an older event after a newer one is
// not) and returns how many arrivals were repeats.
func checkArrivals(t *testing.T, evs []outbox.Envelope) (duplicates int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, e := range evs {
		if seen[e.ID] {
			duplicates++
		}
		seen[e.ID] = true
		r, ok := rank[e.Type]
		if !ok {
			t.Errorf("unknown event type %q", e.Type)
		}
		if prev, ok := last[e.OrderID]; ok && r < prev {
			t.Errorf("order %s: %s arrived after a later event", e.OrderID, e.Type)
		}
		last[e.OrderID] = max(last[e.OrderID], r)
		var data struct {
			SchemaVersion int    `json:"schema_version"`
			ID            string `json:"id"`
		}
		if err := json.Unmarshal(e.Data, &data); err != nil || data.SchemaVersion != 1 || data.ID != e.OrderID {
			t.Errorf("event %s data %s: want schema_version 1 and the order", e.ID, e.Data)
		}
	}
	return duplicates
}

func relayArgs(storeURL string, rcv *receiver, extra ...string) []string {
	return append([]string{"--store", storeURL, "--timers", "sql", "--grace", "0s", "--no-migrate",
		"--sink", rcv.url(), "--webhook-secret", testWebhookSecret, "--outbox-lease", "2s"}, extra...)
}

// Three lapse serve on one PostgreSQL share the outbox: every event is
// delivered once (no faults: no duplicates) and each order's in order.
func TestThreeInstancesRelayEveryEventOnce(t *testing.T) {
	t.Parallel()
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	rcv := newReceiver(t)
	var servers []*server
	for range 3 {
		servers = append(servers, startServe(t, nil, relayArgs(storeURL, rcv)...))
	}
	must(servers[0].api().SetStock(t.Context(), "hot", 1000))(t)
	const orders = 300
	placeOrders(t, servers, "r", orders, time.Now().Add(placeAhead+time.Second), 2*time.Second)
	// A third cancelled by the buyer, the rest by timeout. On a loaded
	// machine a buyer's cancel can come after its order's deadline: the
	// timer cancelled it, which writes the same two events.
	late := 0
	for i := 0; i < orders; i += 3 {
		_, err := servers[i%3].api().Cancel(t.Context(), fmt.Sprintf("r-%03d", i))
		if errors.Is(err, client.ErrOrderNotPending) {
			late++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if late > 0 {
		t.Logf("%d buyer cancels came after the order's deadline", late)
	}
	evs := rcv.waitDistinct(2*orders, 60*time.Second)
	if d := checkArrivals(t, evs); d != 0 {
		t.Errorf("%d duplicates without any fault, want 0", d)
	}
	for _, s := range servers {
		s.stop()
	}
	if len(rcv.events()) != 2*orders {
		t.Fatalf("%d arrivals, want %d", len(rcv.events()), 2*orders)
	}
	if rcv.bad != 0 {
		t.Fatalf("%d requests failed signature or shape checks", rcv.bad)
	}
}

// An instance killed between publishing an event and marking it: the
// receiver has the event, the store does not know. When the claim's lease
// ends the other instances publish it again with the same id; nothing is
// lost and no order's events are reordered.
func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	storeURL := postgresURL(t)
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	rcv := newReceiver(t)
	victim := startServe(t, nil, relayArgs(storeURL, rcv)...)
	placed, killed := make(chan struct{}), make(chan struct{})
	rcv.mu.Lock()
	rcv.onFirst = func() {
		<-placed // the victim's relay waits on this answer while orders are placed
		_ = victim.cmd.Process.Kill()
		<-victim.done
		close(killed)
	}
	rcv.mu.Unlock()
	must(victim.api().SetStock(t.Context(), "hot", 1000))(t)
	const orders = 100
	placeOrders(t, []*server{victim}, "k", orders, time.Now().Add(3*time.Second), time.Second)
	close(placed)
	<-killed
	first := rcv.events()[0]
	others := []*server{startServe(t, nil, relayArgs(storeURL, rcv)...), startServe(t, nil, relayArgs(storeURL, rcv)...)}
	evs := rcv.waitDistinct(2*orders, 60*time.Second)
	d := checkArrivals(t, evs)
	again := 0
	for _, e := range evs {
		if e.ID == first.ID {
			again++
		}
	}
	if again < 2 {
		t.Fatalf("the event published before the kill (%s) arrived %d times: want it again, with its id", first.ID, again)
	}
	t.Logf("%d arrivals of %d events, %d duplicates (the victim's batch in flight)", len(evs), 2*orders, d)
	for _, s := range others {
		s.stop()
	}
}

// A webhook that answers 500 for a while gets its events once it recovers;
// one that answers 400 makes them dead, and `lapse events retry` sends them.
func TestWebhookOutageAndDeadLetters(t *testing.T) {
	t.Parallel()
	storeURL := "sqlite://" + t.TempDir() + "/w.db"
	if out, code := lapseCmd(t, nil, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: %s", out)
	}
	rcv := newReceiver(t)
	s := startServe(t, nil, relayArgs(storeURL, rcv)...)
	c := s.api()
	must(c.SetStock(t.Context(), "a", 100))(t)

	rcv.answer(500)
	must(c.CreateOrder(t.Context(), client.CreateOrder{ID: "down-1", Items: []order.Item{{SKU: "a", Qty: 1}}, AmountCents: 100}))(t)
	time.Sleep(30 * time.Second) // the outage the issue names: refused for 30 s
	rcv.answer(0)
	got := rcv.waitDistinct(1, 90*time.Second)
	if got[0].OrderID != "down-1" {
		t.Fatalf("after the outage: %+v", got)
	}

	rcv.answer(400)
	must(c.CreateOrder(t.Context(), client.CreateOrder{ID: "bad-1", Items: []order.Item{{SKU: "a", Qty: 1}}, AmountCents: 100}))(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, code := lapseCmd(t, nil, "events", "list", "--dead", "--store", storeURL)
		if code == 0 && strings.Contains(out, "bad-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 400 did not make the event dead in 30 s: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rcv.answer(0)
	if out, code := lapseCmd(t, nil, "events", "retry", "--dead", "--store", storeURL); code != 0 {
		t.Fatalf("events retry: exit %d: %s", code, out)
	}
	evs := rcv.waitDistinct(2, 30*time.Second)
	if last := evs[len(evs)-1]; last.OrderID != "bad-1" {
		t.Fatalf("after the retry: %+v", evs)
	}
	s.stop()
}
