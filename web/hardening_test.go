package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/web"
)

// dashOn serves the dashboard (with token, or without when token is "")
// beside the API on st, on loopback as lapse serve does, and returns its URL.
func dashOn(t *testing.T, st store.Store, token string) string {
	t.Helper()
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lapse.New(lapse.Config{Store: st, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	dash, err := web.New(svc, web.Options{APIToken: token, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ctx, web.Mount(httpapi.New(svc, httpapi.Options{APIToken: token, Logger: logger}), dash))
}

// openSQLite opens a migrated SQLite store of the test's own.
func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// noRedirects is an HTTP client that hands back every redirect unfollowed.
var noRedirects = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// nextCases are login "next" values: the hostile ones must send the browser
// to the dashboard's root ("/"), the local ones where they say. A browser
// strips tabs and line breaks from a URL and reads "\" as "/", so each
// hostile value is, to a browser, a URL of another host (or a script).
var nextCases = []struct{ name, next, want string }{
	{"a tab after the slash (the reported one)", "/\t/evil.example", "/"},
	{"a line feed after the slash", "/\n/evil.example", "/"},
	{"a carriage return after the slash", "/\r/evil.example", "/"},
	{"CR LF after the slash", "/\r\n/evil.example", "/"},
	{"a tab between the slashes' backslash", "/\t\\evil.example", "/"},
	{"a NUL after the slash", "/\x00/evil.example", "/"},
	{"DEL after the slash", "/\x7f/evil.example", "/"},
	{"a C1 control (NEL) after the slash", "/\u0085/evil.example", "/"},
	{"a control character later in the path", "/ui/orders\t", "/"},
	{"a leading tab", "\t//evil.example", "/"},
	{"a leading space", " //evil.example", "/"},
	{"scheme-relative", "//evil.example", "/"},
	{"scheme-relative with a path", "//evil.example/ui/", "/"},
	{"three slashes", "///evil.example", "/"},
	{"%2f%2f once decoded", "//evil.example/%2f", "/"},
	{"a slash then a backslash", "/\\evil.example", "/"},
	{"two backslashes", "\\\\evil.example", "/"},
	{"a backslash then a slash", "\\/evil.example", "/"},
	{"a slash, a backslash and a slash", "/\\/evil.example", "/"},
	{"an encoded second slash", "/%2fevil.example", "/"},
	{"an encoded backslash", "/%5cevil.example", "/"},
	{"an encoded tab", "/%09/evil.example", "/"},
	{"an absolute http URL", "http://evil.example/", "/"},
	{"an absolute https URL", "https://evil.example/ui/", "/"},
	{"a scheme without slashes", "https:evil.example", "/"},
	{"a scheme and one slash", "https:/evil.example", "/"},
	{"javascript:", "javascript:alert(1)", "/"},
	{"JavaScript: in mixed case", "JaVaScRiPt:alert(document.domain)", "/"},
	{"data:", "data:text/html,<script>alert(1)</script>", "/"},
	{"a relative path", "ui/orders", "/"},
	{"user info", "//user@evil.example", "/"},
	{"invalid UTF-8", "/ui/\xff", "/"},
	{"empty", "", "/"},

	{"the root", "/", "/"},
	{"a page", "/ui/orders", "/ui/orders"},
	{"a page with a query", "/ui/orders?status=PAID&prefix=o-", "/ui/orders?status=PAID&prefix=o-"},
	{"an order with an escaped id", "/ui/orders/a%2Fb", "/ui/orders/a%2Fb"},
	{"a query naming another host", "/ui/orders?prefix=//evil.example", "/ui/orders?prefix=//evil.example"},
}

// TestLoginNextStaysLocal is the table of hostile "next" values, at the
// function that judges them.
func TestLoginNextStaysLocal(t *testing.T) {
	t.Parallel()
	for _, c := range nextCases {
		if got := web.LocalNext(c.next); got != c.want {
			t.Errorf("%s: localNext(%q) = %q, want %q", c.name, c.next, got, c.want)
		}
	}
}

// TestLoginPostRedirectsOnlyLocally posts the login form with each "next"
// and reads the Location of the answer: never another host, never a
// control character, the dashboard's root for every hostile value.
func TestLoginPostRedirectsOnlyLocally(t *testing.T) {
	t.Parallel()
	u := dashOn(t, openSQLite(t), token)
	for _, c := range nextCases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := noRedirects.PostForm(u+"/ui/login", url.Values{"token": {token}, "next": {c.next}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			loc := resp.Header.Get("Location")
			if !utf8.ValidString(c.next) || strings.ContainsRune(c.next, 0) {
				// Refused at the edge, as every input holding such text is.
				if resp.StatusCode != http.StatusBadRequest || loc != "" {
					t.Fatalf("next %q: %d Location %q, want 400", c.next, resp.StatusCode, loc)
				}
				return
			}
			if resp.StatusCode != http.StatusSeeOther || loc != c.want {
				t.Fatalf("next %q: %d Location %q, want 303 to %q", c.next, resp.StatusCode, loc, c.want)
			}
			if strings.IndexFunc(loc, unicode.IsControl) >= 0 || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
				t.Fatalf("next %q: Location %q leaves the site", c.next, loc)
			}
			// The browser's own reading of the Location: this server.
			base, _ := url.Parse(u + "/ui/login")
			to, err := base.Parse(loc)
			if err != nil || to.Host != base.Host {
				t.Fatalf("next %q: Location %q resolves to %v (%v)", c.next, loc, to, err)
			}
		})
	}
}
