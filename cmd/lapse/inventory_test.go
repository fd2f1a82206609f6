package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
)

// inventoryProc is a running `lapse inventory` process.
type inventoryProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs *syncBuffer
	url  string
}

func startInventory(t *testing.T, args ...string) *inventoryProc {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(binary, append([]string{"inventory", "--listen", addr}, args...)...)
	logs := &syncBuffer{}
	cmd.Stderr, cmd.Stdout = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &inventoryProc{t: t, cmd: cmd, logs: logs, url: "http://" + addr}
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
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("lapse inventory did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call sends a request and returns the status and body.
func (p *inventoryProc) call(method, path, body string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and wants exit status 0.
func (p *inventoryProc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Fatalf("lapse inventory after SIGTERM: %v\n%s", err, p.logs.String())
		}
	case <-time.After(15 * time.Second):
		p.t.Fatalf("lapse inventory still running 15 s after SIGTERM\n%s", p.logs.String())
	}
}

// lapse inventory serves the reference API with the switches of its flags,
// changed at runtime, and comes back on its store after a stop.
func TestInventoryCommand(t *testing.T) {
	t.Parallel()
	storeURL := "sqlite://" + filepath.Join(t.TempDir(), "inv.db")
	p := startInventory(t, "--store", storeURL, "--fail")
	if status, body := p.call("PUT", "/skus/tee", `{"available": 3}`); status != 200 {
		t.Fatalf("PUT /skus/tee: %d %s", status, body)
	}
	c := inventory.NewHTTPClient(p.url)
	defer c.Close()
	reserve := inventory.Command{TaskID: "t1", Action: inventory.Reserve, ReservationID: "r1", OrderID: "o1", Items: []inventory.Item{{SKU: "tee", Qty: 2}}}
	if ans, err := c.Send(context.Background(), reserve); err == nil {
		t.Fatalf("with --fail: answered %+v, want an error", ans)
	}
	if status, body := p.call("POST", "/faults", `{"fail": false}`); status != 200 || !strings.Contains(body, `"fail":false`) {
		t.Fatalf("POST /faults: %d %s", status, body)
	}
	if ans, err := c.Send(context.Background(), reserve); err != nil || ans.Result != inventory.Success {
		t.Fatalf("reserve: %+v %v", ans, err)
	}
	p.stop()

	// The inventory comes back with its store: the reserve is a duplicate.
	p = startInventory(t, "--store", storeURL, "--allow-host", "inv.test")
	c2 := inventory.NewHTTPClient(p.url)
	defer c2.Close()
	if ans, err := c2.Send(context.Background(), reserve); err != nil || ans.Result != inventory.AlreadyDone {
		t.Fatalf("reserve after the restart: %+v %v", ans, err)
	}
	if status, body := p.call("GET", "/skus/tee", ""); status != 200 || body != `{"sku":"tee","available":1,"reserved":2,"sold":0}`+"\n" {
		t.Fatalf("GET /skus/tee: %d %s", status, body)
	}
	// Its API answers the names it is given, and refuses others (a name
	// re-pointed at it) and what a page of another site sends.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "http://"))
	for _, c := range []struct {
		host, contentType string
		want              int
	}{{"inv.test:" + port, "application/json", 200}, {"evil.test:" + port, "application/json", 403}, {"", "text/plain", 415}} {
		req, _ := http.NewRequest("POST", p.url+"/faults", strings.NewReader(`{"fail": true}`))
		req.Header.Set("Content-Type", c.contentType)
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("POST /faults with Host %q, %s: %d, want %d", c.host, c.contentType, resp.StatusCode, c.want)
		}
	}
	p.stop()
}

// What lapse inventory refuses to start with.
func TestInventoryCommandRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0", "--store", "sqlite://:memory:"}, 2, "--allow-public"},
		{[]string{"--listen", "127.0.0.1:0", "--store", "mysql://u:hunter2@h/db"}, 1, "unsupported scheme"},
		{[]string{"--listen", "127.0.0.1:0", "--store", "sqlite://" + dir}, 1, "--store"},
	}
	for _, c := range cases {
		out, code := lapseRun(t, 15*time.Second, nil, append([]string{"inventory"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.want) || strings.Contains(out, "hunter2") {
			t.Errorf("lapse inventory %s: exit %d, want %d and %q:\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
	}
}
