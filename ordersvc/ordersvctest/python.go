// Package ordersvctest runs order services for tests of lapse's
// order-service mode: the reference Python receiver
// (ordersvc/testdata/receiver.py, Python 3's standard library and its own
// SQLite database) as another process, with its fault switches and the
// test routes that read what it applied. A test that needs it fails —
// never skips — when python3 is missing.
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
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Path is where a command (POST) and a status request (GET ?order_id=) go
// on the Python receiver.
const Path = "/lapse"

// startTimeout bounds how long the receiver may take to listen: generous,
// for a loaded machine.
const startTimeout = 30 * time.Second

// PythonConfig is how to run the Python receiver.
type PythonConfig struct {
	// Secrets are the whsec_ secrets it verifies with (LAPSE_SECRETS).
	// Required.
	Secrets []string
	// DB is its SQLite file; empty means a file in t.TempDir(). The file
	// outlives Kill, so Restart finds the orders where they were.
	DB string
	// Env adds environment variables: the fault switches FAIL_503_UNTIL,
	// DROP_ANSWER_RATE, SEED, and PAYING_RETRY_AFTER, TOLERANCE_SECONDS
	// (see receiver.py). Faults can also be changed while it runs, with
	// SetFaults.
	Env []string
}

// Python is a running Python receiver.
type Python struct {
	// URL is its command URL, for lapse's --order-service.
	URL string
	// Base is scheme://host:port, for the test routes.
	Base string

	t      testing.TB
	cfg    PythonConfig
	port   string
	client *http.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	stderr *lockedBuffer
}

// StartPython starts the Python receiver and waits until it listens; it
// is killed when the test ends.
func StartPython(t testing.TB, cfg PythonConfig) *Python {
	t.Helper()
	if len(cfg.Secrets) == 0 {
		t.Fatal("ordersvctest: StartPython without secrets")
	}
	if cfg.DB == "" {
		cfg.DB = filepath.Join(t.TempDir(), "receiver.db")
	}
	p := &Python{t: t, cfg: cfg, port: "0", client: &http.Client{Timeout: 30 * time.Second}}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("python receiver's stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// Script is the path of receiver.py.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "receiver.py")
}

func (p *Python) start() {
	t := p.t
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("ordersvctest: the Python receiver needs python3 on PATH: %v", err)
	}
	cmd := exec.Command(python, Script())
	cmd.Env = append(os.Environ(),
		"LAPSE_SECRETS="+strings.Join(p.cfg.Secrets, " "),
		"RECEIVER_DB="+p.cfg.DB,
		"HOST=127.0.0.1",
		"PORT="+p.port,
		"RECEIVER_PATH="+Path,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	cmd.Env = append(cmd.Env, p.cfg.Env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("ordersvctest: start python3 %s: %v", Script(), err)
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
		p.Base, p.URL = a, a+Path
		p.port = a[strings.LastIndex(a, ":")+1:]
	case <-done:
		t.Fatalf("ordersvctest: the Python receiver exited before listening:\n%s", stderr.String())
	case <-time.After(startTimeout):
		p.Kill()
		t.Fatalf("ordersvctest: the Python receiver did not listen within %s:\n%s", startTimeout, stderr.String())
	}
}

// Kill kills the receiver (SIGKILL) and waits for it to exit: it is down
// until Restart.
func (p *Python) Kill() {
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
func (p *Python) Restart() {
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
	Attempt      string `json:"attempt"` // the lapse-attempt header
	CancelAfter  string `json:"cancel_after"`
	ReceivedAtMs int64  `json:"received_at_ms"`
	// Outcome is the result answered, "503", or "dropped" (applied, then
	// the connection closed without an answer).
	Outcome string `json:"outcome"`
}

// Faults are the receiver's fault switches; nil leaves one as it is.
type Faults struct {
	// Fail503Until answers the next N verified commands 503.
	Fail503Until *int `json:"fail_503_until,omitempty"`
	// DropAnswerRate drops this share of answers after applying.
	DropAnswerRate *float64 `json:"drop_answer_rate,omitempty"`
}

// Seed inserts orders, or overwrites their status: paying a pending order
// at the shop without telling lapse is Seed(Order{id, "paid"}).
func (p *Python) Seed(orders ...Order) {
	p.t.Helper()
	p.do(http.MethodPost, "/seed", orders, nil)
}

// SetFaults changes the fault switches.
func (p *Python) SetFaults(f Faults) {
	p.t.Helper()
	p.do(http.MethodPost, "/faults", f, nil)
}

// Orders returns every order's status by id.
func (p *Python) Orders() map[string]string {
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
func (p *Python) Applied() []Applied {
	p.t.Helper()
	var list []Applied
	p.do(http.MethodGet, "/applied", nil, &list)
	return list
}

// Deliveries returns every verified command delivery, in order.
func (p *Python) Deliveries() []Delivery {
	p.t.Helper()
	var list []Delivery
	p.do(http.MethodGet, "/deliveries", nil, &list)
	return list
}

func (p *Python) do(method, path string, in, out any) {
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
