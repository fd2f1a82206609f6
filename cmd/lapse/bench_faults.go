package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/lapsehq/lapse/bench"
)

// serverStore reports whether a --store URL names a database server (the
// default, "", is an embedded SQLite file).
func serverStore(storeURL string) bool {
	scheme, _, _ := strings.Cut(storeURL, "://")
	return scheme == "postgres" || scheme == "postgresql" || scheme == "mysql"
}

// checkChaos checks --chaos-latency and --chaos-jitter against the rest.
func checkChaos(given map[string]bool, remote bool, storeURL, timers string, latency, jitter time.Duration) error {
	if !given["chaos-latency"] {
		if given["chaos-jitter"] {
			return errors.New("--chaos-jitter varies --chaos-latency: give that too")
		}
		return nil
	}
	timersScheme, _, _ := strings.Cut(timers, "://")
	whole := func(d time.Duration) bool { return d%time.Millisecond == 0 }
	switch {
	case remote:
		return errors.New("--chaos-latency puts a proxy between the in-process service and its servers; with --target the server dials its own (put a proxy in front of its database yourself)")
	case !serverStore(storeURL):
		return errors.New("--chaos-latency slows the connections to the store's server, and the embedded SQLite store has none (it runs in this process): use --store postgres://… or mysql://…")
	case strings.HasSuffix(timersScheme, "-cluster"):
		return errors.New("--chaos-latency with Redis Cluster timers: a Cluster's redirects name its real nodes, so a proxy cannot sit in between (use redis://host:port)")
	case strings.HasSuffix(timersScheme, "-sentinel"):
		return errors.New("--chaos-latency with Redis Sentinel timers: the sentinels name the master's real address, so a proxy cannot sit in between (use redis://host:port)")
	case timersScheme == "unix":
		return errors.New("--chaos-latency with Redis on a Unix socket: the proxy speaks TCP (use redis://host:port)")
	case latency < time.Millisecond || !whole(latency):
		return fmt.Errorf("--chaos-latency %s: want whole milliseconds, at least 1ms (toxiproxy counts in milliseconds)", latency)
	case jitter < 0 || !whole(jitter):
		return fmt.Errorf("--chaos-jitter %s: want whole milliseconds, 0 or more", jitter)
	case jitter > latency:
		return fmt.Errorf("--chaos-jitter %s: at most --chaos-latency %s (a delay cannot be negative)", jitter, latency)
	}
	return nil
}

// checkRestartDB checks --restart-db-at, --restart-db-cmd and
// --restart-db-down against the rest.
func checkRestartDB(given map[string]bool, remote bool, storeURL string, at time.Duration, cmd string, down time.Duration) error {
	if !given["restart-db-at"] {
		for _, f := range []string{"restart-db-cmd", "restart-db-down"} {
			if given[f] {
				return fmt.Errorf("--%s goes with --restart-db-at: give that too", f)
			}
		}
		return nil
	}
	switch {
	case at < 0:
		return fmt.Errorf("--restart-db-at %s: must not be negative", at)
	case !remote && !serverStore(storeURL):
		return errors.New("--restart-db-at: the embedded store runs in this process, there is no database server to restart: use --kill-every")
	case remote && cmd == "":
		return errors.New("--restart-db-at with --target needs --restart-db-cmd, a command that restarts the server's database: the bench cannot reach the server's connections")
	case cmd != "" && given["restart-db-down"]:
		return errors.New("--restart-db-down is how long the bench keeps the database away by itself; with --restart-db-cmd the command decides")
	case down < 0:
		return fmt.Errorf("--restart-db-down %s: must not be negative", down)
	}
	return nil
}

// restartDBFault is --restart-db-at: the command when there is one; else
// the run's backends terminated (PostgreSQL, when appName is set) and the
// run's connections cut at its proxy "store", which refuses new ones for down.
func restartDBFault(at time.Duration, cmd string, down time.Duration, chaos *bench.Chaos, storeURL, appName string) bench.Fault {
	f := bench.Fault{Name: "restart-db", At: at}
	if cmd != "" {
		f.Do = func(ctx context.Context) (string, error) {
			start := time.Now()
			c := exec.CommandContext(ctx, "sh", "-c", cmd)
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			c.WaitDelay = time.Second // a server it starts may hold the output open
			if err := c.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
				msg := strings.TrimSpace(out.String())
				if len(msg) > 500 {
					msg = msg[:500] + "…"
				}
				return "", fmt.Errorf("%s: %w: %s", cmd, err, msg)
			}
			return fmt.Sprintf("ran %q in %.1fs", cmd, time.Since(start).Seconds()), nil
		}
		return f
	}
	f.Do = func(ctx context.Context) (string, error) {
		var did []string
		if appName != "" {
			n, err := bench.TerminatePostgresBackends(ctx, storeURL, appName)
			if err != nil {
				return "", err
			}
			did = append(did, fmt.Sprintf("terminated the run's %d backends", n))
		}
		if err := chaos.Interrupt(ctx, "store", down); err != nil {
			return strings.Join(did, ", "), err
		}
		did = append(did, fmt.Sprintf("cut the run's connections and refused new ones for %s", down))
		return strings.Join(did, ", "), nil
	}
	return f
}

// withApplicationName sets application_name in a PostgreSQL URL: the
// store keeps the one its URL sets, and the server shows it in
// pg_stat_activity.
func withApplicationName(storeURL, name string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return "", err
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// runName is prefix and 12 random hex digits: a name of the run's own.
func runName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// describeChaos says what the run's proxies do, for the first line.
func describeChaos(c bench.ChaosResult) string {
	s := fmt.Sprintf(", through proxies for %s", strings.Join(c.Proxied, ", "))
	if c.LatencyMS > 0 {
		s += fmt.Sprintf(" adding %gms per round trip", c.LatencyMS)
		if c.JitterMS > 0 {
			s += fmt.Sprintf(" (±%gms)", c.JitterMS)
		}
	}
	return s
}
