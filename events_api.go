package lapse

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Bounds of the operators' view of the outbox (GET /v1/events, POST
// /v1/events/retry). A page and a retry each stay one short query.
const (
	// DefaultEventsLimit is the page size of ListEvents when none is given.
	DefaultEventsLimit = 100
	// MaxEventsLimit is the largest page ListEvents serves.
	MaxEventsLimit = 500
	// MaxRetryIDs is the most event ids one RetryEvents names: more is a
	// job for AllDead, narrowed by Sink.
	MaxRetryIDs = 1000
	// maxSinkLen bounds a sink name given as a filter; sinks name
	// themselves with far less.
	maxSinkLen = 200
)

// EventPage is one page of the outbox's pending deliveries.
type EventPage struct {
	// Events are in seq order, then sink order. A page holds every listed
	// delivery of its last event, so that NextAfter, a seq, resumes right
	// after it: with several sinks an event has a delivery per sink, and a
	// cut between them would skip the rest on the next page. (A page can
	// therefore exceed its limit when the limit is below the number of
	// sinks.)
	Events []store.EventDelivery
	// NextAfter is the After of the next page; 0 when this page is the last.
	NextAfter int64
}

// ListEvents returns a page of the outbox's pending deliveries — with
// p.Dead only the dead ones, with p.Sink only that sink's — in seq order,
// for operators looking at what a sink has not taken (GET /v1/events). A
// zero p.Limit is DefaultEventsLimit; p.After is the NextAfter of the
// previous page.
func (s *Service) ListEvents(ctx context.Context, p store.ListEventsParams) (EventPage, error) {
	if p.Limit < 0 || p.Limit > MaxEventsLimit {
		return EventPage{}, invalid("limit", "must be between 1 and %d", MaxEventsLimit)
	}
	if p.After < 0 {
		return EventPage{}, invalid("after", "must be a seq (0 or more)")
	}
	if err := validSinkFilter("sink", p.Sink); err != nil {
		return EventPage{}, err
	}
	return PageEvents(ctx, s.store, p)
}

// RetryEvents makes dead deliveries due again at once — those of the events
// p.IDs names, or with p.AllDead every dead one; p.Sink narrows either — and
// returns how many. An id that names no dead delivery is not an error (it
// was delivered, purged, or never existed): the count tells. The relay is
// woken, so the retried events go out now rather than at its next poll.
func (s *Service) RetryEvents(ctx context.Context, p store.RetryEventsParams) (int64, error) {
	if err := validRetry("event", p.IDs, p.AllDead, MaxRetryIDs, maxIDLen, " of a sink"); err != nil {
		return 0, err
	}
	if err := validSinkFilter("sink", p.Sink); err != nil {
		return 0, err
	}
	n, err := s.store.RetryEvents(ctx, p)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.relay.Notify()
		s.log.Info("outbox: dead events retried", "deliveries", n, "sink", p.Sink, "all_dead", p.AllDead, "ids", len(p.IDs))
	}
	return n, nil
}

// PageEvents reads one page of st's pending deliveries, whole events only
// (see EventPage). ListEvents serves it after checking p; `lapse events
// list`, which opens the store itself, calls it directly.
func PageEvents(ctx context.Context, st store.Outbox, p store.ListEventsParams) (EventPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultEventsLimit
	}
	// One more than the page: a row beyond it says whether another page
	// follows and whether the page's last event is cut. Only when the first
	// event alone has more deliveries than fit is the read widened.
	for fetch := limit + 1; ; fetch *= 2 {
		q := p
		q.Limit = fetch
		ds, err := st.ListEvents(ctx, q)
		if err != nil {
			return EventPage{}, err
		}
		if len(ds) <= limit {
			return EventPage{Events: ds}, nil
		}
		end := limit
		for end > 0 && ds[end-1].Seq == ds[end].Seq {
			end--
		}
		if end == 0 {
			// Every row up to the limit is the first event's: the page is
			// that event, however many sinks it has.
			for end < len(ds) && ds[end].Seq == ds[0].Seq {
				end++
			}
			if end == len(ds) && len(ds) == fetch {
				continue // the event may have more rows still: read more
			}
		}
		page := EventPage{Events: ds[:end]}
		if end < len(ds) {
			page.NextAfter = ds[end-1].Seq
		}
		return page, nil
	}
}

// EventView is one pending delivery as operators see it: an element of
// GET /v1/events's "events", and a line of `lapse events list --json`.
type EventView struct {
	Seq     int64  `json:"seq"`
	ID      string `json:"id"`
	Type    string `json:"type"`
	OrderID string `json:"order_id"`
	Sink    string `json:"sink"`
	Dead    bool   `json:"dead"`
	// Attempts counts the sink's claims of the event, Refusals its
	// refusals (both start again at a retry).
	Attempts int `json:"attempts"`
	Refusals int `json:"refusals"`
	// NextAttemptAt is when the delivery is next due (for a dead one, when
	// it would have been: it waits for a retry).
	NextAttemptAt string `json:"next_attempt_at"`
	// DeadAt is set for a dead delivery; LastError when an attempt failed.
	DeadAt    string `json:"dead_at,omitempty"`
	LastError string `json:"last_error,omitempty"`
	CreatedAt string `json:"created_at"`
	// Payload is the event's JSON, as sinks receive it in their envelope.
	Payload json.RawMessage `json:"payload"`
}

// ViewEvent returns d's EventView. A payload that is not JSON (lapse
// writes none) is an error rather than a broken document.
func ViewEvent(d store.EventDelivery) (EventView, error) {
	if !json.Valid(d.Payload) {
		return EventView{}, fmt.Errorf("lapse: event %s (seq %d): the stored payload is not JSON", d.ID, d.Seq)
	}
	v := EventView{
		Seq: d.Seq, ID: d.ID, Type: d.Type, OrderID: d.OrderID, Sink: d.Sink, Dead: d.Dead,
		Attempts: d.Attempts, Refusals: d.Refusals, NextAttemptAt: order.FormatTime(d.NextAt),
		LastError: d.LastError, CreatedAt: order.FormatTime(d.CreatedAt), Payload: json.RawMessage(d.Payload),
	}
	if d.Dead && !d.DeadAt.IsZero() {
		v.DeadAt = order.FormatTime(d.DeadAt)
	}
	return v, nil
}

// validRetry checks what an operator's retry of dead work (events, stock
// tasks, cancel commands) names: ids, at most max and each an id, or every
// dead one — one of the two.
func validRetry(what string, ids []string, allDead bool, max, idLen int, narrower string) error {
	return validDead("retry", what, ids, allDead, max, idLen, narrower)
}

// validDead checks what an operator's verb (retry, purge) on dead work
// names; see validRetry.
func validDead(verb, what string, ids []string, allDead bool, max, idLen int, narrower string) error {
	switch {
	case len(ids) == 0 && !allDead:
		return invalid("ids", "name the %ss to %s, or %s every dead one", what, verb, verb)
	case len(ids) > 0 && allDead:
		return invalid("ids", "name the %ss to %s or %s every dead one, not both", what, verb, verb)
	case len(ids) > max:
		return invalid("ids", "at most %d %s ids per %s (%s every dead one%s instead)", max, what, verb, verb, narrower)
	}
	for i, id := range ids {
		if id == "" || len(id) > idLen || !plainText(id) {
			return invalid("ids["+strconv.Itoa(i)+"]", "want a%s %s id: 1-%d characters of UTF-8 text", article(what), what, idLen)
		}
	}
	return nil
}

// article is "n" before a word that starts with a vowel.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "n"
	}
	return ""
}

// validSinkFilter checks a sink name given to narrow a listing or a retry
// ("" for every sink): text a store can compare, of a sane length. A name
// no sink has matches nothing, as a filter should.
func validSinkFilter(field, sink string) error {
	if len(sink) > maxSinkLen || !plainText(sink) {
		return invalid(field, "want a sink name: at most %d characters of UTF-8 text", maxSinkLen)
	}
	return nil
}

// plainText reports whether s is valid UTF-8 without NUL characters: what
// every store keeps as text (PostgreSQL refuses the rest).
func plainText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
