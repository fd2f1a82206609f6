package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/store"
)

// ---------------------------------------------------------------------------
// GET /v1/events and POST /v1/events/retry
// ---------------------------------------------------------------------------

// deadSinks registers sinks beside the service's own (its relay delivers to
// the log sink and never to these), makes orders ev-00… with one event each,
// and has every sink refuse every event for good: each event is dead for
// each sink. It returns the event ids in seq order.
func (e *env) deadSinks(t *testing.T, sinks []string, orders int) []string {
	t.Helper()
	ctx := context.Background()
	// Before the events exist, so that their fan-out includes these sinks.
	if err := e.st.RegisterSinks(ctx, sinks); err != nil {
		t.Fatal(err)
	}
	e.setStock(t, "ev", int64(orders))
	for i := range orders {
		e.create(t, createReq{ID: fmt.Sprintf("ev-%02d", i), Items: []item{{"ev", 1}}, AmountCents: 100})
	}
	var ids []string
	for _, sink := range sinks {
		// Another transaction (the service's own relay) may hold the
		// fan-out turn for a moment: claim until every event is in hand.
		var ds []store.Delivery
		for deadline := time.Now().Add(10 * time.Second); len(ds) < orders; {
			ds = append(ds, e.claim(t, sink)...)
			if len(ds) < orders && time.Now().After(deadline) {
				t.Fatalf("sink %s claimed %d events in 10 s, want %d", sink, len(ds), orders)
			}
		}
		if len(ds) != orders {
			t.Fatalf("sink %s claimed %d events, want %d", sink, len(ds), orders)
		}
		outcomes := make([]store.Outcome, len(ds))
		for i, d := range ds {
			outcomes[i] = store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "422 Unprocessable Entity:\nno such customer", Refused: true, Dead: true}
		}
		if err := e.st.SettleEvents(ctx, sink, outcomes); err != nil {
			t.Fatal(err)
		}
		if ids == nil {
			for _, d := range ds {
				ids = append(ids, d.ID)
			}
		}
	}
	return ids
}

// claim leases what sink has due, as a relay would.
func (e *env) claim(t *testing.T, sink string) []store.Delivery {
	t.Helper()
	ds, err := e.st.ClaimEvents(context.Background(), store.ClaimEventsParams{Sink: sink, Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim for %s: %v", sink, err)
	}
	return ds
}

type eventJSON struct {
	Seq           int64           `json:"seq"`
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	OrderID       string          `json:"order_id"`
	Sink          string          `json:"sink"`
	Dead          bool            `json:"dead"`
	Attempts      int             `json:"attempts"`
	Refusals      int             `json:"refusals"`
	NextAttemptAt string          `json:"next_attempt_at"`
	DeadAt        string          `json:"dead_at"`
	LastError     string          `json:"last_error"`
	CreatedAt     string          `json:"created_at"`
	Payload       json.RawMessage `json:"payload"`
}

type eventsPage struct {
	Events    []eventJSON
	NextAfter int64 // 0: absent
}

// listEvents GETs /v1/events?query and checks the answer's shape: exactly
// the documented keys, times in the API's format, the payload an object.
func (e *env) listEvents(t *testing.T, query string) eventsPage {
	t.Helper()
	r := e.do(t, "GET", "/v1/events?"+query, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/events?%s: %d %s", query, r.Status, r.Body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &top); err != nil {
		t.Fatalf("the list is not a JSON object: %v: %s", err, r.Body)
	}
	for k := range top {
		if k != "events" && k != "next_after" {
			t.Errorf("the list has an unexpected key %q", k)
		}
	}
	var page eventsPage
	if raw, ok := top["next_after"]; ok {
		if err := json.Unmarshal(raw, &page.NextAfter); err != nil || page.NextAfter < 1 {
			t.Errorf("next_after = %s, want a seq (omitted on the last page)", raw)
		}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(top["events"], &raws); err != nil || raws == nil {
		t.Fatalf("events = %s, want an array", top["events"])
	}
	required := []string{"seq", "id", "type", "order_id", "sink", "dead", "attempts", "refusals", "next_attempt_at", "created_at", "payload"}
	for _, raw := range raws {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("an event is not an object: %s", raw)
		}
		for _, k := range required {
			if _, ok := m[k]; !ok {
				t.Errorf("event lacks %q: %s", k, raw)
			}
		}
		for k := range m {
			if !slices.Contains(required, k) && k != "dead_at" && k != "last_error" {
				t.Errorf("event has unexpected field %q: %s", k, raw)
			}
		}
		var ev eventJSON
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("decode event: %v: %s", err, raw)
		}
		for k, v := range map[string]string{"next_attempt_at": ev.NextAttemptAt, "created_at": ev.CreatedAt, "dead_at": ev.DeadAt} {
			if (v != "" || k != "dead_at") && !timeRE.MatchString(v) {
				t.Errorf("event %s = %q, want RFC 3339 UTC with milliseconds", k, v)
			}
		}
		if ev.Dead != (ev.DeadAt != "") {
			t.Errorf("event dead %v with dead_at %q: dead_at goes with dead", ev.Dead, ev.DeadAt)
		}
		var payload map[string]any
		if err := json.Unmarshal(ev.Payload, &payload); err != nil || payload["id"] != ev.OrderID {
			t.Errorf("payload %s, want the order's JSON object", ev.Payload)
		}
		page.Events = append(page.Events, ev)
	}
	return page
}

type sinkSeq struct {
	seq  int64
	sink string
}

func TestListEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	const orders = 7
	ids := e.deadSinks(t, []string{"hook", "mq"}, orders)

	dead := e.listEvents(t, "dead=true")
	if len(dead.Events) != 2*orders || dead.NextAfter != 0 {
		t.Fatalf("dead=true: %d events, next_after %d; want %d (each event for both sinks) on one page", len(dead.Events), dead.NextAfter, 2*orders)
	}
	var all []sinkSeq
	for i, ev := range dead.Events {
		want := sinkSeq{dead.Events[i/2*2].Seq, []string{"hook", "mq"}[i%2]}
		if (sinkSeq{ev.Seq, ev.Sink}) != want || ev.ID != ids[i/2] {
			t.Errorf("event %d: seq %d sink %s id %s, want seq order then sink order", i, ev.Seq, ev.Sink, ev.ID)
		}
		if !ev.Dead || ev.Attempts != 1 || ev.Refusals != 1 || ev.Type != "order.created" || ev.OrderID != fmt.Sprintf("ev-%02d", i/2) {
			t.Errorf("event %d: %+v, want a dead order.created of ev-%02d after one refused attempt", i, ev, i/2)
		}
		if ev.LastError != "422 Unprocessable Entity:\nno such customer" {
			t.Errorf("last_error %q, want the sink's error", ev.LastError)
		}
		all = append(all, sinkSeq{ev.Seq, ev.Sink})
	}

	t.Run("sink narrows", func(t *testing.T) {
		t.Parallel()
		page := e.listEvents(t, "dead=true&sink=mq")
		if len(page.Events) != orders {
			t.Fatalf("sink=mq: %d events, want %d", len(page.Events), orders)
		}
		for _, ev := range page.Events {
			if ev.Sink != "mq" {
				t.Errorf("sink=mq listed %s's delivery", ev.Sink)
			}
		}
		if page := e.listEvents(t, "sink=nope"); len(page.Events) != 0 {
			t.Errorf("an unknown sink listed %d events", len(page.Events))
		}
	})
	for _, limit := range []int{1, 2, 3, 5, 13, 14, 15, 500} {
		t.Run(fmt.Sprintf("limit %d walks every delivery once, never splitting an event", limit), func(t *testing.T) {
			t.Parallel()
			var got []sinkSeq
			after := int64(0)
			for pages := 0; ; pages++ {
				if pages > 2*orders {
					t.Fatal("paging does not end")
				}
				q := fmt.Sprintf("dead=true&limit=%d", limit)
				if after > 0 {
					q += fmt.Sprintf("&after=%d", after)
				}
				page := e.listEvents(t, q)
				if len(page.Events) > max(limit, 2) {
					t.Errorf("%s: %d events", q, len(page.Events))
				}
				for _, ev := range page.Events {
					got = append(got, sinkSeq{ev.Seq, ev.Sink})
				}
				if page.NextAfter == 0 {
					break
				}
				if last := page.Events[len(page.Events)-1].Seq; page.NextAfter != last {
					t.Fatalf("%s: next_after %d, want the page's last seq %d", q, page.NextAfter, last)
				}
				after = page.NextAfter
			}
			if !slices.Equal(got, all) {
				t.Errorf("walked %v\nwant %v", got, all)
			}
		})
	}
	bad := []string{
		"dead=yes", "dead=1", "limit=0", "limit=-1", "limit=501", "limit=ten",
		"after=-1", "after=x", "after=1.5", "sink=ho%00ok", "sink=%FF",
	}
	for _, q := range bad {
		t.Run("bad query "+q, func(t *testing.T) {
			t.Parallel()
			wantError(t, e.do(t, "GET", "/v1/events?"+q, nil), http.StatusBadRequest, "invalid_field")
		})
	}
}

func TestRetryEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour})
	const orders = 4
	ids := e.deadSinks(t, []string{"hook", "mq"}, orders)
	retry := func(t *testing.T, body string) int64 {
		t.Helper()
		r := e.do(t, "POST", "/v1/events/retry", body)
		if r.Status != http.StatusOK {
			t.Fatalf("retry %s: %d %s", body, r.Status, r.Body)
		}
		var m map[string]json.RawMessage
		var n int64
		if err := json.Unmarshal(r.Body, &m); err != nil || len(m) != 1 || json.Unmarshal(m["retried"], &n) != nil {
			t.Fatalf("retry %s answered %s, want {\"retried\": N}", body, r.Body)
		}
		return n
	}
	claimedIDs := func(t *testing.T, sink string) []string {
		t.Helper()
		var out []string
		for _, d := range e.claim(t, sink) {
			out = append(out, d.ID)
		}
		return out
	}

	// Nothing is due while every event is dead.
	if got := claimedIDs(t, "hook"); len(got) != 0 {
		t.Fatalf("claimed %v while dead", got)
	}
	// By id, for one sink: due again for it, still dead for the other.
	if n := retry(t, fmt.Sprintf(`{"ids": [%q, "no-such-event"], "sink": "hook"}`, ids[0])); n != 1 {
		t.Fatalf("retry of one event for hook: %d, want 1", n)
	}
	if got := claimedIDs(t, "hook"); !slices.Equal(got, ids[:1]) {
		t.Fatalf("hook claimed %v after the retry, want %v", got, ids[:1])
	}
	if got := claimedIDs(t, "mq"); len(got) != 0 {
		t.Fatalf("mq claimed %v: the retry named hook only", got)
	}
	// By id for every sink.
	if n := retry(t, fmt.Sprintf(`{"ids": [%q]}`, ids[1])); n != 2 {
		t.Fatalf("retry of one event for every sink: %d, want 2", n)
	}
	// Every dead one of a sink, then of every sink.
	if n := retry(t, `{"dead": true, "sink": "mq"}`); n != orders-1 {
		t.Fatalf("retry of mq's dead: %d, want %d", n, orders-1)
	}
	if got := claimedIDs(t, "mq"); !slices.Equal(got, ids) {
		t.Fatalf("mq claimed %v after retrying every dead one, want %v", got, ids)
	}
	if n := retry(t, `{"dead": true}`); n != orders-2 {
		t.Fatalf("retry of every dead one: %d, want hook's %d left", n, orders-2)
	}
	if got := claimedIDs(t, "hook"); !slices.Equal(got, ids[1:]) {
		t.Fatalf("hook claimed %v, want %v (ids[0] is leased already)", got, ids[1:])
	}
	if page := e.listEvents(t, "dead=true"); len(page.Events) != 0 {
		t.Fatalf("%d dead after retrying all", len(page.Events))
	}
	if page := e.listEvents(t, "dead=false&sink=hook"); len(page.Events) != orders || page.Events[0].Dead || page.Events[0].Refusals != 0 {
		t.Fatalf("hook's pending after the retry: %+v, want %d not dead, refusals cleared", page.Events, orders)
	}
	if n := retry(t, `{"dead": true}`); n != 0 {
		t.Fatalf("retry with nothing dead: %d", n)
	}

	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("%q", fmt.Sprintf("id-%d", i))
	}
	for _, c := range []struct{ name, body, code string }{
		{"neither ids nor dead", `{}`, "invalid_field"},
		{"only a sink", `{"sink": "hook"}`, "invalid_field"},
		{"no ids", `{"ids": []}`, "invalid_field"},
		{"null ids", `{"ids": null}`, "invalid_field"},
		{"both", fmt.Sprintf(`{"ids": [%q], "dead": true}`, ids[0]), "invalid_field"},
		{"dead false", `{"dead": false}`, "invalid_field"},
		{"dead false with ids", fmt.Sprintf(`{"ids": [%q], "dead": false}`, ids[0]), "invalid_field"},
		{"1,001 ids", `{"ids": [` + strings.Join(tooMany, ",") + `]}`, "invalid_field"},
		{"an empty id", `{"ids": ["a", ""]}`, "invalid_field"},
		{"an empty sink", `{"dead": true, "sink": ""}`, "invalid_field"},
		{"a sink with a NUL", `{"dead": true, "sink": "ho\u0000ok"}`, "invalid_field"},
		{"ids not an array", `{"ids": "x"}`, "invalid_field"},
		{"dead not a boolean", `{"dead": "true"}`, "invalid_field"},
		{"an unknown field", `{"id": ["x"]}`, "invalid_field"},
		{"a field in another case", `{"DEAD": true}`, "invalid_field"},
		{"no body", ``, "invalid_json"},
		{"not JSON", `{"dead": tru`, "invalid_json"},
	} {
		t.Run(c.name+" is 400", func(t *testing.T) {
			wantError(t, e.do(t, "POST", "/v1/events/retry", c.body), http.StatusBadRequest, c.code)
		})
	}
	t.Run("a body not declared JSON is 415", func(t *testing.T) {
		wantError(t, e.do(t, "POST", "/v1/events/retry", `{"dead": true}`, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type")
	})
	t.Run("GET is 405", func(t *testing.T) {
		r := e.do(t, "GET", "/v1/events/retry", nil)
		wantError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
		if r.Header.Get("Allow") != "POST" {
			t.Errorf("Allow %q, want POST", r.Header.Get("Allow"))
		}
	})
}

// The routes run on PostgreSQL too: a list, a retry, and input PostgreSQL
// would refuse in text answered 400, not 500.
func TestEventsOnPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Grace: time.Hour, Postgres: true})
	ids := e.deadSinks(t, []string{"hook", "mq"}, 3)
	if page := e.listEvents(t, "dead=true&limit=5"); len(page.Events) != 4 || page.NextAfter != page.Events[3].Seq {
		t.Fatalf("limit 5 over 3 events × 2 sinks: %d events, next_after %d; want the first 2 events whole", len(page.Events), page.NextAfter)
	}
	r := e.do(t, "POST", "/v1/events/retry", fmt.Sprintf(`{"ids": [%q, "not-a-uuid"], "sink": "mq"}`, ids[2]))
	if r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != `{"retried":1}` {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	if ds := e.claim(t, "mq"); len(ds) != 1 || ds[0].ID != ids[2] {
		t.Fatalf("mq claimed %+v after the retry, want %s", ds, ids[2])
	}
	wantError(t, e.do(t, "GET", "/v1/events?sink="+url.QueryEscape("a\x00b"), nil), http.StatusBadRequest, "invalid_field")
	wantError(t, e.do(t, "POST", "/v1/events/retry", `{"ids": ["a\u0000b"]}`), http.StatusBadRequest, "invalid_field")
}
