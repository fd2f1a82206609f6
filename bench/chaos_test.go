package bench

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back.
func roundTrip(c net.Conn, r *bufio.Reader) (time.Duration, error) {
	start := time.Now()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echo answered " + line)
	}
	return time.Since(start), err
}

func TestChaosDelaysEveryRoundTripAndCanTakeTheServerAway(t *testing.T) {
	t.Parallel()
	chaos, err := NewChaos(ChaosConfig{Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer chaos.Close()
	proxied, err := chaos.ProxyURL("redis", "redis://"+echoServer(t)+"/0")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(proxied)
	if err != nil || u.Scheme != "redis" || u.Path != "/0" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		t.Fatalf("proxied URL %q (%v): want redis://127.0.0.1:port/0", proxied, err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for range 3 {
		if d, err := roundTrip(c, r); err != nil || d < 20*time.Millisecond {
			t.Fatalf("round trip through the proxy: %s, %v; want at least the 20ms latency", d, err)
		}
	}

	interrupted := make(chan error, 1)
	go func() { interrupted <- chaos.Interrupt(t.Context(), "redis", time.Second) }()
	// The connection in use is cut…
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection through the proxy outlived the interruption: %v", err)
	}
	// …and new ones are refused while the server is away…
	if c2, err := net.Dial("tcp", u.Host); err == nil {
		c2.Close()
		t.Fatal("a connection was accepted while the server was away")
	}
	// …until it comes back, on the same address.
	if err := <-interrupted; err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatalf("the proxy did not come back: %v", err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3, bufio.NewReader(c3)); err != nil {
		t.Fatal(err)
	}
	if res := chaos.Result(); res.LatencyMS != 20 || len(res.Proxied) != 1 || res.Proxied[0] != "redis" {
		t.Errorf("result %+v", res)
	}
}

func TestChaosProxiesOnlyOneServerOnTCP(t *testing.T) {
	t.Parallel()
	chaos, err := NewChaos(ChaosConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer chaos.Close()
	for _, tc := range []struct{ url, want string }{
		{"redis-cluster://127.0.0.1:7000,127.0.0.1:7001", "Cluster"},
		{"unix:///tmp/redis.sock", "scheme"},
		{"sqlite:///tmp/l.db", "scheme"},
		{"postgres://u@h1:5432,h2:5432/db", "one server"},
		{"postgres:///db?host=/var/run/postgresql", "one server"},
		{"mysql://root@/db?socket=/tmp/mysql.sock", "one server"},
	} {
		if _, err := chaos.ProxyURL("x", tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ProxyURL(%q): %v, want an error saying %q", tc.url, err, tc.want)
		}
	}
	// A URL without a port names the scheme's default one; the rest stays.
	got, err := chaos.ProxyURL("store", "postgres://u:p%40ss@db.invalid/lapse?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := url.Parse(got); u.User.String() != "u:p%40ss" || u.Path != "/lapse" || u.RawQuery != "sslmode=disable" || u.Hostname() != "127.0.0.1" {
		t.Errorf("proxied URL %q", got)
	}
	if _, err := chaos.ProxyURL("store", "mysql://h:3306/db"); err == nil {
		t.Error("a second proxy of the same name was made")
	}
	for _, bad := range []ChaosConfig{{Latency: 1500 * time.Microsecond}, {Latency: -time.Millisecond}, {Jitter: time.Millisecond}} {
		if _, err := NewChaos(bad); err == nil {
			t.Errorf("NewChaos(%+v) accepted", bad)
		}
	}
}

func TestTerminatePostgresBackendsEndsOnlyThoseOfTheName(t *testing.T) {
	t.Parallel()
	base := os.Getenv("LAPSE_TEST_POSTGRES")
	if base == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	ctx := t.Context()
	connect := func(app string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(base)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = app
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	name := "lapse-bench-test-" + time.Now().Format("150405.000000")
	mine := []*pgx.Conn{connect(name), connect(name)}
	other := connect(name + "-other")
	n, err := TerminatePostgresBackends(ctx, base, name)
	if err != nil || n != 2 {
		t.Fatalf("terminated %d backends (%v), want the 2 of %s", n, err, name)
	}
	for i, c := range mine {
		if err := c.Ping(ctx); err == nil {
			t.Errorf("connection %d of %s still answers", i, name)
		}
	}
	if err := other.Ping(ctx); err != nil {
		t.Errorf("a connection of another name was ended too: %v", err)
	}
}
