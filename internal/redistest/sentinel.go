// Package redistest starts Redis servers of a test's own, so that a test can
// really fail them — a master SIGKILLed, a replica promoted by Sentinel —
// while the other tests keep the machine's Redis.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels monitor the master by.
const MasterName = "lapsetest"

// Sentinel is a master, one replica of it and three sentinels watching them,
// each a redis-server process on a loopback port of its own, without
// persistence. The sentinels fail over quickly: they take the master for
// down after DownAfter without an answer, and two of the three must agree.
type Sentinel struct {
	// URL is the lapse URL of the setup:
	// redis-sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/0?master=lapsetest.
	URL string
	// Master and Replica are the addresses the setup started with; after a
	// failover the replica is the master.
	Master, Replica string
	// Sentinels are the sentinels' addresses.
	Sentinels []string

	dir   string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // by address
}

// DownAfter is the sentinels' down-after-milliseconds: how long the master
// may not answer before they start a failover.
const DownAfter = time.Second

// StartSentinel starts a Sentinel setup and returns once it is ready to fail
// over: the replica is in sync with the master, and every sentinel knows the
// replica and the two other sentinels. Every process is killed when t ends.
// It fails t, with what to install, if redis-server is not on the machine.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := serverBinary(t)
	s := &Sentinel{dir: t.TempDir(), procs: map[string]*exec.Cmd{}}
	t.Cleanup(s.killAll)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The replica replicates as a user of its own, so that CutReplication
	// can shut it out.
	s.Master = s.start(t, bin, "master", []string{"--user", replUser, "on", ">" + replPassword, "+psync", "+replconf", "+ping"})
	s.Replica = s.start(t, bin, "replica", []string{"--replicaof", "127.0.0.1", port(s.Master),
		"--masteruser", replUser, "--masterauth", replPassword})
	for i := range 3 {
		name := fmt.Sprintf("sentinel%d", i+1)
		sp := freePort(t)
		conf := filepath.Join(s.dir, name+".conf")
		body := strings.Join([]string{
			"port " + strconv.Itoa(sp),
			"bind 127.0.0.1",
			"dir " + s.dir,
			"sentinel monitor " + MasterName + " 127.0.0.1 " + port(s.Master) + " 2",
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, DownAfter.Milliseconds()),
			"sentinel failover-timeout " + MasterName + " 3000", // a split vote is retried after twice this
			"sentinel parallel-syncs " + MasterName + " 1",
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, s.start(t, bin, name, []string{conf, "--sentinel"}, sp))
	}
	s.URL = "redis-sentinel://" + strings.Join(s.Sentinels, ",") + "/0?master=" + MasterName

	replica := goredis.NewClient(&goredis.Options{Addr: s.Replica})
	defer replica.Close()
	s.waitFor(t, ctx, "the replica in sync with the master", func(ctx context.Context) bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for _, addr := range s.Sentinels {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: addr})
		s.waitFor(t, ctx, "sentinel "+addr+" knowing the replica and the other sentinels", func(ctx context.Context) bool {
			replicas, err := sc.Replicas(ctx, MasterName).Result()
			if err != nil || len(replicas) != 1 || replicas[0]["name"] != s.Replica || strings.Contains(replicas[0]["flags"], "down") ||
				strings.Contains(replicas[0]["flags"], "disconnected") {
				return false
			}
			others, err := sc.Sentinels(ctx, MasterName).Result()
			return err == nil && len(others) == 2
		})
		_ = sc.Close()
	}
	return s
}

// The user the replica replicates as.
const replUser, replPassword = "replication", "replication-pw"

// CutReplication stops the replica from receiving the master's writes, as
// a replica that falls behind would: the master refuses the replica's user
// and drops its connection, and keeps taking writes that reach it alone.
// It returns once the replica sees its link down. A failover after it loses
// every write made in between.
func (s *Sentinel) CutReplication(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	master := goredis.NewClient(&goredis.Options{Addr: s.Master})
	defer master.Close()
	if err := master.Do(ctx, "ACL", "SETUSER", replUser, "off").Err(); err != nil {
		t.Fatalf("shut the replica's user out: %v", err)
	}
	if err := master.Do(ctx, "CLIENT", "KILL", "USER", replUser).Err(); err != nil {
		t.Fatalf("drop the replica's connection: %v", err)
	}
	replica := goredis.NewClient(&goredis.Options{Addr: s.Replica})
	defer replica.Close()
	s.waitFor(t, ctx, "the replica's link to the master down", func(ctx context.Context) bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:down")
	})
}

// KillMaster SIGKILLs the master the setup started with: the sentinels
// promote the replica after DownAfter and an election.
func (s *Sentinel) KillMaster(t testing.TB) {
	t.Helper()
	s.kill(s.Master)
}

// WaitFailover waits until every sentinel names the replica as the master,
// at most within, and returns how long that took.
func (s *Sentinel) WaitFailover(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for _, addr := range s.Sentinels {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: addr})
		s.waitFor(t, ctx, "sentinel "+addr+" naming the replica the master", func(ctx context.Context) bool {
			a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
			return err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == s.Replica
		})
		_ = sc.Close()
	}
	return time.Since(start)
}

// start starts redis-server with args on a free port (or the one given)
// and waits until it answers PING; its log goes to <dir>/<name>.log.
func (s *Sentinel) start(t testing.TB, bin, name string, args []string, givenPort ...int) string {
	t.Helper()
	p := 0
	if len(givenPort) > 0 {
		p = givenPort[0]
	} else {
		p = freePort(t)
		args = append([]string{"--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", s.dir, "--dbfilename", name + ".rdb"}, args...)
	}
	logFile := filepath.Join(s.dir, name+".log")
	args = append(args, "--logfile", logFile)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", bin, strings.Join(args, " "), err)
	}
	s.mu.Lock()
	s.procs[addr] = cmd
	s.mu.Unlock()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logFile)
			t.Fatalf("redis-server %s (%s) exited at its start:\n%s", name, addr, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("redis-server %s (%s) did not answer within 10 s: %v\n%s", name, addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor polls cond every 50 ms until it holds, failing t when ctx ends
// first, with the sentinels' logs.
func (s *Sentinel) waitFor(t testing.TB, ctx context.Context, what string, cond func(context.Context) bool) {
	t.Helper()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not in time\n%s", what, s.Logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Logs returns every process's log, for a failure message.
func (s *Sentinel) Logs() string {
	files, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		body, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "--- %s\n%s", filepath.Base(f), body)
	}
	return b.String()
}

func (s *Sentinel) kill(addr string) {
	s.mu.Lock()
	cmd := s.procs[addr]
	delete(s.procs, addr)
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
}

func (s *Sentinel) killAll() {
	s.mu.Lock()
	addrs := make([]string, 0, len(s.procs))
	for a := range s.procs {
		addrs = append(addrs, a)
	}
	s.mu.Unlock()
	for _, a := range addrs {
		s.kill(a)
	}
}

// serverBinary finds redis-server, failing t with what to install if it is
// not on the machine: CI installs it, and a skip would hide the tests.
func serverBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		return bin
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, serr := os.Stat(p); serr == nil {
			return p
		}
	}
	t.Fatalf("redis-server not found (apt-get install redis-server): the Sentinel tests start their own Redis processes: %v", err)
	return ""
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
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
