package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Set at build time by the release (goreleaser) or `make build`:
// -ldflags "-X main.version=v0.1.0 -X main.commit=<sha> -X main.date=<RFC 3339>".
// A build from a checkout without them takes the VCS revision and time the
// Go toolchain stamps into the binary (debug.ReadBuildInfo), and `go install
// …@v0.1.0` the module version.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo is what `lapse version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a checkout with uncommitted changes
	GoVersion string `json:"go_version"`
	Module    string `json:"module,omitempty"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Time: date}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion, b.Module = bi.GoVersion, bi.Main.Path
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.time":
			if b.Time == "" {
				b.Time = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line of `lapse version` and `lapse --version`.
func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "lapse %s", b.Version)
	switch {
	case b.Commit != "":
		fmt.Fprintf(&s, " (commit %s", b.Commit)
		if b.Modified {
			s.WriteString(", modified")
		}
		if b.Time != "" {
			fmt.Fprintf(&s, ", %s", b.Time)
		}
		s.WriteString(")")
	default:
		// GOFLAGS=-buildvcs=false, or a build outside a checkout.
		s.WriteString(" (commit unknown: build with `make build`, or go build -buildvcs=true from a checkout)")
	}
	fmt.Fprintf(&s, " %s", b.GoVersion)
	return s.String()
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print the version as JSON: version, commit, time, modified, go_version, module")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	b := readBuildInfo()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	fmt.Fprintln(stdout, b)
	return nil
}
