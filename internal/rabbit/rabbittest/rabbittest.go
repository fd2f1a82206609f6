// Package rabbittest helps the tests of lapse's RabbitMQ code: the broker
// they run against, exchanges and queues of their own, a proxy that cuts
// connections, and a consumer that records what arrived.
//
// The broker is the one LAPSE_TEST_AMQP names; when the variable is
// unset the tests use the local one (amqp://guest:guest@127.0.0.1:5672/),
// and when it is set empty they are skipped, like lapse's other integration
// suites.
package rabbittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// Env names the broker's URL.
const Env = "LAPSE_TEST_AMQP"

// DefaultURL is the broker when Env is unset.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the broker's URL, or skips t when Env is set empty.
func URL(t testing.TB) string {
	t.Helper()
	u, set := os.LookupEnv(Env)
	switch {
	case !set:
		return DefaultURL
	case u == "":
		t.Skipf("%s is empty; set it to an amqp:// URL (or unset it for %s) to run", Env, DefaultURL)
	}
	return u
}

// Admin returns a connection straight to the broker, closed when t ends:
// for declaring, inspecting and recording, apart from the code under test.
func Admin(t testing.TB) *amqp.Connection {
	t.Helper()
	return AdminAt(t, URL(t))
}

// AdminAt is Admin on the broker at url (a Node's).
func AdminAt(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ (%s; start it with rabbitmq-server -detached): %v", Env, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on conn, closed when t ends.
func Channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// Name returns a name no other test uses: lapse-test-<what>-<random>.
func Name(what string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "lapse-test-" + what + "-" + hex.EncodeToString(b)
}

// Exchange declares a non-durable exchange of kind (topic, direct, …),
// deleted when t ends, and returns its name.
func Exchange(t testing.TB, conn *amqp.Connection, kind string) string {
	t.Helper()
	name := Name("x")
	ch := Channel(t, conn)
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange %s: %v", name, err)
	}
	DeleteExchangeAtEnd(t, conn, name)
	return name
}

// DeleteExchangeAtEnd deletes exchange name when t ends (one the code under
// test declared).
func DeleteExchangeAtEnd(t testing.TB, conn *amqp.Connection, name string) {
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(name, false, false)
			_ = ch.Close()
		}
	})
}

// Queue declares a queue with args, bound to exchange with each of keys
// (none: unbound), and returns its name. It is neither exclusive nor
// auto-delete, so it outlives a consumer's lost connection; it is deleted
// when t ends.
func Queue(t testing.TB, conn *amqp.Connection, args amqp.Table, exchange string, keys ...string) string {
	t.Helper()
	name := Name("q")
	ch := Channel(t, conn)
	if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		t.Fatalf("declare queue %s: %v", name, err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	for _, k := range keys {
		if err := ch.QueueBind(name, k, exchange, false, nil); err != nil {
			t.Fatalf("bind queue %s to %s with %q: %v", name, exchange, k, err)
		}
	}
	return name
}

// Recorder consumes a queue and keeps every delivery.
type Recorder struct {
	mu  sync.Mutex
	got []amqp.Delivery
}

// Record consumes queue on conn (auto-ack) until t ends.
func Record(t testing.TB, conn *amqp.Connection, queue string) *Recorder {
	t.Helper()
	ch := Channel(t, conn)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	r := &Recorder{}
	go func() {
		for d := range deliveries {
			r.mu.Lock()
			r.got = append(r.got, d)
			r.mu.Unlock()
		}
	}()
	return r
}

// Deliveries returns what arrived so far, in arrival order.
func (r *Recorder) Deliveries() []amqp.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]amqp.Delivery(nil), r.got...)
}

// IDs counts the arrivals of each message id.
func (r *Recorder) IDs() map[string]int {
	ids := map[string]int{}
	for _, d := range r.Deliveries() {
		ids[d.MessageId]++
	}
	return ids
}

// WaitIDs waits up to 20 s until every id in ids arrived at least once.
func (r *Recorder) WaitIDs(t testing.TB, ids []string) {
	t.Helper()
	var missing []string
	Eventually(t, 20*time.Second, func() bool {
		got := r.IDs()
		missing = missing[:0]
		for _, id := range ids {
			if got[id] == 0 {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	}, func() string {
		return fmt.Sprintf("%d of %d messages never arrived (e.g. %v)", len(missing), len(ids), missing[:min(3, len(missing))])
	})
}

// Eventually polls cond every 10 ms until it holds, and fails t with
// what() when it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Proxy is a TCP proxy (toxiproxy, in this process) between a client and
// the broker, which can cut every connection through it and slow the
// broker's answers.
type Proxy struct {
	// URL is the broker's URL pointing at the proxy.
	URL string

	server   *toxiproxy.ApiServer
	upstream string

	mu sync.Mutex
	p  *toxiproxy.Proxy
}

// NewProxy starts a proxy to the broker of rawURL, stopped when t ends.
func NewProxy(t testing.TB, rawURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("broker URL: %v", err)
	}
	p := &Proxy{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()), upstream: u.Host}
	if u.Port() == "" {
		p.upstream += ":5672"
	}
	p.start(t, "127.0.0.1:0")
	t.Cleanup(p.Cut)
	u.Host = p.p.Listen // the port it listens on
	p.URL = u.String()
	return p
}

func (p *Proxy) start(t testing.TB, listen string) {
	t.Helper()
	tp := toxiproxy.NewProxy(p.server, Name("proxy"), listen, p.upstream)
	if err := tp.Start(); err != nil {
		t.Fatalf("start proxy on %s: %v", listen, err)
	}
	p.mu.Lock()
	p.p = tp
	p.mu.Unlock()
}

func (p *Proxy) proxy() *toxiproxy.Proxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p
}

// Cut closes every connection through the proxy and refuses new ones until
// Restore, as a broker restart or a network partition would.
func (p *Proxy) Cut() { p.proxy().Stop() }

// Restore listens again after a Cut, on the same address, without the
// delay of Slow. (A fresh proxy: toxiproxy's removal of a toxic waits on
// the links a Cut closed.)
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	p.start(t, p.proxy().Listen)
}

// Slow delays the broker's answers (confirms, deliveries) by d on the
// connections through the proxy, existing and new, until Fast or a Cut.
func (p *Proxy) Slow(t testing.TB, d time.Duration) {
	t.Helper()
	toxic := fmt.Sprintf(`{"name": "latency", "type": "latency", "stream": "downstream", "attributes": {"latency": %d}}`, d.Milliseconds())
	if _, err := p.proxy().Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		t.Fatalf("slow proxy: %v", err)
	}
}

// Throttle limits what clients send the broker through the proxy to kbps
// kilobytes a second, on existing and new connections, until a Cut: a
// large batch then trickles in, and the broker confirms its first messages
// while the rest are still on their way.
func (p *Proxy) Throttle(t testing.TB, kbps int) {
	t.Helper()
	toxic := fmt.Sprintf(`{"name": "bandwidth", "type": "bandwidth", "stream": "upstream", "attributes": {"rate": %d}}`, kbps)
	if _, err := p.proxy().Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		t.Fatalf("throttle proxy: %v", err)
	}
}

// Fast undoes Slow, on a proxy that was not cut since.
func (p *Proxy) Fast(t testing.TB) {
	t.Helper()
	if err := p.proxy().Toxics.RemoveToxic(context.Background(), "latency"); err != nil {
		t.Fatalf("unslow proxy: %v", err)
	}
}

// DeleteAtEnd deletes exchanges and queues when t ends, on a connection
// of its own (the test may have restarted the broker): those the code
// under test declared, durable ones above all.
func DeleteAtEnd(t testing.TB, exchanges, queues []string) {
	t.Helper()
	url := URL(t)
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range exchanges {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
}
