package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseOutbox is the outbox part of the suite: fan-out, per-order claims,
// leases, failures, dead letters, retention.
func exerciseOutbox(t *testing.T, newStore Factory) {
	t.Run("outbox: each sink gets every event, one per order at a time, in order", func(t *testing.T) { testOutboxHeads(t, newStore) })
	t.Run("outbox: concurrent relays never hold two events of one order and never reorder", func(t *testing.T) { testOutboxConcurrentRelays(t, newStore) })
	t.Run("outbox: claims racing fan-outs of new events never hold two events of one order", func(t *testing.T) { testOutboxClaimsRacingFanOuts(t, newStore) })
	t.Run("outbox: an expired lease is claimed again and the stale claim cannot settle", func(t *testing.T) { testOutboxLease(t, newStore) })
	t.Run("outbox: refusals back off, dead events wait for a retry and block only their order", func(t *testing.T) { testOutboxDead(t, newStore) })
	t.Run("outbox: retention deletes published events only", func(t *testing.T) { testOutboxRetention(t, newStore) })
}

func claim(t testing.TB, s store.Store, sink string, limit int) []store.Delivery {
	t.Helper()
	ds, err := s.ClaimEvents(context.Background(), store.ClaimEventsParams{Sink: sink, Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim for %s: %v", sink, err)
	}
	return ds
}

// settle reports ds delivered.
func settle(t testing.TB, s store.Store, sink string, ds ...store.Delivery) {
	t.Helper()
	os := make([]store.Outcome, len(ds))
	for i, d := range ds {
		os[i] = store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Delivered: true}
	}
	if err := s.SettleEvents(context.Background(), sink, os); err != nil {
		t.Fatalf("settle for %s: %v", sink, err)
	}
}

func deliveryNames(ds []store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.OrderID + " " + d.Type
	}
	return out
}

// lifecycle creates id and pays it: two events, created then paid.
func lifecycle(t testing.TB, s store.Store, id string) {
	t.Helper()
	Create(t, s, id, "a")
	into(t, s, id, order.Paid)
}

func testOutboxHeads(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a")
	if err := s.RegisterSinks(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterSinks(ctx, []string{"a"}); err != nil {
		t.Fatalf("registering again: %v", err)
	}
	lifecycle(t, s, "h1")
	lifecycle(t, s, "h2")
	Create(t, s, "h3", "a")

	first := claim(t, s, "a", 100)
	if got, want := deliveryNames(first), []string{"h1 order.created", "h2 order.created", "h3 order.created"}; !slices.Equal(got, want) {
		t.Fatalf("sink a claimed %v, want %v", got, want)
	}
	for _, d := range first {
		if d.Attempts != 1 || d.Refusals != 0 || d.ID == "" || len(d.Payload) == 0 || d.ClaimedAt.IsZero() {
			t.Fatalf("delivery %+v: want attempts 1, no refusals, an id, a payload and a claim time", d)
		}
	}
	if again := claim(t, s, "a", 100); len(again) != 0 {
		t.Fatalf("a second claim while the first holds every order's head got %v", deliveryNames(again))
	}
	// Sink b has its own progress.
	if got := deliveryNames(claim(t, s, "b", 1)); !slices.Equal(got, []string{"h1 order.created"}) {
		t.Fatalf("sink b claimed %v with limit 1", got)
	}
	settle(t, s, "a", first[0], first[2])
	next := claim(t, s, "a", 100)
	if got := deliveryNames(next); !slices.Equal(got, []string{"h1 order.paid"}) {
		t.Fatalf("after settling h1 and h3's first events, sink a claimed %v, want h1 order.paid", got)
	}
	// An event published to a but not yet to b is not published.
	evs, err := s.UnpublishedEvents(ctx, 100)
	if err != nil || len(evs) != 5 {
		t.Fatalf("unpublished: %d (%v), want all 5 (sink b has delivered none)", len(evs), err)
	}
	// A sink registered later starts with the events fanned out after it.
	if err := s.RegisterSinks(ctx, []string{"late"}); err != nil {
		t.Fatal(err)
	}
	Create(t, s, "h4", "a")
	if got := deliveryNames(claim(t, s, "late", 100)); !slices.Equal(got, []string{"h4 order.created"}) {
		t.Fatalf("a sink registered later claimed %v, want only the event committed after it", got)
	}
	st, err := s.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]store.SinkStats{}
	for _, x := range st.Sinks {
		byName[x.Sink] = x
	}
	if byName["a"].Pending != 4 || byName["b"].Pending != 6 || byName["late"].Pending != 1 || st.Now.IsZero() {
		t.Fatalf("stats %+v: want pending a 4, b 6, late 1", st)
	}
	if byName["b"].Oldest.IsZero() {
		t.Fatalf("stats: sink b's oldest pending event has no time")
	}
}

func testOutboxConcurrentRelays(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 1000, "a")
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	const orders = 40
	var wantTotal int
	for i := range orders {
		id := fmt.Sprintf("c%02d", i)
		Create(t, s, id, "a")
		wantTotal++
		switch i % 3 {
		case 0:
			into(t, s, id, order.Paid)
			wantTotal++
		case 1:
			into(t, s, id, order.Cancelled)
			wantTotal++
		}
	}
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		got      = map[string][]int64{}
		total    int
	)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for idle := 0; idle < 3; {
				ds, err := s.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "s", Limit: 1 + r.IntN(7), Lease: time.Hour})
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					idle++
					mu.Lock()
					done := total == wantTotal
					mu.Unlock()
					if done {
						return
					}
					time.Sleep(time.Millisecond) // others hold the rest; poll again
					continue
				}
				idle = 0
				mu.Lock()
				for _, d := range ds {
					if inFlight[d.OrderID] {
						mu.Unlock()
						errs <- fmt.Errorf("order %s claimed twice at once", d.OrderID)
						return
					}
					inFlight[d.OrderID] = true
				}
				mu.Unlock()
				var outcomes []store.Outcome
				mu.Lock()
				for _, d := range ds {
					delete(inFlight, d.OrderID)
					if r.IntN(4) == 0 { // a transport failure: due again at once
						outcomes = append(outcomes, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "down"})
						continue
					}
					got[d.OrderID] = append(got[d.OrderID], d.Seq)
					total++
					outcomes = append(outcomes, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Delivered: true})
				}
				mu.Unlock()
				if err := s.SettleEvents(ctx, "s", outcomes); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if total != wantTotal {
		t.Fatalf("%d events delivered, want %d", total, wantTotal)
	}
	for id, seqs := range got {
		if !slices.IsSorted(seqs) {
			t.Errorf("order %s delivered out of order: %v", id, seqs)
		}
	}
	if left, err := s.UnpublishedEvents(ctx, 10); err != nil || len(left) != 0 {
		t.Fatalf("after delivering everything, %d unpublished (%v)", len(left), err)
	}
}

// testOutboxClaimsRacingFanOuts is a stress test of the per-order rule
// while events are being written and fanned out: writers commit orders of
// three events each (created, cancelled by the buyer, then a late payment's
// refund_required) as fast as they can, while relays of one sink claim
// (each claim fans out first, so one relay's fan-out commits while another
// relay's claim reads) and settle. No two events of one order may ever be
// claimed at the same time — in one claim or in two — and each order's
// events are delivered in seq order. A delivery counts as in flight from
// the return of its claim to the call of its settle: inside the time it
// truly holds the order, so an overlap seen here is a real one.
func testOutboxClaimsRacingFanOuts(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	const (
		writers, relays = 4, 6
		perWriter       = 60 // orders
		perOrder        = 3  // events
		parkedOrders    = 200
	)
	// A parked backlog that every claim walks past, as a sink with dead
	// events has: orders whose first event is dead, their later events
	// blocked behind it (each one a head check).
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	Stock(t, s, writers*perWriter+parkedOrders, "a")
	for i := range parkedOrders {
		id := fmt.Sprintf("parked%03d", i)
		Create(t, s, id, "a")
		into(t, s, id, order.Cancelled)
	}
	for {
		ds := claim(t, s, "s", 1000)
		if len(ds) == 0 {
			break
		}
		parked := make([]store.Outcome, len(ds))
		for i, d := range ds {
			parked[i] = store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "gone", Refused: true, Dead: true}
		}
		if err := s.SettleEvents(ctx, "s", parked); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu       sync.Mutex
		inFlight = map[string]int64{} // order → seq claimed
		got      = map[string][]int64{}
		total    int
		failure  error
	)
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}
	stopped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failure != nil
	}
	var wrote sync.WaitGroup
	for w := range writers {
		wrote.Go(func() {
			for i := range perWriter {
				if stopped() {
					return
				}
				id := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := s.CreateOrder(ctx, store.CreateOrderParams{
					ID: id, Items: []order.Item{{SKU: "a", Qty: 1}}, AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace,
				}); err != nil {
					fail(fmt.Errorf("create %s: %w", id, err))
					return
				}
				if _, err := s.CancelOrder(ctx, id); err != nil {
					fail(fmt.Errorf("cancel %s: %w", id, err))
					return
				}
				if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: id, PaymentID: "late-" + id, AmountCents: 1000}); err != nil {
					fail(fmt.Errorf("late payment of %s: %w", id, err))
					return
				}
			}
		})
	}
	writing := make(chan struct{})
	go func() { wrote.Wait(); close(writing) }()

	const want = writers * perWriter * perOrder
	var relayed sync.WaitGroup
	for r := range relays {
		relayed.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(r), 23))
			for !stopped() {
				ds, err := s.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "s", Limit: 1 + rnd.IntN(8), Lease: time.Hour})
				if err != nil {
					fail(err)
					return
				}
				if len(ds) == 0 {
					select {
					case <-writing:
						mu.Lock()
						done := total == want
						mu.Unlock()
						if done {
							return
						}
					default:
					}
					time.Sleep(time.Millisecond) // others hold the rest; poll again
					continue
				}
				mu.Lock()
				for _, d := range ds {
					if other, ok := inFlight[d.OrderID]; ok {
						mu.Unlock()
						fail(fmt.Errorf("order %s: seq %d claimed while seq %d is in flight", d.OrderID, d.Seq, other))
						return
					}
					inFlight[d.OrderID] = d.Seq
				}
				outcomes := make([]store.Outcome, 0, len(ds))
				for _, d := range ds {
					delete(inFlight, d.OrderID)
					if rnd.IntN(5) == 0 { // a transport failure: due again at once
						outcomes = append(outcomes, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "down"})
						continue
					}
					got[d.OrderID] = append(got[d.OrderID], d.Seq)
					total++
					outcomes = append(outcomes, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Delivered: true})
				}
				mu.Unlock()
				if err := s.SettleEvents(ctx, "s", outcomes); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	relayed.Wait()
	wrote.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if total != want {
		t.Fatalf("%d events delivered, want %d", total, want)
	}
	for id, seqs := range got {
		if len(seqs) != perOrder || !slices.IsSorted(seqs) {
			t.Errorf("order %s: delivered seqs %v, want %d in order", id, seqs, perOrder)
		}
	}
}

func testOutboxLease(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, s, "l1")
	first, err := s.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "s", Limit: 10, Lease: 30 * time.Second})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", deliveryNames(first), err)
	}
	clk.Advance(29 * time.Second)
	if again := claim(t, s, "s", 10); len(again) != 0 {
		t.Fatalf("claimed %v inside the lease", deliveryNames(again))
	}
	clk.Advance(2 * time.Second)
	second := claim(t, s, "s", 10)
	if len(second) != 1 || second[0].ID != first[0].ID || second[0].Attempts != 2 {
		t.Fatalf("after the lease: %+v, want the same event at attempt 2", second)
	}
	// The first relay wakes up and settles: its claim is stale, nothing moves.
	settle(t, s, "s", first[0])
	if next := claim(t, s, "s", 10); len(next) != 0 {
		t.Fatalf("a stale settle released the order: claimed %v while attempt 2 is in flight", deliveryNames(next))
	}
	settle(t, s, "s", second[0])
	if next := deliveryNames(claim(t, s, "s", 10)); !slices.Equal(next, []string{"l1 order.paid"}) {
		t.Fatalf("after settling attempt 2: %v, want l1 order.paid", next)
	}
}

func testOutboxDead(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	if err := s.RegisterSinks(ctx, []string{"hook", "mq"}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, s, "d1")
	lifecycle(t, s, "d2")
	ds := claim(t, s, "hook", 10) // d1 created, d2 created
	if len(ds) != 2 {
		t.Fatalf("claimed %v", deliveryNames(ds))
	}
	err := s.SettleEvents(ctx, "hook", []store.Outcome{
		{Seq: ds[0].Seq, Attempts: ds[0].Attempts, Error: "400 Bad Request", Refused: true, Dead: true},
		{Seq: ds[1].Seq, Attempts: ds[1].Attempts, Error: "503", Refused: true, RetryIn: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, "hook", 10); len(got) != 0 {
		t.Fatalf("claimed %v: d1 is dead (and blocks d1 paid), d2 waits 10 s", deliveryNames(got))
	}
	clk.Advance(11 * time.Second)
	retried := claim(t, s, "hook", 10)
	if len(retried) != 1 || retried[0].OrderID != "d2" || retried[0].Refusals != 1 || retried[0].FirstRefused.IsZero() || retried[0].Attempts != 2 {
		t.Fatalf("after the backoff: %+v, want d2 created with one refusal, a first refusal time and attempt 2", retried)
	}
	if !retried[0].ClaimedAt.After(retried[0].FirstRefused) {
		t.Fatalf("claimed at %s, first refused at %s: the refusal age is measured on the store's clock", retried[0].ClaimedAt, retried[0].FirstRefused)
	}
	settle(t, s, "hook", retried[0])
	if got := deliveryNames(claim(t, s, "hook", 10)); !slices.Equal(got, []string{"d2 order.paid"}) {
		t.Fatalf("other orders go on past a dead event: got %v", got)
	}
	// The other sink is not held back by the dead webhook.
	if got := deliveryNames(claim(t, s, "mq", 10)); !slices.Equal(got, []string{"d1 order.created", "d2 order.created"}) {
		t.Fatalf("sink mq claimed %v", got)
	}
	st, err := s.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st.Sinks {
		if x.Sink == "hook" && (x.Dead != 1 || x.Blocked != 1) {
			t.Fatalf("hook stats %+v: want 1 dead and 1 blocked behind it", x)
		}
	}
	dead, err := s.ListEvents(ctx, store.ListEventsParams{Dead: true})
	if err != nil || len(dead) != 1 || dead[0].OrderID != "d1" || dead[0].Sink != "hook" || dead[0].LastError != "400 Bad Request" || dead[0].DeadAt.IsZero() {
		t.Fatalf("dead list %+v (%v)", dead, err)
	}
	all, err := s.ListEvents(ctx, store.ListEventsParams{Sink: "hook"})
	if err != nil || len(all) != 3 { // d1 created (dead), d1 paid, d2 paid (claimed)
		t.Fatalf("hook's pending list: %d (%v), want 3", len(all), err)
	}
	page, err := s.ListEvents(ctx, store.ListEventsParams{Sink: "hook", After: all[0].Seq, Limit: 1})
	if err != nil || len(page) != 1 || page[0].Seq != all[1].Seq {
		t.Fatalf("second page: %+v (%v)", page, err)
	}
	n, err := s.RetryEvents(ctx, store.RetryEventsParams{IDs: []string{dead[0].ID, "not-an-event"}})
	if err != nil || n != 1 {
		t.Fatalf("retry: %d (%v), want 1", n, err)
	}
	again := claim(t, s, "hook", 10)
	if got := deliveryNames(again); !slices.Equal(got, []string{"d1 order.created"}) || again[0].Refusals != 0 {
		t.Fatalf("after retry: %+v, want d1 created with its refusals cleared", again)
	}
	// Every dead one at once, and a purge.
	if err := s.SettleEvents(ctx, "hook", []store.Outcome{{Seq: again[0].Seq, Attempts: again[0].Attempts, Error: "410", Refused: true, Dead: true}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RetryEvents(ctx, store.RetryEventsParams{AllDead: true, Sink: "mq"}); err != nil || n != 0 {
		t.Fatalf("retry of sink mq's dead: %d (%v), want 0", n, err)
	}
	if n, err := s.PurgeEvents(ctx, store.PurgeEventsParams{Before: t0}); err != nil || n != 0 {
		t.Fatalf("purge before the death: %d (%v), want 0", n, err)
	}
	if n, err := s.PurgeEvents(ctx, store.PurgeEventsParams{Before: clk.Now().Add(time.Second), Sink: "hook"}); err != nil || n != 1 {
		t.Fatalf("purge: %d (%v), want 1", n, err)
	}
	if left, _ := s.ListEvents(ctx, store.ListEventsParams{Dead: true}); len(left) != 0 {
		t.Fatalf("dead after purge: %+v", left)
	}
	if _, err := s.RetryEvents(ctx, store.RetryEventsParams{}); err == nil {
		t.Fatal("a retry naming nothing was accepted")
	}
	// A sink no relay runs any more is forgotten: its deliveries go, and
	// new events are not fanned out to it.
	n, err = s.ForgetSink(ctx, "hook")
	if err != nil || n != 2 { // d1 paid, d2 paid
		t.Fatalf("forget hook: %d (%v), want its 2 pending deliveries", n, err)
	}
	Create(t, s, "d3", "a")
	if got := claim(t, s, "hook", 10); len(got) != 0 {
		t.Fatalf("a forgotten sink claimed %v", deliveryNames(got))
	}
	st, err = s.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st.Sinks {
		if x.Sink == "hook" {
			t.Fatalf("a forgotten sink is still registered: %+v", st.Sinks)
		}
	}
}

func testOutboxRetention(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, s, "old")    // both published
	Create(t, s, "dead", "a") // dead
	Create(t, s, "open", "a") // never claimed
	for range 3 {
		ds := claim(t, s, "s", 10)
		var os []store.Outcome
		for _, d := range ds {
			switch d.OrderID {
			case "old":
				os = append(os, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Delivered: true})
			case "dead":
				os = append(os, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "no", Refused: true, Dead: true})
			case "open":
				os = append(os, store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Error: "down", RetryIn: time.Hour})
			}
		}
		if err := s.SettleEvents(ctx, "s", os); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(8 * 24 * time.Hour)
	Create(t, s, "new", "a")
	for _, d := range claim(t, s, "s", 10) { // "open" is due again: leave it
		if d.OrderID == "new" {
			settle(t, s, "s", d) // published now
		}
	}
	n, err := s.PruneOutbox(ctx, clk.Now().Add(-7*24*time.Hour), 1)
	if err != nil || n != 1 {
		t.Fatalf("prune with limit 1: %d (%v), want 1", n, err)
	}
	n, err = s.PruneOutbox(ctx, clk.Now().Add(-7*24*time.Hour), 1000)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d (%v), want the other old published event", n, err)
	}
	left, err := s.UnpublishedEvents(ctx, 100)
	if err != nil || len(left) != 2 {
		t.Fatalf("unpublished after prune: %d (%v), want the dead and the open one", len(left), err)
	}
	if list, _ := s.ListEvents(ctx, store.ListEventsParams{}); len(list) != 2 {
		t.Fatalf("pending deliveries after prune: %d, want 2", len(list))
	}
	if n, err := s.PruneOutbox(ctx, clk.Now().Add(time.Second), 1000); err != nil || n != 1 {
		t.Fatalf("prune with no retention: %d (%v), want only the recently published event", n, err)
	}
}
