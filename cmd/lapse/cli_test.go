package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runHere runs lapse in this process (for commands that only print).
func runHere(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// Help is on stdout with exit 0, whichever way it is asked for, and is the
// same text; lapse help serve names every store scheme and groups serve's
// flags.
func TestHelpOnStdout(t *testing.T) {
	t.Parallel()
	help, stderr, code := runHere(t, "serve", "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("serve --help: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"Usage:\n  lapse serve [flags]", "sqlite://", "postgres://", "mysql://", "\nServer flags:\n",
		"\nStore and timers flags:\n", "\nPayments and gateways flags:\n", "\nEvents flags:\n", "\nInventory flags:\n",
		"\nOrder service flags:\n", "\nGlobal Flags:\n      --config string"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, help)
		}
	}
	for _, args := range [][]string{{"help", "serve"}, {"serve", "-h"}, {"serve", "-help"}, {"serve", "--addr", "x", "--help"}, {"serve", "extra", "-h"}} {
		out, stderr, code := runHere(t, args...)
		if code != 0 || stderr != "" || out != help {
			t.Errorf("lapse %q: exit %d, stderr %q, and not serve --help's text:\n%s", args, code, stderr, out)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"orders", "--help"}, {"help", "orders", "get"}, {"orders", "get", "x", "-h"}, {"completion", "--help"}} {
		out, stderr, code := runHere(t, args...)
		if code != 0 || stderr != "" || !strings.Contains(out, "Usage:") {
			t.Errorf("lapse %q: exit %d, stderr %q, stdout %q", args, code, stderr, out)
		}
	}
	// A usage error: the message on stderr, nothing on stdout, exit 2.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"--nope"}, "unknown flag: --nope"},
		{[]string{"orders"}, "lapse orders [command]"},
		{[]string{"orders", "frob"}, `unknown subcommand "frob"`},
		{[]string{"version", "--nope"}, "unknown flag: --nope"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
	} {
		out, stderr, code := runHere(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("lapse %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, stderr, code := runHere(t, "completion", shell)
		if code != 0 || stderr != "" || !strings.Contains(out, "lapse") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, stderr, len(out))
		}
	}
	// The completion a shell asks for: serve's flags, and an enum's values.
	out, _, code := runHere(t, cobra.ShellCompRequestCmd, "serve", "--sweep")
	if code != 0 || !strings.Contains(out, "--sweep-interval") || !strings.Contains(out, "--sweep-lag") {
		t.Errorf("completing serve --sweep: exit %d:\n%s", code, out)
	}
	out, _, code = runHere(t, cobra.ShellCompRequestCmd, "orders", "list", "--status", "")
	if code != 0 || !strings.Contains(out, "PENDING\nPAYING\nPAID\nCANCELLED\n") {
		t.Errorf("completing orders list --status: exit %d:\n%s", code, out)
	}
}

// Every flag of serve is under one of the help's headings.
func TestServeHelpGroupsEveryFlag(t *testing.T) {
	t.Parallel()
	serve, _, err := newRoot(context.Background(), io.Discard, io.Discard).Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	serve.LocalFlags().VisitAll(func(f *pflag.Flag) {
		n++
		if f.Name == "help" || slices.ContainsFunc(flagGroups["serve serve"], func(g flagGroup) bool { return g.has(f.Name) }) {
			return
		}
		t.Errorf("serve --%s is in no group of flagGroups", f.Name)
	})
	if n < 60 {
		t.Fatalf("serve has %d flags: the describe pass lost some", n)
	}
}

// Every command of the tree describes its flags: newRoot panics for one
// whose run function does something before parseFlags; every leaf has at
// least its --help and the --config every command takes.
func TestEveryCommandDescribes(t *testing.T) {
	t.Parallel()
	root := newRoot(context.Background(), io.Discard, io.Discard)
	var leaves []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.DisableFlagParsing && c.Name() != cobra.ShellCompRequestCmd && c.Name() != cobra.ShellCompNoDescRequestCmd {
			leaves = append(leaves, c.CommandPath())
			if !c.LocalFlags().HasFlags() || c.InheritedFlags().Lookup(configFlag) == nil {
				t.Errorf("%s: no flags described", c.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	want := len(commands) - len(groups)
	for _, g := range groups {
		want += len(g.subs)
	}
	if len(leaves) != want {
		t.Errorf("%d leaves, want %d: %v", len(leaves), want, leaves)
	}
}

// An enum's value is taken in any case and stored as the command spells
// it; anything else passes as given, for the command's own message.
func TestEnumValuesAnyCase(t *testing.T) {
	t.Parallel()
	fs := newFlagSet("x", io.Discard)
	status := fs.Enum("status", "", "", "PENDING", "PAID")
	level := fs.Enum("log-level", "info", "", "debug", "info")
	timers := fs.Enum("timers", "memory", "", "memory", "sql")
	if err := parseFlags(fs, []string{"--status", "pending", "--log-level", "DEBUG", "--timers", "Redis://H:6379/0"}); err != nil {
		t.Fatal(err)
	}
	if *status != "PENDING" || *level != "debug" || *timers != "Redis://H:6379/0" {
		t.Fatalf("status %q, log-level %q, timers %q", *status, *level, *timers)
	}
}

// docsDir is docs/cli, from this package's directory.
const docsDir = "../../docs/cli"

// docs/cli is what the commands give: go generate ./cmd/lapse after a
// change to a command, a flag or a help text.
func TestDocsAreUpToDate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := genDocs(newRoot(context.Background(), io.Discard, io.Discard), dir); err != nil {
		t.Fatal(err)
	}
	want := readDir(t, dir)
	got := readDir(t, docsDir)
	for name, text := range want {
		if got[name] != text {
			t.Errorf("docs/cli/%s is stale or missing: run go generate ./cmd/lapse", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/cli/%s names no command: run go generate ./cmd/lapse", name)
		}
	}
	if len(want) < 20 || !strings.Contains(want["lapse_serve.md"], "postgres://") {
		t.Fatalf("%d pages generated", len(want))
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(f)] = string(b)
	}
	return m
}

// describeServe returns serve's flag set, ready to parse.
func describeServe(t *testing.T) *flagSet {
	t.Helper()
	d := &describer{Writer: io.Discard}
	if err := runServe(context.Background(), nil, io.Discard, d); err != errDescribed {
		t.Fatal(err)
	}
	d.fs.describing = false
	d.fs.SetOutput(io.Discard)
	return d.fs
}

func configFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The --config file fills the flags the command line and LAPSE_* leave
// unset, in YAML or TOML; a list sets a repeatable flag once per item.
func TestConfigFilePrecedence(t *testing.T) {
	t.Setenv("LAPSE_GRACE", "5s")
	yml := configFile(t, "lapse.yaml", "grace: 1s\nsweep-lag: 2s\nstore: postgres://u:p@h/db\nsink: [log, https://hooks.example/x]\naddr: 127.0.0.1:9\nno-migrate: true\noutbox-batch: 100\n")
	tml := configFile(t, "lapse.toml", "grace = \"1s\"\nsweep-lag = \"2s\"\nstore = \"postgres://u:p@h/db\"\nsink = [\"log\", \"https://hooks.example/x\"]\naddr = \"127.0.0.1:9\"\nno-migrate = true\noutbox-batch = 100\n")
	for _, path := range []string{yml, tml} {
		fs := describeServe(t)
		if err := parseFlags(fs, []string{"--config", path, "--addr", "127.0.0.1:1"}); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for name, want := range map[string]string{
			"addr":         "127.0.0.1:1", // the command line wins
			"grace":        "5s",          // then the environment
			"sweep-lag":    "2s",          // then the file
			"store":        "postgres://u:p@h/db",
			"sink":         "log https://hooks.example/x",
			"no-migrate":   "true",
			"outbox-batch": "100",
			"max-timeout":  "168h0m0s", // then the default
		} {
			if got := fs.Lookup(name).Value.String(); got != want {
				t.Errorf("%s: --%s %q, want %q", filepath.Base(path), name, got, want)
			}
		}
	}
	// LAPSE_CONFIG names the file too.
	t.Setenv("LAPSE_CONFIG", yml)
	fs := describeServe(t)
	if err := parseFlags(fs, nil); err != nil || fs.Lookup("sweep-lag").Value.String() != "2s" {
		t.Fatalf("LAPSE_CONFIG: %v, sweep-lag %s", err, fs.Lookup("sweep-lag").Value)
	}
}

// A key no command has is a usage error naming it; a key another command
// has is left alone (one file serves serve and migrate); a bad value names
// its key, never the value (it may be a secret), and a duration out of its
// span names the file.
func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, text, want string }{
		{"a.yaml", "grac: 1s\n", `unknown key "grac": no lapse command has a flag --grac`},
		{"a.yaml", "outbox-batch: lots\n", "outbox-batch: parse error"},
		{"a.yaml", "grace: [1s, 2s]\n", "grace: want one value, not a list of 2"},
		{"a.yaml", "gateway:\n  url: x\n", "gateway: want a value or a list of values"},
		{"a.toml", "grace = \n", "toml: line 1"},
		{"a.json", "{}", "want a .yaml, .yml or .toml file"},
		{"a.yaml", "grace: -7s\n", "grace: -7s in "},
	} {
		path := configFile(t, c.file, c.text)
		var stderr bytes.Buffer
		fs := describeServe(t)
		fs.SetOutput(&stderr)
		err := parseFlags(fs, []string{"--config", path})
		if err != errUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s %q: %v, %q; want errUsage and %q", c.file, c.text, err, stderr.String(), c.want)
		}
	}
	// migrate has no --addr: the key is serve's, not a mistake.
	path := configFile(t, "lapse.yaml", "addr: 127.0.0.1:9\nstore: sqlite://x.db\n")
	fs := newFlagSet("migrate", io.Discard)
	store := fs.String("store", "sqlite://lapse.db", "")
	if err := parseFlags(fs, []string{"--config", path}); err != nil || *store != "sqlite://x.db" {
		t.Fatalf("migrate with serve's file: %v, store %q", err, *store)
	}
	// A secret's bad value is not printed.
	path = configFile(t, "lapse.yaml", "outbox-batch: s3cr3t-value\n")
	var stderr bytes.Buffer
	fs2 := describeServe(t)
	fs2.SetOutput(&stderr)
	if err := parseFlags(fs2, []string{"--config", path}); err != errUsage || strings.Contains(stderr.String(), "s3cr3t") {
		t.Fatalf("%v: %q", err, stderr.String())
	}
}

// lapse.example.yaml parses and sets serve's flags.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	fs := describeServe(t)
	var stderr bytes.Buffer
	fs.SetOutput(&stderr)
	if err := parseFlags(fs, []string{"--config", "../../lapse.example.yaml"}); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	values, err := readConfig("../../lapse.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(values) < 10 {
		t.Fatalf("the example sets %d flags", len(values))
	}
	if got := fs.Lookup("grace").Value.String(); got != (60 * time.Second).String() {
		t.Errorf("grace %s", got)
	}
}
