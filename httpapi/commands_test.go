package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/ordersvctest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
)

// ---------------------------------------------------------------------------
// Order-service mode over HTTP: GET /v1/commands, POST /v1/commands/retry
// and /purge, and the order's commands in GET /v1/orders/{id}, against a
// real receiver on PostgreSQL.
// ---------------------------------------------------------------------------

type commandsPage struct {
	Commands  []order.Command `json:"commands"`
	NextAfter string          `json:"next_after"`
}

func (e *env) listCommands(t *testing.T, query string) commandsPage {
	t.Helper()
	r := e.do(t, "GET", "/v1/commands"+query, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/commands%s: %d %s", query, r.Status, r.Body)
	}
	var p commandsPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// count answers POST path with body and returns the count under key.
func (e *env) count(t *testing.T, path string, body any, key string) int64 {
	t.Helper()
	r := e.do(t, "POST", path, body)
	if r.Status != http.StatusOK {
		t.Fatalf("POST %s %v: %d %s", path, body, r.Status, r.Body)
	}
	var out map[string]int64
	if err := json.Unmarshal(r.Body, &out); err != nil || len(out) != 1 {
		t.Fatalf("POST %s: %s, want {%q: n}", path, r.Body, key)
	}
	n, ok := out[key]
	if !ok {
		t.Fatalf("POST %s: %s, want {%q: n}", path, r.Body, key)
	}
	return n
}

func TestCommandsOverHTTP(t *testing.T) {
	rcv := ordersvctest.New(t)
	e := newEnv(t, envConfig{Postgres: true, OrderService: rcv.Client(t), Commands: ordersvc.DispatcherConfig{
		Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, PayingMin: 50 * time.Millisecond}})
	// c-ok is pending at the order service, c-gone unknown to it
	// (not_found: DEAD), c-refused refused (400: DEAD).
	rcv.Set("c-ok", ordersvctest.Pending)
	rcv.Set("c-refused", ordersvctest.Refuse)
	for _, id := range []string{"c-ok", "c-gone", "c-refused"} {
		if o := e.create(t, createReq{ID: id, Items: []item{{"tee", 1}}, AmountCents: 100, TimeoutSeconds: secs(0.05)}); len(o.Items) != 0 {
			t.Fatalf("registered %+v: the items are not held", o)
		}
	}
	eventually(t, "c-gone's and c-refused's commands DEAD, c-ok CANCELLED", func() bool {
		return len(e.listCommands(t, "?dead=true").Commands) == 2 && e.get(t, "c-ok").Status == order.Cancelled
	})

	// GET /v1/orders/{id} carries the order's commands.
	ok := e.get(t, "c-ok")
	if len(ok.Commands) != 1 || ok.Commands[0].Status != order.TaskDone || ok.Commands[0].Result != string(ordersvc.Cancelled) ||
		ok.Commands[0].ID != ordersvc.CommandID("c-ok", ok.CancelAfter) || ok.Commands[0].DoneAt.IsZero() {
		t.Fatalf("c-ok's commands %+v: want its one command DONE, cancelled", ok.Commands)
	}
	gone := e.get(t, "c-gone")
	if gone.Status != order.Cancelling || len(gone.Commands) != 1 || gone.Commands[0].Status != order.TaskDead ||
		gone.Commands[0].Result != string(ordersvc.NotFound) || gone.Commands[0].DeadAt.IsZero() {
		t.Fatalf("c-gone %s with commands %+v: want CANCELLING, its command DEAD, not_found", gone.Status, gone.Commands)
	}
	refused := e.get(t, "c-refused")
	if c := refused.Commands; len(c) != 1 || c[0].Status != order.TaskDead || c[0].Result != "" || !strings.Contains(c[0].LastError, "400") {
		t.Fatalf("c-refused's commands %+v: want DEAD with the 400 as its error", c)
	}
	raw := e.do(t, "GET", "/v1/orders/c-ok", nil)
	if !strings.Contains(string(raw.Body), `"commands":[{"id":"`+ok.Commands[0].ID+`","order_id":"c-ok","cancel_after":"`) ||
		strings.Contains(string(raw.Body), `"next_at"`) {
		t.Errorf("c-ok's JSON: %s", raw.Body)
	}

	// The listing: not DONE by default, pages by id, every command of one order.
	if p := e.listCommands(t, ""); len(p.Commands) != 2 || p.NextAfter != "" {
		t.Fatalf("commands not DONE: %+v, want the two DEAD", p)
	}
	first := e.listCommands(t, "?limit=1")
	if len(first.Commands) != 1 || first.NextAfter != first.Commands[0].ID {
		t.Fatalf("page of 1: %+v, want one command and a next_after", first)
	}
	if rest := e.listCommands(t, "?limit=1&after="+url.QueryEscape(first.NextAfter)); len(rest.Commands) != 1 ||
		rest.Commands[0].ID <= first.Commands[0].ID || rest.NextAfter != "" {
		t.Fatalf("second page: %+v", rest)
	}
	if p := e.listCommands(t, "?order_id=c-ok"); len(p.Commands) != 1 || p.Commands[0].Status != order.TaskDone {
		t.Fatalf("c-ok's commands: %+v, want its DONE one", p.Commands)
	}
	if p := e.listCommands(t, "?order_id=nobody"); len(p.Commands) != 0 || !strings.Contains(string(e.do(t, "GET", "/v1/commands?order_id=nobody", nil).Body), `"commands":[]`) {
		t.Fatalf("commands of an unknown order: %+v", p)
	}

	// Bad input: 400 invalid_field, nothing done.
	for _, q := range []string{"?dead=maybe", "?limit=0", "?limit=501", "?limit=x", "?order_id=not%20an%20id", "?after=%00", "?after=" + strings.Repeat("a", 65)} {
		wantError(t, e.do(t, "GET", "/v1/commands"+q, nil), http.StatusBadRequest, "invalid_field")
	}
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("cmd_%d", i)
	}
	for _, path := range []string{"/v1/commands/retry", "/v1/commands/purge"} {
		for _, body := range []any{`{}`, `{"dead":false}`, `{"ids":["a"],"dead":true}`, `{"ids":[""]}`, `{"ids":[]}`, map[string]any{"ids": tooMany}} {
			wantError(t, e.do(t, "POST", path, body), http.StatusBadRequest, "invalid_field")
		}
		wantError(t, e.do(t, "POST", path, `{"all":true}`), http.StatusBadRequest, "invalid_field")
		wantError(t, e.do(t, "POST", path, `{"dead":`), http.StatusBadRequest, "invalid_json")
		wantError(t, e.do(t, "GET", path, nil), http.StatusMethodNotAllowed, "method_not_allowed")
	}
	if p := e.listCommands(t, "?dead=true"); len(p.Commands) != 2 {
		t.Fatalf("after the refused requests: %d DEAD, want 2", len(p.Commands))
	}

	// An id that names no DEAD command counts nothing.
	if n := e.count(t, "/v1/commands/retry", map[string]any{"ids": []string{ok.Commands[0].ID, "cmd_nothing"}}, "retried"); n != 0 {
		t.Fatalf("retry of a DONE command and an unknown id: %d", n)
	}
	if n := e.count(t, "/v1/commands/purge", map[string]any{"ids": []string{ok.Commands[0].ID}}, "purged"); n != 0 {
		t.Fatalf("purge of a DONE command: %d", n)
	}

	// The order service learns of c-gone: the operator sends its command
	// again, under the same id, and the answer cancels it.
	rcv.Set("c-gone", ordersvctest.Pending)
	if n := e.count(t, "/v1/commands/retry", map[string]any{"ids": []string{gone.Commands[0].ID}}, "retried"); n != 1 {
		t.Fatalf("retry c-gone's command: %d, want 1", n)
	}
	eventually(t, "c-gone CANCELLED", func() bool { return e.get(t, "c-gone").Status == order.Cancelled })
	if got := e.get(t, "c-gone"); len(got.Commands) != 1 || got.Commands[0].ID != gone.Commands[0].ID || got.Commands[0].Status != order.TaskDone ||
		got.CancelReason != order.ReasonTimeout {
		t.Fatalf("c-gone after the retry: %s %s, commands %+v", got.Status, got.CancelReason, got.Commands)
	}
	if _, cancels := rcv.Deliveries("c-gone"); cancels != 1 {
		t.Fatalf("c-gone: %d cancels applied at the order service, want 1", cancels)
	}

	// c-refused is given up on: purged, its order stays CANCELLING, and the
	// audit reports it (the closing audit expects exactly that).
	if n := e.count(t, "/v1/commands/purge", map[string]bool{"dead": true}, "purged"); n != 1 {
		t.Fatalf("purge every DEAD command: %d, want 1", n)
	}
	if p := e.listCommands(t, "?dead=true"); len(p.Commands) != 0 {
		t.Fatalf("DEAD after the purge: %+v", p.Commands)
	}
	raw = e.do(t, "GET", "/v1/orders/c-refused", nil)
	if o := wantOrder(t, raw, http.StatusOK); o.Status != order.Cancelling || strings.Contains(string(raw.Body), `"commands"`) {
		t.Fatalf("c-refused after the purge: %s", raw.Body)
	}
	e.expected = map[string]int64{"commanded_unanswered": 1}
}
