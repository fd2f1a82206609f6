// Package doclinks holds a test only: every relative link in the
// repository's Markdown names a file that exists, and every #anchor a
// heading of its page, so that moving a section (the README's went to docs/)
// cannot leave a reader at a dead link.
package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fence   = regexp.MustCompile("(?s)```.*?```")
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped
// (but - and _), spaces as dashes.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		h := strings.NewReplacer("`", "", "*", "").Replace(m[1])
		h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
		s := slug(h)
		for i := 0; out[s]; i++ { // GitHub numbers repeated headings
			s = slug(h) + "-" + string(rune('1'+i))
		}
		out[s] = true
	}
	return out
}

func TestMarkdownLinksResolve(t *testing.T) {
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := fence.ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file", path, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			page, err := os.ReadFile(dest)
			if err != nil {
				return err
			}
			if !anchors(string(page))[anchor] {
				t.Errorf("%s: link %q: no heading for #%s in %s", path, target, anchor, dest)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
