package nats

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
)

// debianServer is the nats-server of Debian's package (2.9.10 in bookworm),
// which knows nothing of message schedules.
const debianServer = "/usr/sbin/nats-server"

// oldServerURL returns the URL of a nats-server older than 2.12:
// LAPSE_TEST_NATS_OLD if set; else the one on 127.0.0.1:4222 (where the
// Debian package's runs:
//
//	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
//	    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
//
// ); else the Debian binary, started by the test on a free port and stopped
// when it ends.
func oldServerURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("LAPSE_TEST_NATS_OLD"); u != "" {
		return u
	}
	const local = "nats://127.0.0.1:4222"
	if nc, err := natsgo.Connect(local, natsgo.Timeout(2*time.Second)); err == nil {
		nc.Close()
		return local
	}
	if _, err := os.Stat(debianServer); err != nil {
		t.Fatalf("no old nats-server: none on 127.0.0.1:4222, and %s: %v (apt-get install nats-server, or set LAPSE_TEST_NATS_OLD)", debianServer, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(debianServer, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", debianServer, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	u := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := natsgo.Connect(u, natsgo.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on port %d: not answering within 10s: %v", debianServer, port, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting process's port
	}
}

// oldServer connects to an old server and checks that it is one.
func oldServer(t *testing.T) *natsgo.Conn {
	t.Helper()
	u := oldServerURL(t)
	nc, err := natsgo.Connect(u)
	if err != nil {
		t.Fatalf("connect to the old nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
	v := nc.ConnectedServerVersion()
	if got, ok := parseVersion(v); !ok || got[0] > 2 || got[0] == 2 && got[1] >= 12 {
		t.Fatalf("the server at %s is nats-server %s, not older than 2.12: point LAPSE_TEST_NATS_OLD at an older one", u, v)
	}
	return nc
}

// On a server without message schedules New (and Open) refuse to start,
// naming the server's version and the one needed.
func TestRefusesAServerWithoutMessageSchedules(t *testing.T) {
	nc := oldServer(t)
	v := nc.ConnectedServerVersion()
	_, err := New(nc, Config{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), v) || !strings.Contains(err.Error(), "2.12") {
		t.Errorf("New on nats-server %s: %v; want a refusal naming %s and 2.12", v, err, v)
	}
	t.Logf("New on nats-server %s: %v", v, err)
	_, err = Open(oldServerURL(t), Config{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), v) || !strings.Contains(err.Error(), "2.12") {
		t.Errorf("Open on nats-server %s: %v; want a refusal naming %s and 2.12", v, err, v)
	}
}

// Past the version check, the stream's configuration read back from an old
// server (which drops AllowMsgSchedules, a setting it does not know) is
// refused too: by Schedule, which then publishes nothing, and by Run.
func TestStreamReadBackCatchesADroppedSetting(t *testing.T) {
	nc := oldServer(t)
	cfg := Config{Prefix: "lapsetest" + randomID(), Logger: slog.New(slog.DiscardHandler)}
	cfg.setDefaults()
	s, err := newScheduler(nc, cfg, [3]int{}) // no version check
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", cfg.Stream, err)
		}
	})
	ctx := context.Background()
	err = s.Schedule(ctx, "k", time.Now().Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), "AllowMsgSchedules") || !strings.Contains(err.Error(), nc.ConnectedServerVersion()) {
		t.Errorf("Schedule on a stream without message schedules: %v, want a refusal naming AllowMsgSchedules and the server version", err)
	}
	t.Logf("Schedule on nats-server %s: %v", nc.ConnectedServerVersion(), err)
	info, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatalf("the stream was not created, so the read-back went untested: %v", err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d messages published to a stream that would never fire them", n)
	}
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = s.Run(runCtx, func(context.Context, []timer.Timer) error { return nil })
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "AllowMsgSchedules") {
		t.Errorf("Run on a stream without message schedules returned %v, want a refusal at once", err)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string][3]int{
		"2.9.10": {2, 9, 10}, "2.12.0": {2, 12, 0}, "v2.15.2": {2, 15, 2}, "2.12.0-RC.1": {2, 12, 0},
	} {
		if got, ok := parseVersion(in); !ok || got != want {
			t.Errorf("parseVersion(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "2.12", "x.y.z", "2.12.0.1"} {
		if _, ok := parseVersion(in); ok {
			t.Errorf("parseVersion(%q): ok", in)
		}
	}
}

func TestFireAtRoundsUpToTheMillisecond(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	for off, want := range map[time.Duration]string{
		0:                            "2026-05-01T10:00:00.000Z",
		time.Nanosecond:              "2026-05-01T10:00:00.001Z",
		999_999 * time.Nanosecond:    "2026-05-01T10:00:00.001Z",
		time.Millisecond:             "2026-05-01T10:00:00.001Z",
		242*time.Millisecond + 1:     "2026-05-01T10:00:00.243Z",
		999*time.Millisecond + 1:     "2026-05-01T10:00:01.000Z",
		-time.Nanosecond:             "2026-05-01T10:00:00.000Z",
		-999_999 * time.Nanosecond:   "2026-05-01T10:00:00.000Z",
		-1_000_001 * time.Nanosecond: "2026-05-01T09:59:59.999Z",
	} {
		due := base.Add(off)
		at := fireAt(due)
		if got := at.Format(atLayout); got != want {
			t.Errorf("fireAt(%s) = %s, want %s", due.Format(time.RFC3339Nano), got, want)
		}
		if at.Before(due) {
			t.Errorf("fireAt(%s) = %s: before the due time", due.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
}
