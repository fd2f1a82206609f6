package gen_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gen.go is what oapi-codegen (go.mod's tool, v2.8.2) makes of
// httpapi/openapi.yaml with oapi-codegen.yaml: regenerating it gives the same
// bytes, so the client cannot drift from the document. On a failure, run
// `go generate ./client/...` and commit gen.go.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator (go tool oapi-codegen)")
	}
	// The generator runs in a scratch directory with a copy of the config,
	// so that its output (the config's "output: gen.go") lands there.
	tool, err := exec.Command("go", "tool", "-n", "oapi-codegen").Output()
	if err != nil {
		t.Fatalf("go tool -n oapi-codegen: %v", err)
	}
	spec, err := filepath.Abs("../../../httpapi/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oapi-codegen.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strings.TrimSpace(string(tool)), "-config", "oapi-codegen.yaml", spec)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, b)
	}
	out := filepath.Join(dir, "gen.go")
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("client/internal/gen/gen.go is not what httpapi/openapi.yaml generates (%d bytes, regenerated %d): run go generate ./client/... and commit it", len(got), len(want))
	}
}
