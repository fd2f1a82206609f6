package httpapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/store"
)

// The operators' view of the outbox: what each sink has not taken yet, and
// the dead letters (events a sink refused for good) that hold back the
// later events of their order for that sink. `lapse events` does the same
// from the command line, on the store directly.

// listEvents is GET /v1/events?dead=&sink=&limit=&after=.
func (s *server) listEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := store.ListEventsParams{Sink: q.Get("sink")}
	var err error
	if p.Dead, err = deadParam(q); err != nil {
		return err
	}
	if p.Limit, err = limitParam(q, lapse.MaxEventsLimit); err != nil {
		return err
	}
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			return badRequest("invalid_field", "after: want a seq (an integer, 0 or more): the previous page's next_after")
		}
		p.After = n
	}
	page, err := s.svc.ListEvents(r.Context(), p)
	if err != nil {
		return err
	}
	out := struct {
		Events []lapse.EventView `json:"events"`
		// NextAfter is left out on the last page.
		NextAfter int64 `json:"next_after,omitempty"`
	}{Events: make([]lapse.EventView, len(page.Events)), NextAfter: page.NextAfter}
	for i, d := range page.Events {
		if out.Events[i], err = lapse.ViewEvent(d); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

type retryEventsBody struct {
	IDs  []string `json:"ids"`
	Dead *bool    `json:"dead"`
	Sink *string  `json:"sink"`
}

// retryEvents is POST /v1/events/retry: {"ids": […]} or {"dead": true},
// "sink" narrowing either.
func (s *server) retryEvents(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b retryEventsBody
	if err := decodeStrict(body, &b); err != nil {
		return err
	}
	if err := retrySelection("event", b.IDs, b.Dead); err != nil {
		return err
	}
	switch {
	case b.Sink != nil && *b.Sink == "":
		return badRequest("invalid_field", "sink: must not be empty (leave it out for every sink)")
	}
	p := store.RetryEventsParams{IDs: b.IDs, AllDead: b.Dead != nil}
	if b.Sink != nil {
		p.Sink = *b.Sink
	}
	n, err := s.svc.RetryEvents(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"retried": n})
}

// deadParam reads the dead=true|false filter of an operators' listing.
func deadParam(q url.Values) (bool, error) {
	switch q.Get("dead") {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, badRequest("invalid_field", "dead: want true or false")
}

// limitParam reads a listing's page size: 0 (the default) when absent.
func limitParam(q url.Values, max int) (int, error) {
	l := q.Get("limit")
	if l == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 {
		return 0, badRequest("invalid_field", "limit: want an integer between 1 and %d", max)
	}
	return n, nil
}

// retrySelection checks the body of an operators' retry of dead work:
// {"ids": […]} or {"dead": true}, one of the two.
func retrySelection(what string, ids []string, dead *bool) error {
	return deadSelection("retry", what, ids, dead)
}

// deadSelection checks the body of an operators' verb (retry, purge) on
// dead work; see retrySelection.
func deadSelection(verb, what string, ids []string, dead *bool) error {
	switch {
	case dead != nil && !*dead:
		return badRequest("invalid_field", "dead: want true (%s every dead %s), or leave it out and give ids", verb, what)
	case ids != nil && dead != nil:
		return badRequest("invalid_field", "give ids or dead, not both")
	case ids == nil && dead == nil:
		return badRequest("invalid_field", "give ids (the %ss to %s) or dead: true (every dead %s)", what, verb, what)
	}
	return nil
}
