package lapse_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// fanOut makes orders, one event each, and fans them out to every sink
// (a claim does that) without settling anything: each event has one
// pending delivery per sink.
func fanOut(t *testing.T, st store.Store, sinks []string, orders int) {
	t.Helper()
	ctx := context.Background()
	if err := st.RegisterSinks(ctx, sinks); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, st, 1000, "sku")
	for i := range orders {
		storetest.Create(t, st, fmt.Sprintf("p%02d", i), "sku")
	}
	if _, err := st.ClaimEvents(ctx, store.ClaimEventsParams{Sink: sinks[0], Limit: 1, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

type delivery struct {
	seq  int64
	sink string
}

func deliveries(ds []store.EventDelivery) []delivery {
	out := make([]delivery, len(ds))
	for i, d := range ds {
		out[i] = delivery{d.Seq, d.Sink}
	}
	return out
}

// A page ends after a whole event: with three sinks an event has three
// deliveries, and a page cut between them would lose the rest, since the
// next page starts after a seq. Every limit walks every delivery once, in
// order.
func TestPageEventsNeverSplitsAnEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	defer st.Close()
	sinks := []string{"a", "b", "c"}
	fanOut(t, st, sinks, 7)
	all, err := st.ListEvents(ctx, store.ListEventsParams{Limit: 1000})
	if err != nil || len(all) != 21 {
		t.Fatalf("setup: %d deliveries (%v), want 7 events × 3 sinks", len(all), err)
	}
	walk := func(t *testing.T, p store.ListEventsParams) []store.EventDelivery {
		t.Helper()
		var got []store.EventDelivery
		for pages := 0; ; pages++ {
			if pages > len(all) {
				t.Fatalf("limit %d: the walk does not end", p.Limit)
			}
			page, err := lapse.PageEvents(ctx, st, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) == 0 {
				t.Fatalf("limit %d after %d: an empty page", p.Limit, p.After)
			}
			if len(page.Events) > p.Limit && page.Events[0].Seq != page.Events[len(page.Events)-1].Seq {
				t.Errorf("limit %d after %d: %d deliveries of several events", p.Limit, p.After, len(page.Events))
			}
			got = append(got, page.Events...)
			if page.NextAfter == 0 {
				return got
			}
			if last := page.Events[len(page.Events)-1].Seq; page.NextAfter != last {
				t.Fatalf("limit %d: next_after %d, want the page's last seq %d", p.Limit, page.NextAfter, last)
			}
			p.After = page.NextAfter
		}
	}
	for limit := 1; limit <= 22; limit++ {
		if got := walk(t, store.ListEventsParams{Limit: limit}); !slices.Equal(deliveries(got), deliveries(all)) {
			t.Errorf("limit %d walked %v\nwant %v", limit, deliveries(got), deliveries(all))
		}
	}
	// One sink's deliveries page exactly by the limit.
	var wantB []delivery
	for _, d := range all {
		if d.Sink == "b" {
			wantB = append(wantB, delivery{d.Seq, d.Sink})
		}
	}
	page, err := lapse.PageEvents(ctx, st, store.ListEventsParams{Sink: "b", Limit: 3})
	if err != nil || len(page.Events) != 3 || page.NextAfter != page.Events[2].Seq {
		t.Fatalf("sink b, limit 3: %v next %d (%v)", deliveries(page.Events), page.NextAfter, err)
	}
	if got := walk(t, store.ListEventsParams{Sink: "b", Limit: 3}); !slices.Equal(deliveries(got), wantB) {
		t.Errorf("sink b walked %v, want %v", deliveries(got), wantB)
	}
	// The last page says so, even when it is exactly full.
	page, err = lapse.PageEvents(ctx, st, store.ListEventsParams{Limit: 21})
	if err != nil || len(page.Events) != 21 || page.NextAfter != 0 {
		t.Fatalf("limit 21 over 21 deliveries: %d, next %d (%v), want all and no next page", len(page.Events), page.NextAfter, err)
	}
}

func TestEventsRequestsAreChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	defer st.Close()
	fanOut(t, st, []string{"hook"}, 3)
	svc := newService(t, lapse.Config{Store: st})
	wantInvalid := func(t *testing.T, err error, field string) {
		t.Helper()
		var inv *lapse.InvalidError
		if !errors.As(err, &inv) || inv.Field != field || inv.Code != "invalid_field" {
			t.Errorf("got %v, want an invalid_field error naming %s", err, field)
		}
	}
	for _, c := range []struct {
		p     store.ListEventsParams
		field string
	}{
		{store.ListEventsParams{Limit: -1}, "limit"},
		{store.ListEventsParams{Limit: lapse.MaxEventsLimit + 1}, "limit"},
		{store.ListEventsParams{After: -1}, "after"},
		{store.ListEventsParams{Sink: "ho\x00ok"}, "sink"},
		{store.ListEventsParams{Sink: "\xff"}, "sink"},
		{store.ListEventsParams{Sink: strings.Repeat("s", 201)}, "sink"},
	} {
		_, err := svc.ListEvents(ctx, c.p)
		wantInvalid(t, err, c.field)
	}
	tooMany := make([]string, lapse.MaxRetryIDs+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("id-%d", i)
	}
	for _, c := range []struct {
		p     store.RetryEventsParams
		field string
	}{
		{store.RetryEventsParams{}, "ids"},
		{store.RetryEventsParams{IDs: []string{}, Sink: "hook"}, "ids"},
		{store.RetryEventsParams{IDs: []string{"x"}, AllDead: true}, "ids"},
		{store.RetryEventsParams{IDs: tooMany}, "ids"},
		{store.RetryEventsParams{IDs: []string{"ok", ""}}, "ids[1]"},
		{store.RetryEventsParams{IDs: []string{"bad\x00"}}, "ids[0]"},
		{store.RetryEventsParams{IDs: []string{strings.Repeat("i", 65)}}, "ids[0]"},
		{store.RetryEventsParams{AllDead: true, Sink: "\x00"}, "sink"},
	} {
		_, err := svc.RetryEvents(ctx, c.p)
		wantInvalid(t, err, c.field)
	}
	// What passes reaches the store: the default page, and a retry of
	// nothing dead.
	page, err := svc.ListEvents(ctx, store.ListEventsParams{})
	if err != nil || len(page.Events) != 3 || page.NextAfter != 0 {
		t.Fatalf("default page: %d events, next %d (%v), want the 3 and no more", len(page.Events), page.NextAfter, err)
	}
	if n, err := svc.RetryEvents(ctx, store.RetryEventsParams{IDs: tooMany[:lapse.MaxRetryIDs]}); err != nil || n != 0 {
		t.Fatalf("retry of %d unknown ids: %d (%v), want 0", lapse.MaxRetryIDs, n, err)
	}
}

// A retried dead event is due again at once, and the event behind it in its
// order waits until it is delivered.
func TestRetryEventsMakesTheDeadDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	defer st.Close()
	if err := st.RegisterSinks(ctx, []string{"hook"}); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, st, 10, "sku")
	storetest.Create(t, st, "r1", "sku")
	if _, err := st.CancelOrder(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	claim := func() []store.Delivery {
		t.Helper()
		ds, err := st.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "hook", Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	ds := claim()
	if len(ds) != 1 {
		t.Fatalf("claimed %d, want r1's first event", len(ds))
	}
	if err := st.SettleEvents(ctx, "hook", []store.Outcome{{Seq: ds[0].Seq, Attempts: ds[0].Attempts, Error: "410 Gone", Refused: true, Dead: true}}); err != nil {
		t.Fatal(err)
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("claimed %d behind a dead event", len(got))
	}
	svc := newService(t, lapse.Config{Store: st})
	page, err := svc.ListEvents(ctx, store.ListEventsParams{Dead: true})
	if err != nil || len(page.Events) != 1 || page.Events[0].ID != ds[0].ID || page.Events[0].DeadAt.IsZero() {
		t.Fatalf("dead list %+v (%v)", page.Events, err)
	}
	if n, err := svc.RetryEvents(ctx, store.RetryEventsParams{IDs: []string{ds[0].ID}}); err != nil || n != 1 {
		t.Fatalf("retry: %d (%v), want 1", n, err)
	}
	again := claim()
	if len(again) != 1 || again[0].ID != ds[0].ID || again[0].Refusals != 0 {
		t.Fatalf("after the retry claimed %+v, want the retried event with its refusals cleared", again)
	}
}
