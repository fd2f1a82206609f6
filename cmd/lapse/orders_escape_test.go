package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/lapsehq/lapse/order"
)

// hostile holds what a terminal would obey: ESC sequences (clear the
// screen, set the title), CR (rewrite the line), a C1 CSI, a BEL, a
// right-to-left override and a tab (the table's own separator).
const hostile = "\x1b[2J\x1b]0;owned\x07\r\u009b31m\u202eevil\t"

// rawControls names the first character of out a terminal would act on or
// that reorders the text after it, "" when there is none.
func rawControls(out string) string {
	if !utf8.ValidString(out) {
		return "byte that is not UTF-8"
	}
	for _, r := range out {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestOrdersPrintsServerStringsEscaped: `lapse orders` prints what a
// server sends, and a server (or whoever made an order through it) may put
// terminal escapes in any string. Every one of them reaches the terminal
// escaped (\x1b, \u202e…), in the tables, in --json and in an error.
func TestOrdersPrintsServerStringsEscaped(t *testing.T) {
	t.Parallel()
	h := "o-" + hostile
	o := map[string]any{
		"id": h, "status": "PAYING" + hostile, "items": []map[string]any{{"sku": "tee" + hostile, "qty": 1}},
		"amount_cents": 1999, "currency": "USD" + hostile, "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-01T00:15:00Z",
		"cancel_after": "2025-01-01T00:16:00Z", "cancelled_at": "2025-01-01T00:17:00Z", "cancel_reason": "timeout" + hostile,
		"payment_id": "pi" + hostile, "reservation_id": "r" + hostile, "version": 3,
		"payments": []map[string]any{{"payment_id": "pi" + hostile, "status": "PENDING" + hostile, "amount_cents": 1999,
			"created_at": "2025-01-01T00:00:01Z", "updated_at": "2025-01-01T00:00:02Z"}},
		"stock_tasks": []map[string]any{{"id": "t" + hostile, "action": "release" + hostile, "status": "DEAD" + hostile, "attempts": 2,
			"result": "r" + hostile, "last_error": "boom" + hostile, "created_at": "2025-01-01T00:00:03Z"}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/orders":
			_ = json.NewEncoder(w).Encode(map[string]any{"orders": []any{o}, "next_cursor": "c" + hostile})
		case strings.HasSuffix(r.URL.Path, "/cancel"):
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "order_not_pending" + hostile, "message": "no" + hostile}})
		default:
			_ = json.NewEncoder(w).Encode(o)
		}
	}))
	t.Cleanup(srv.Close)
	// The test server's order decodes: the escapes are in its strings.
	var check order.Order
	if err := json.Unmarshal(mustJSON(o), &check); err != nil || check.ID != h {
		t.Fatalf("the test's order does not decode: %v", err)
	}

	for _, args := range [][]string{
		{"orders", "get", "--server", srv.URL, "x"},
		{"orders", "get", "--server", srv.URL, "--json", "x"},
		{"orders", "list", "--server", srv.URL, "--limit", "1"},
		{"orders", "list", "--server", srv.URL, "--limit", "1", "--json"},
		{"orders", "cancel", "--server", srv.URL, "x"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, &stdout, &stderr)
		if code > 1 {
			t.Fatalf("lapse %s: exit %d:\n%s", strings.Join(args, " "), code, stderr.String())
		}
		for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
			if c := rawControls(out); c != "" {
				t.Errorf("lapse %s: %s holds a raw %s:\n%q", strings.Join(args, " "), name, c, out)
			}
		}
		all := stdout.String() + stderr.String()
		isJSON := strings.Contains(strings.Join(args, " "), "--json")
		want := `\x1b[2J`
		if isJSON {
			want = `\u001b[2J`
		}
		if !strings.Contains(all, want) || (!isJSON && !strings.Contains(all, `\u202e`)) {
			t.Errorf("lapse %s: the escapes are not shown escaped (%s, \\u202e):\n%s", strings.Join(args, " "), want, all)
		}
		if isJSON {
			// Still the same JSON: the escaped text decodes to the server's.
			var got order.Order
			if err := json.Unmarshal([]byte(strings.SplitN(stdout.String(), "\n", 2)[0]), &got); err != nil || got.ID != h || got.Currency != "USD"+hostile {
				t.Errorf("lapse %s: --json no longer decodes to the server's strings: %q, %v", strings.Join(args, " "), got.ID, err)
			}
		}
	}
}
