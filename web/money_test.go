package web_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// Every amount a template prints goes through the money func (one format
// everywhere, internal/money): a field holding minor units is only ever
// the first argument of money.
func TestTemplatesPrintAmountsWithMoney(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("templates", "*.html"))
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	field := regexp.MustCompile(`\{\{[^}]*\.(AmountCents|Amount)\b[^}]*\}\}`)
	ok := regexp.MustCompile(`^\{\{(if|with) \.AmountCents\}\}$|^\{\{money \.AmountCents `)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range field.FindAll(b, -1) {
			seen++
			if !ok.Match(m) {
				t.Errorf("%s prints an amount without money: %s", f, m)
			}
		}
	}
	if seen < 3 {
		t.Errorf("only %d amounts found in the templates: the check reads nothing", seen)
	}
}
