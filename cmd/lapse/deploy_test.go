package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The alerting rules name metrics lapse exports: a metric renamed in the
// code and not in deploy/prometheus/lapse-rules.yaml would leave an alert
// that never fires. (promtool check rules, in CI, checks the file's form.)
func TestPrometheusRulesNameRealMetrics(t *testing.T) {
	rules, err := os.ReadFile("../../deploy/prometheus/lapse-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "compare") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		code.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\blapse_[a-z_]+\b`).FindAllString(string(rules), -1)
	if len(names) < 10 {
		t.Fatalf("%d metric names in the rules, want the rules to watch at least 10", len(names))
	}
	for _, n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && strings.Contains(code.String(), `"`+b+`"`) {
				base = b
			}
		}
		if !strings.Contains(code.String(), `"`+base+`"`) {
			t.Errorf("the rules name %s, which no metric of lapse's is called", n)
		}
	}
}
