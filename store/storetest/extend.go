package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseExtend runs the cases of Orders.Extend: a PENDING order's
// deadline moves, later or earlier, keeping its grace.
func exerciseExtend(t *testing.T, newStore Factory) {
	t.Run("extend moves both deadlines, keeps the grace, and writes order.extended", func(t *testing.T) { testExtendMoves(t, newStore) })
	t.Run("extend refuses what is not a PENDING order with its window open", func(t *testing.T) { testExtendRefusals(t, newStore) })
	t.Run("an extend racing the timeout cancel at the deadline leaves one verdict", func(t *testing.T) { testExtendRacingTimeout(t, newStore) })
}

// extendedEvents returns the order.extended payloads of an order, oldest first.
func extendedEvents(t testing.TB, s store.Store, id string) []order.Order {
	t.Helper()
	evs, err := s.OrderEvents(context.Background(), id)
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	var out []order.Order
	for _, e := range evs {
		if e.Type != order.EventExtended {
			continue
		}
		var o order.Order
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			t.Fatalf("order.extended payload %s: %v", e.Payload, err)
		}
		out = append(out, o)
	}
	return out
}

func testExtendMoves(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 5, "a")
	o := Create(t, s, "ext", "a")

	// Later: both deadlines move, the grace stays; nanoseconds are dropped
	// as a create drops them.
	later := t0.Add(2*time.Hour + 123456789)
	got, err := s.Extend(ctx, store.ExtendParams{OrderID: "ext", ExpiresAt: later})
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	wantExpires := later.Truncate(time.Millisecond)
	if !got.ExpiresAt.Equal(wantExpires) || !got.CancelAfter.Equal(wantExpires.Add(grace)) ||
		got.Status != order.Pending || got.Version != o.Version+1 || len(got.Items) != 1 {
		t.Fatalf("extended order = %+v; want PENDING, expires_at %v, cancel_after %v, version %d, its item", got, wantExpires, wantExpires.Add(grace), o.Version+1)
	}
	if read := get(t, s, "ext"); !read.ExpiresAt.Equal(got.ExpiresAt) || !read.CancelAfter.Equal(got.CancelAfter) || read.Version != got.Version {
		t.Fatalf("read back %+v, extend answered %+v", read, got)
	}
	evs := extendedEvents(t, s, "ext")
	if len(evs) != 1 || !evs[0].ExpiresAt.Equal(got.ExpiresAt) || !evs[0].CancelAfter.Equal(got.CancelAfter) || evs[0].Status != order.Pending {
		t.Fatalf("order.extended events %+v; want one with the new deadlines", evs)
	}
	// The old deadline is no deadline any more.
	clk.Set(o.CancelAfter)
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"ext"}})
	if err != nil || len(res.Cancelled) != 0 {
		t.Fatalf("cancel at the old deadline: %+v, %v; want nothing cancelled", res, err)
	}
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "ext"}); err != nil {
		t.Fatalf("start payment after the old expires_at, before the new one: %v", err)
	}
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "ext", PaymentID: "ext-1"}); err != nil {
		t.Fatal(err)
	}

	// Earlier (PENDING again after a failed attempt): the window shrinks,
	// still keeping the grace, and the timeout cancel honours it.
	sooner := clk.Now().Add(5 * time.Minute)
	got, err = s.Extend(ctx, store.ExtendParams{OrderID: "ext", ExpiresAt: sooner})
	if err != nil {
		t.Fatalf("shorten: %v", err)
	}
	if !got.ExpiresAt.Equal(sooner) || !got.CancelAfter.Equal(sooner.Add(grace)) || got.PaymentAttempts != 1 {
		t.Fatalf("shortened order = %+v; want expires_at %v, cancel_after %v, one failed attempt", got, sooner, sooner.Add(grace))
	}
	if n := len(extendedEvents(t, s, "ext")); n != 2 {
		t.Fatalf("%d order.extended events, want 2", n)
	}
	if next, ok, err := s.NextDeadline(ctx, false); err != nil || !ok || !next.Equal(got.CancelAfter) {
		t.Fatalf("next deadline %v %v %v; want the shortened cancel_after %v", next, ok, err, got.CancelAfter)
	}
	clk.Set(got.CancelAfter.Add(-time.Millisecond))
	if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"ext"}}); err != nil || len(res.Cancelled) != 0 {
		t.Fatalf("1 ms before the new deadline: %+v, %v", res, err)
	}
	clk.Set(got.CancelAfter)
	if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"ext"}}); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("at the new deadline: %+v, %v; want it cancelled", res, err)
	}

	// An order created with no grace keeps none.
	if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "nograce", Items: []order.Item{{SKU: "a", Qty: 1}},
		AmountCents: 1000, Currency: "EUR", Timeout: timeout}); err != nil {
		t.Fatal(err)
	}
	at := clk.Now().Add(time.Hour)
	if got, err := s.Extend(ctx, store.ExtendParams{OrderID: "nograce", ExpiresAt: at}); err != nil || !got.CancelAfter.Equal(at) {
		t.Fatalf("extend without grace: %+v, %v; want cancel_after = expires_at = %v", got, err, at)
	}
	wantSKU(t, s, "a", 4, 1, 0)
	AuditOK(t, s)
}

func testExtendRefusals(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	for _, st := range []order.Status{order.Pending, order.Paying, order.Paid, order.Cancelled} {
		Create(t, s, "r-"+string(st), "a")
		into(t, s, "r-"+string(st), st)
	}
	ahead := t0.Add(time.Hour)
	unchanged := func(id string, before order.Order) {
		t.Helper()
		if after := get(t, s, id); after.Version != before.Version || !after.ExpiresAt.Equal(before.ExpiresAt) ||
			!after.CancelAfter.Equal(before.CancelAfter) || after.Status != before.Status {
			t.Fatalf("a refused extend changed %s: %+v, was %+v", id, after, before)
		}
		if n := len(extendedEvents(t, s, id)); n != 0 {
			t.Fatalf("a refused extend wrote %d order.extended events for %s", n, id)
		}
	}
	for _, st := range []order.Status{order.Paying, order.Paid, order.Cancelled} {
		id := "r-" + string(st)
		before := get(t, s, id)
		if _, err := s.Extend(ctx, store.ExtendParams{OrderID: id, ExpiresAt: ahead}); !errors.Is(err, store.ErrNotPending) {
			t.Fatalf("extend of a %s order: err = %v, want ErrNotPending", st, err)
		}
		unchanged(id, before)
	}
	if _, err := s.Extend(ctx, store.ExtendParams{OrderID: "missing", ExpiresAt: ahead}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("extend of an unknown order: err = %v, want ErrNotFound", err)
	}
	pending := get(t, s, "r-PENDING")
	for _, at := range []time.Time{t0, t0.Add(-time.Second), {}} {
		if _, err := s.Extend(ctx, store.ExtendParams{OrderID: "r-PENDING", ExpiresAt: at}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("extend to %v (now %v): err = %v, want ErrInvalid", at, t0, err)
		}
	}
	unchanged("r-PENDING", pending)
	// The window closed: within the grace the order's timer may be
	// cancelling it right now, so its deadline no longer moves.
	clk.Set(pending.ExpiresAt)
	if _, err := s.Extend(ctx, store.ExtendParams{OrderID: "r-PENDING", ExpiresAt: pending.ExpiresAt.Add(time.Hour)}); !errors.Is(err, store.ErrOrderExpired) {
		t.Fatalf("extend at expires_at: err = %v, want ErrOrderExpired", err)
	}
	unchanged("r-PENDING", pending)
	clk.Set(pending.ExpiresAt.Add(-time.Millisecond))
	if _, err := s.Extend(ctx, store.ExtendParams{OrderID: "r-PENDING", ExpiresAt: pending.ExpiresAt.Add(time.Hour)}); err != nil {
		t.Fatalf("extend 1 ms before expires_at: %v", err)
	}
	AuditOK(t, s)
}

// An extend sent as the timeout cancel runs at the deadline (no grace, so
// cancel_after = expires_at) has one of two verdicts: it moved the
// deadline, and the order is PENDING, never cancelled; or it was refused
// (expired, or cancelled already), and the order is cancelled — never at
// its old deadline after an extend, never before it.
func testExtendRacingTimeout(t *testing.T, newStore Factory) {
	s := newStore(t, clock.Real{})
	ctx := context.Background()
	const orders = 60
	Stock(t, s, orders, "hot")
	var ids []string
	for i := range orders {
		id := fmt.Sprintf("xr-%03d", i)
		if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "hot", Qty: 1}},
			AmountCents: 500, Currency: "EUR", Timeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// One deadline for all, shortened to it by Extend itself, eight at a
	// time: on a loaded machine sixty extends one after another took longer
	// than the lead.
	deadline := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	shorten := make(chan string)
	var shortened sync.WaitGroup
	failed := make(chan error, len(ids))
	for range 8 {
		shortened.Go(func() {
			for id := range shorten {
				if _, err := s.Extend(ctx, store.ExtendParams{OrderID: id, ExpiresAt: deadline}); err != nil {
					failed <- fmt.Errorf("shorten %s: %w", id, err)
				}
			}
		})
	}
	for _, id := range ids {
		shorten <- id
	}
	close(shorten)
	shortened.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	extended := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			// From 150 ms before the deadline to 145 ms after: on a
			// loaded machine an extend may take tens of milliseconds.
			time.Sleep(time.Until(deadline.Add(time.Duration(5*i-5*orders/2) * time.Millisecond)))
			at := time.Now().Add(time.Hour)
			o, err := s.Extend(ctx, store.ExtendParams{OrderID: id, ExpiresAt: at})
			switch {
			case err == nil:
				mu.Lock()
				extended[id] = o.CancelAfter
				mu.Unlock()
			case errors.Is(err, store.ErrOrderExpired), errors.Is(err, store.ErrNotPending):
			default:
				t.Errorf("extend %s: %v", id, err)
			}
		})
	}
	wg.Go(func() { // the timer: until every order not extended is cancelled
		for time.Now().Before(deadline.Add(time.Second)) {
			res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids})
			if err != nil {
				t.Errorf("cancel due: %v", err)
				return
			}
			for _, c := range res.Cancelled {
				if c.CancelledAt.Before(c.CancelAfter) {
					t.Errorf("%s cancelled at %v, before its cancel_after %v", c.ID, c.CancelledAt, c.CancelAfter)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	cancelled := 0
	for _, id := range ids {
		o := get(t, s, id)
		if due, ok := extended[id]; ok {
			if o.Status != order.Pending || !o.CancelAfter.Equal(due) {
				t.Errorf("%s was extended to %v, but is %s with cancel_after %v", id, due, o.Status, o.CancelAfter)
			}
			continue
		}
		if o.Status != order.Cancelled {
			t.Errorf("%s: extend refused, yet it is %s", id, o.Status)
		}
		cancelled++
	}
	t.Logf("at the deadline: %d orders extended, %d cancelled", len(extended), cancelled)
	wantSKU(t, s, "hot", int64(cancelled), int64(len(extended)), 0)
	AuditOK(t, s)
}
