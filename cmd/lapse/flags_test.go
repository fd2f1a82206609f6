package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lapseRun runs lapse in a directory of the test's own (a command's default
// files land there) and kills it after within: a command that should have
// refused its flags and started instead fails the test, it does not hang it.
func lapseRun(t *testing.T, within time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Sprintf("still running after %s (killed):\n%s", within, out), -1
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// quiet are flags that keep a command that starts despite a bad flag
// harmless: no fixed port, nothing dialled.
var quiet = map[string][]string{
	"serve":   {"--addr", "127.0.0.1:0"},
	"mockpay": {"--listen", "127.0.0.1:0"},
}

var durationFlagRE = regexp.MustCompile(`(?m)^\s+--(\S+) duration\s`)

// durationFlags lists the duration flags of a command, read from its -h.
func durationFlags(t *testing.T, command string) []string {
	t.Helper()
	out, code := lapseRun(t, 20*time.Second, nil, command, "-h")
	if code != 0 {
		t.Fatalf("lapse %s -h: exit %d\n%s", command, code, out)
	}
	var names []string
	for _, m := range durationFlagRE.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}

// Every duration flag of every command refuses a negative value, whether it
// comes from the command line or the environment, with exit status 2 and a
// message that names the flag. (A negative --sweep-lag made the fallback
// sweep cancel orders before their deadline.)
func TestEveryDurationFlagRefusesANegative(t *testing.T) {
	t.Parallel()
	total := 0
	for _, c := range commands {
		flags := durationFlags(t, c.name)
		total += len(flags)
		for _, name := range flags {
			t.Run(c.name+" --"+name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{c.name, "--" + name, "-7s"}, quiet[c.name]...)
				out, code := lapseRun(t, 15*time.Second, nil, args...)
				if code != 2 || !strings.Contains(out, "--"+name+" -7s: must not be negative") {
					t.Errorf("lapse %s: exit %d, want 2 with a message naming --%s:\n%s", strings.Join(args, " "), code, name, out)
				}
				env := envName(name) + "=-7s"
				out, code = lapseRun(t, 15*time.Second, []string{env}, append([]string{c.name}, quiet[c.name]...)...)
				if code != 2 || !strings.Contains(out, env+" (--"+name+"): must not be negative") {
					t.Errorf("%s lapse %s: exit %d, want 2 with a message naming %s:\n%s", env, c.name, code, env, out)
				}
			})
		}
	}
	if total < 20 {
		t.Fatalf("found %d duration flags in the commands' help; the pattern is out of date", total)
	}
}

// A zero that means nothing is refused: it used to stand silently for the
// default (--confirm-after 0 queried the gateway again after a minute).
// Where 0 has a meaning it is accepted and kept (TestSweepLagZeroIsNoLag).
func TestDurationFlagsRefuseAMeaninglessZero(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ command, flag, want string }{
		{"serve", "default-timeout", "want at least 1ms"},
		{"serve", "max-timeout", "want more than 0"},
		{"serve", "gateway-timeout", "want more than 0"},
		{"serve", "confirm-after", "want more than 0"},
		{"serve", "gateway-pending-max", "want more than 0"},
		{"serve", "shutdown-timeout", "want more than 0"},
		{"reconcile", "gateway-timeout", "want more than 0"},
		{"bench", "timeout", "want more than 0"},
		{"bench", "wait", "want more than 0"},
	} {
		t.Run(c.command+" --"+c.flag, func(t *testing.T) {
			t.Parallel()
			args := append([]string{c.command, "--" + c.flag, "0s"}, quiet[c.command]...)
			out, code := lapseRun(t, 15*time.Second, nil, args...)
			if code != 2 || !strings.Contains(out, "--"+c.flag+" 0s: "+c.want) {
				t.Errorf("lapse %s: exit %d, want 2 and %q:\n%s", strings.Join(args, " "), code, c.want, out)
			}
		})
	}
	t.Run("an interval that would spin", func(t *testing.T) {
		t.Parallel()
		out, code := lapseRun(t, 15*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--sweep-interval", "1ns")
		if code != 2 || !strings.Contains(out, "--sweep-interval 1ns: want 0 (off) or at least 10ms") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("max-timeout below default-timeout", func(t *testing.T) {
		t.Parallel()
		out, code := lapseRun(t, 15*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--default-timeout", "1h", "--max-timeout", "30m")
		if code != 2 || !strings.Contains(out, "--max-timeout 30m0s is below --default-timeout 1h0m0s") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}

// --sweep-lag 0 is no lag: with every timer lost (the Redis timers point at
// a Redis that is not there), the fallback sweep cancels an order as soon
// as its cancel_after has passed, not 10 s later (the default lag, which a
// 0 used to become), and never before.
func TestSweepLagZeroIsNoLag(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"),
		"--timers", "redis://"+freePort(t)+"/0", "--grace", "0s", "--sweep-interval", "100ms", "--sweep-lag", "0")
	s.call("PUT", "/v1/skus/tee", `{"available": 1}`, 200)
	created := s.call("POST", "/v1/orders", `{"id":"lost","items":[{"sku":"tee","qty":1}],"amount_cents":100,"timeout_seconds":0.3}`, 201)
	o := s.waitStatus("lost", "CANCELLED", 5*time.Second)
	if o["cancelled_at"].(string) < created["cancel_after"].(string) {
		t.Fatalf("cancelled at %v, before cancel_after %v", o["cancelled_at"], created["cancel_after"])
	}
	s.stop()
}

// Count flags are checked at start whatever else is given: exit 2 with a
// message naming the flag. --task-max-attempts and --task-workers used to
// be checked only with a remote --inventory, and a negative
// --gateway-retries stood silently for none.
func TestCountFlagsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--task-max-attempts", "-5"}, "--task-max-attempts -5: want 1 to 10000"},
		{[]string{"serve", "--task-max-attempts", "0"}, "--task-max-attempts 0: want 1 to 10000"},
		{[]string{"serve", "--task-workers", "0"}, "--task-workers 0: want 1 to 64"},
		{[]string{"serve", "--task-workers", "65"}, "--task-workers 65: want 1 to 64"},
		{[]string{"serve", "--gateway-retries", "-1"}, "--gateway-retries -1: want 0 (no retry) to 10"},
		{[]string{"serve", "--gateway-retries", "11", "--gateway", "http://127.0.0.1:1"}, "--gateway-retries 11: want 0 (no retry) to 10"},
		{[]string{"reconcile", "--gateway-retries", "-1", "--gateway", "http://127.0.0.1:1"}, "--gateway-retries -1: want 0 (no retry) to 10"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{}, c.args...), quiet[c.args[0]]...)
			out, code := lapseRun(t, 15*time.Second, nil, args...)
			if code != 2 || !strings.Contains(out, c.want) {
				t.Errorf("lapse %s: exit %d, want 2 and %q:\n%s", strings.Join(args, " "), code, c.want, out)
			}
		})
	}
}

// A URL-style flag whose value is wrong in itself — an unknown scheme, a
// malformed URL or query — is a usage error like any other bad flag: exit
// 2, with a message naming the flag, before anything is opened or dialled
// (it used to be 1, the status of a store or broker that does not answer).
func TestURLFlagErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--store", "oracle://x"}, "--store"},
		{[]string{"serve", "--store", "sqlite://"}, "--store"},
		{[]string{"serve", "--store", "mysql://root@127.0.0.1:1/"}, "--store"},
		{[]string{"serve", "--timers", "cron"}, "--timers"},
		{[]string{"serve", "--timers", "redis://127.0.0.1:6379/notadb"}, "--timers"},
		{[]string{"serve", "--timers", "nats://"}, "--timers"},
		{[]string{"serve", "--timers", "amqp://guest:guest@127.0.0.1:5672/?levels=many"}, "--timers"},
		{[]string{"serve", "--timers", "kafka:///lapse"}, "--timers"},
		{[]string{"serve", "--timers", "kafka://127.0.0.1:1/lapse?levels=10s,1s"}, "--timers"},
		{[]string{"serve", "--gateway", "ftp://pay.example"}, "--gateway"},
		{[]string{"serve", "--gateway", "https://pay.example/?x=1"}, "--gateway"},
		{[]string{"serve", "--inventory", "amqp://guest:guest@127.0.0.1:5672/?prefix=amq.x"}, "--inventory"},
		{[]string{"migrate", "--store", "oracle://x"}, "--store"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{}, c.args...), quiet[c.args[0]]...)
			out, code := lapseRun(t, 15*time.Second, nil, args...)
			if code != 2 || !strings.Contains(out, c.want) {
				t.Errorf("lapse %s: exit %d, want 2 and a message naming %s:\n%s", strings.Join(args, " "), code, c.want, out)
			}
		})
	}
}

// The retentions take days (35d, 1.5d) beside Go's units, and refuse what
// is neither, or negative.
func TestDaysFlagsTakeDays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"35d", 35 * 24 * time.Hour, true},
		{"1.5d", 36 * time.Hour, true},
		{"0d", 0, true},
		{"20s", 20 * time.Second, true},
		{"36h", 36 * time.Hour, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"35x", 0, false},
	} {
		got, err := parseDays(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseDays(%q) = %s, %v; want %s, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	if got := (&daysValue{d: 35 * 24 * time.Hour}).String(); got != "35d" {
		t.Errorf("35 days shown as %q, want 35d", got)
	}
	out, code := lapseRun(t, 15*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--order-retention", "1ms")
	if code != 2 || !strings.Contains(out, "--order-retention 1ms: want 0 (off) or at least 1s") {
		t.Errorf("--order-retention 1ms: exit %d:\n%s", code, out)
	}
}
