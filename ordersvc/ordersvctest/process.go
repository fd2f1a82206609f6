// Package ordersvctest runs order services for tests of lapse's
// order-service mode as processes of their own, each with its own SQLite
// database: the reference Python receiver (ordersvc/testdata/receiver.py,
// Python 3's standard library, over HTTP) and a Go receiver over RabbitMQ
// (ordersvc.ServeAMQP around the same database, see RunAMQP). Both have
// the same fault switches and the same test routes that read what they
// applied, so one end-to-end scenario runs against either. A test that
// needs python3 fails — never skips — when it is missing.
package ordersvctest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long a receiver may take to listen: generous,
// for a loaded machine.
const startTimeout = 30 * time.Second

// Process is a running receiver, Python or Go: killed, restarted, seeded
// and read through its test routes.
type Process struct {
	// URL is its command URL, for lapse's --order-service (HTTP only).
	URL string
	// Base is scheme://host:port, for the test routes.
	Base string

	t      testing.TB
	name   string
	argv   []string
	env    []string
	path   string // the command route ("" over AMQP)
	port   string
	client *http.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	stderr *lockedBuffer
}

// startProcess runs argv with the receivers' common environment and waits
// until it says where it listens; it is killed when the test ends.
func startProcess(t testing.TB, name string, argv, secrets []string, db string, env []string, path string) *Process {
	t.Helper()
	if db == "" {
		db = filepath.Join(t.TempDir(), "receiver.db")
	}
	env = append([]string{secretsEnv(secrets), "RECEIVER_DB=" + db, "HOST=127.0.0.1"}, env...)
	p := &Process{t: t, name: name, argv: argv, env: env, path: path, port: "0", client: &http.Client{Timeout: 30 * time.Second}}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s's stderr:\n%s", p.name, p.stderr.String())
		}
	})
	return p
}

func (p *Process) start() {
	t := p.t
	t.Helper()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(append(os.Environ(), p.env...), "PORT="+p.port)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("ordersvctest: start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.stderr = cmd, done, stderr
	p.mu.Unlock()

	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-addr:
		p.Base = a
		if p.path != "" {
			p.URL = a + p.path
		}
		p.port = a[strings.LastIndex(a, ":")+1:]
	case <-done:
		t.Fatalf("ordersvctest: the %s exited before listening:\n%s", p.name, stderr.String())
	case <-time.After(startTimeout):
		p.Kill()
		t.Fatalf("ordersvctest: the %s did not listen within %s:\n%s", p.name, startTimeout, stderr.String())
	}
}

// Kill kills the receiver (SIGKILL) and waits for it to exit: it is down
// until Restart.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the receiver again after Kill, on the same port and
// database.
func (p *Process) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// Order is an order in the receiver's database.
type Order struct {
	ID     string `json:"id"`
	Status string `json:"status"` // pending, paying, paid, cancelled
}

// Applied is a command whose conditional update cancelled its order.
type Applied struct {
	CommandID string `json:"command_id"`
	OrderID   string `json:"order_id"`
	AtMs      int64  `json:"at_ms"`
}

// Delivery is a verified, valid command as it arrived.
type Delivery struct {
	WebhookID    string `json:"webhook_id"`
	OrderID      string `json:"order_id"`
	Attempt      string `json:"attempt"` // the lapse-attempt header (HTTP only)
	CancelAfter  string `json:"cancel_after"`
	ReceivedAtMs int64  `json:"received_at_ms"`
	// Outcome is the result answered; "503" (HTTP) or "failed" (AMQP: the
	// apply failed, the command was requeued), nothing applied; or
	// "dropped": applied, then the answer lost (HTTP: the connection closed
	// without an answer; AMQP: the apply failed after its commit, and the
	// command was requeued, to be answered from what was stored).
	Outcome string `json:"outcome"`
}

// Faults are the receiver's fault switches; nil leaves one as it is.
type Faults struct {
	// Fail503Until fails the next N verified commands, applying nothing:
	// answered 503 over HTTP, requeued by a failed apply over AMQP.
	Fail503Until *int `json:"fail_503_until,omitempty"`
	// DropAnswerRate drops this share of answers after applying.
	DropAnswerRate *float64 `json:"drop_answer_rate,omitempty"`
}

// Hold arms the receiver to hold the next command it applies once the
// apply is committed, before answering it, and waits until one is held
// (25 s at most); it returns the held command's id. The answer goes once
// Release is called: a test kills lapse in between, so that lapse dies
// between sending the command and recording its answer. Over AMQP only
// (over HTTP a proxy in front of the receiver holds the answer).
func (p *Process) Hold() string {
	p.t.Helper()
	var held struct {
		CommandID string `json:"command_id"`
	}
	p.do(http.MethodPost, "/hold", nil, &held)
	return held.CommandID
}

// Release lets the held command's answer go.
func (p *Process) Release() {
	p.t.Helper()
	p.do(http.MethodPost, "/release", nil, nil)
}

// Seed inserts orders, or overwrites their status: paying a pending order
// at the shop without telling lapse is Seed(Order{id, "paid"}).
func (p *Process) Seed(orders ...Order) {
	p.t.Helper()
	p.do(http.MethodPost, "/seed", orders, nil)
}

// SetFaults changes the fault switches.
func (p *Process) SetFaults(f Faults) {
	p.t.Helper()
	p.do(http.MethodPost, "/faults", f, nil)
}

// Orders returns every order's status by id.
func (p *Process) Orders() map[string]string {
	p.t.Helper()
	var list []Order
	p.do(http.MethodGet, "/orders", nil, &list)
	m := make(map[string]string, len(list))
	for _, o := range list {
		m[o.ID] = o.Status
	}
	return m
}

// Applied returns the commands that cancelled an order, in order.
func (p *Process) Applied() []Applied {
	p.t.Helper()
	var list []Applied
	p.do(http.MethodGet, "/applied", nil, &list)
	return list
}

// Deliveries returns every verified command delivery, in order.
func (p *Process) Deliveries() []Delivery {
	p.t.Helper()
	var list []Delivery
	p.do(http.MethodGet, "/deliveries", nil, &list)
	return list
}

func (p *Process) do(method, path string, in, out any) {
	p.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			p.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, p.Base+path, body)
	if err != nil {
		p.t.Fatal(err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("ordersvctest: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("ordersvctest: %s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("ordersvctest: %s %s: %v in %s", method, path, err, b)
		}
	}
}

// Int makes a Faults pointer.
func Int(n int) *int { return &n }

// Float makes a Faults pointer.
func Float(f float64) *float64 { return &f }

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
