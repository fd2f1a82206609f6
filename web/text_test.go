package web_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
)

// openPostgres opens a migrated store in a schema of its own on
// LAPSE_TEST_POSTGRES, dropped when the test ends.
func openPostgres(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: testdb.PostgresSchema(t), MaxConns: 4})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// browse is a browser of one dashboard: its session cookie and the CSRF
// token of its forms (logged in first when the dashboard has a token).
type browse struct {
	base string
	hc   *http.Client
	csrf string
}

func newBrowse(t *testing.T, base, tok string) *browse {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &browse{base: base, hc: &http.Client{Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if tok != "" {
		resp, err := b.hc.PostForm(base+"/ui/login", url.Values{"token": {tok}, "next": {"/"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %d", resp.StatusCode)
		}
	}
	status, body := b.do(t, "GET", "/", "")
	m := csrfField.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("the overview: %d, no CSRF token in:\n%s", status, body)
	}
	b.csrf = m[1]
	return b
}

// do sends a request whose path and query are written as given (raw, so
// %00 and %ff reach the server as they are).
func (b *browse) do(t *testing.T, method, pathQuery, form string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.base, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = "//" + req.URL.Host + pathQuery // sent as written
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, pathQuery, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestDashboardRefusesNULAndInvalidUTF8 sends a NUL and an invalid UTF-8
// byte in every page's path, every query parameter it reads and every form
// field: each is a 400 before any store sees it, never a 500 (PostgreSQL
// refuses such text) nor a page (SQLite takes it). On both stores, with
// and without an API token.
func TestDashboardRefusesNULAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		for _, tok := range []string{"", token} {
			name := db + "/without a token"
			if tok != "" {
				name = db + "/with a token"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var st store.Store
				if db == "postgres" {
					st = openPostgres(t)
				} else {
					st = openSQLite(t)
				}
				b := newBrowse(t, dashOn(t, st, tok), tok)
				cursor := func(id string) string {
					return base64.RawURLEncoding.EncodeToString([]byte("1700000000000|" + id))
				}
				csrf := "csrf=" + url.QueryEscape(b.csrf)
				for _, bad := range []string{"%00", "%ff"} {
					cases := []struct{ method, path, form string }{
						{"GET", "/?done=" + bad, ""},
						{"GET", "/ui/?done=" + bad, ""},
						{"GET", "/ui/orders?prefix=" + bad, ""},
						{"GET", "/ui/orders?prefix=a" + bad + "b", ""},
						{"GET", "/ui/orders?status=" + bad, ""},
						{"GET", "/ui/orders?from=" + bad, ""},
						{"GET", "/ui/orders?to=" + bad, ""},
						{"GET", "/ui/orders?refund=" + bad, ""},
						{"GET", "/ui/orders?past_deadline=" + bad, ""},
						{"GET", "/ui/search?q=" + bad, ""},
						{"GET", "/ui/search?q=a" + bad + "b", ""},
						{"GET", "/?fragment=" + bad, ""},
						{"GET", "/ui/orders?cursor=" + bad, ""},
						{"GET", "/ui/orders?cursor=" + cursor("a"+map[string]string{"%00": "\x00", "%ff": "\xff"}[bad]), ""},
						{"GET", "/ui/orders?" + bad + "=1", ""},
						{"GET", "/ui/orders/a" + bad + "b", ""},
						{"GET", "/ui/orders/" + bad, ""},
						{"GET", "/ui/orders/a" + bad + "b/cancel", ""},
						{"GET", "/ui/orders/a" + bad + "b/check", ""},
						{"GET", "/ui/orders/o-1/" + bad, ""},
						{"GET", "/ui/skus?after=" + bad, ""},
						{"GET", "/ui/events?after=" + bad, ""},
						{"GET", "/ui/events?dead=" + bad, ""},
						{"GET", "/ui/tasks?after=" + bad, ""},
						{"GET", "/ui/tasks?dead=" + bad, ""},
						{"GET", "/ui/hook-failures?x=" + bad, ""},
						{"GET", "/ui/login?next=" + bad, ""},
						{"GET", "/ui/static/app.js?v=" + bad, ""},
						{"POST", "/ui/orders/a" + bad + "b/cancel", csrf},
						{"POST", "/ui/orders/a" + bad + "b/check", csrf},
						{"POST", "/ui/orders/o-1/cancel", csrf + "&note=" + bad},
						{"GET", "/ui/events/retry?id=" + bad + "&sink=s", ""},
						{"GET", "/ui/tasks/retry?id=a" + bad, ""},
						{"POST", "/ui/events/retry", csrf + "&id=e&sink=" + bad},
						{"POST", "/ui/commands/retry", csrf + "&id=" + bad},
						{"POST", "/ui/orders/o-1/extend", csrf + "&timeout=" + bad},
						{"POST", "/ui/orders/o-1/operator-cancel", csrf + "&close=" + bad},
						{"POST", "/ui/audit?x=" + bad, csrf},
						{"POST", "/ui/audit", csrf + "&x=" + bad},
						{"POST", "/ui/logout", csrf + "&" + bad + "=1"},
						{"POST", "/ui/login", "token=" + bad + "&next=/"},
						{"POST", "/ui/login", "token=x&next=/ui/" + bad},
					}
					for _, c := range cases {
						if status, body := b.do(t, c.method, c.path, c.form); status != http.StatusBadRequest {
							t.Errorf("%s %s %s: %d, want 400:\n%.300s", c.method, c.path, c.form, status, body)
						}
					}
				}
				// The same pages with plain text still answer.
				for _, p := range []string{"/ui/orders?prefix=a", "/ui/orders?status=PAYING&past_deadline=1", "/ui/orders?past_deadline=1&refund=1",
					"/?fragment=live", "/ui/skus?after=a", "/ui/tasks?after=a", "/ui/events?after=1", "/ui/hook-failures"} {
					if status, body := b.do(t, "GET", p, ""); status != http.StatusOK {
						t.Errorf("GET %s: %d:\n%.300s", p, status, body)
					}
				}
				if status, _ := b.do(t, "GET", "/ui/orders/nope", ""); status != http.StatusNotFound {
					t.Errorf("GET /ui/orders/nope: %d, want 404", status)
				}
				if status, _ := b.do(t, "GET", "/ui/search?q=nope", ""); status != http.StatusNotFound {
					t.Errorf("GET /ui/search?q=nope: %d, want 404", status)
				}
			})
		}
	}
}
