package rabbittest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Node is a RabbitMQ broker of one test's own: a node of the machine's
// rabbitmq-server (the Debian package CI installs) on ports and a data
// directory of its own, so that the test can really restart it — the
// process killed, its queues and messages recovered from disk — while the
// other tests keep the machine's broker.
type Node struct {
	// URL is the node's amqp:// URL (guest, from loopback).
	URL string

	dir, name string
	port      int
	distPort  int
	cmd       *exec.Cmd
}

// StartNode starts a node and waits until it takes connections; it is
// killed, and its data removed, when t ends.
func StartNode(t testing.TB) *Node {
	t.Helper()
	bin, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/rabbitmq-server"); serr != nil {
			t.Fatalf("rabbitmq-server not found (apt-get install rabbitmq-server): %v", err)
		}
		bin = "/usr/sbin/rabbitmq-server"
	}
	dir, err := os.MkdirTemp("", "lapse-rabbit-node-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &Node{dir: dir, name: "lapsetest-" + hex.EncodeToString(b) + "@localhost", port: freePort(t), distPort: freePort(t)}
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port)
	// Run as root, rabbitmq-server drops to the rabbitmq user: the data
	// directory must be that user's.
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("rabbitmq"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := os.Chown(dir, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		n.stop(syscall.SIGKILL, 30*time.Second)
		_ = os.RemoveAll(dir)
	})
	n.start(t, bin)
	return n
}

func (n *Node) env() []string {
	return append(os.Environ(),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
	)
}

func (n *Node) start(t testing.TB, bin string) {
	t.Helper()
	_ = os.Remove(filepath.Join(n.dir, "pid"))
	out, err := os.Create(filepath.Join(os.TempDir(), filepath.Base(n.dir)+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	n.cmd = exec.Command(bin)
	n.cmd.Env = n.env()
	n.cmd.Stdout, n.cmd.Stderr = out, out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func(c *exec.Cmd) { _ = c.Wait() }(n.cmd)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if conn, err := amqp.Dial(n.URL); err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("RabbitMQ node %s did not take connections within 90 s:\n%s", n.name, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Restart stops the node's broker (SIGTERM, as `rabbitmqctl stop` or a
// service manager's restart does: the broker closes every connection and
// writes its state out) and starts it again on the same data, returning
// once it takes connections. Every connection is cut; durable queues and
// the persistent messages they held come back, non-durable ones do not.
// (SIGKILL is not used: RabbitMQ may lose a queue declared a moment before
// a kill — its metadata not yet on disk — which is RabbitMQ's to answer
// for, not what lapse's tests are about.)
func (n *Node) Restart(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	n.stop(syscall.SIGTERM, 60*time.Second)
	bin := n.cmd.Path
	n.start(t, bin)
	return time.Since(start)
}

// stop sends sig to the broker (its beam process, named in the pid file)
// and waits until its port is closed, at most within; then it is killed.
func (n *Node) stop(sig syscall.Signal, within time.Duration) {
	pid := 0
	if b, err := os.ReadFile(filepath.Join(n.dir, "pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid > 0 {
		_ = syscall.Kill(pid, sig)
	}
	closed := func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if closed() && (pid <= 0 || syscall.Kill(pid, 0) != nil) {
			break
		}
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !closed(); time.Sleep(50 * time.Millisecond) {
	}
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
