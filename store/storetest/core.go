package storetest

// Cases added with store/core: the drifts found between drivers when each
// wrote its own transactions.

import (
	"context"
	"encoding/json"
	"errors"
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

// mixedSKUs sort differently in byte order ("B" < "a" < "a-1" < "b" < "ä")
// and in most collations (a, a-1, ä, b, B): a driver that locks or sorts in
// the database's collation disagrees with one that sorts in Go.
var mixedSKUs = []string{"b", "a-1", "B", "ä", "a"}

// testItemsOutOfOrder: an order created with its items out of SKU order is
// answered, announced (order.created) and read back with the items in one
// order, SKU byte order.
func testItemsOutOfOrder(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	Stock(t, s, 10, mixedSKUs...)
	var items []order.Item
	for i, sku := range mixedSKUs {
		items = append(items, order.Item{SKU: sku, Qty: int64(i + 1)})
	}
	res, err := s.CreateOrder(ctx, Params("mixed", items...))
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(items)
	slices.SortFunc(want, func(a, b order.Item) int {
		switch {
		case a.SKU < b.SKU:
			return -1
		case a.SKU > b.SKU:
			return 1
		}
		return 0
	})
	if !slices.Equal(res.Order.Items, want) {
		t.Errorf("create answered items %v, want %v", res.Order.Items, want)
	}
	if got := get(t, s, "mixed").Items; !slices.Equal(got, want) {
		t.Errorf("get read items %v, want %v", got, want)
	}
	page, err := s.ListOrders(ctx, store.ListOrdersParams{Limit: 10})
	if err != nil || len(page.Orders) != 1 {
		t.Fatalf("list: %+v %v", page, err)
	}
	if got := page.Orders[0].Items; !slices.Equal(got, want) {
		t.Errorf("list read items %v, want %v", got, want)
	}
	evs, err := s.UnpublishedEvents(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var created []order.Event
	for _, e := range evs {
		if e.Type == order.EventCreated {
			created = append(created, e)
		}
	}
	if len(created) != 1 {
		t.Fatalf("%d order.created events, want 1", len(created))
	}
	var payload order.Order
	if err := json.Unmarshal(created[0].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(payload.Items, want) {
		t.Errorf("order.created payload items %v, want %v", payload.Items, want)
	}
	// And the stock moves by SKU whatever the order given.
	if _, err := s.CancelOrder(ctx, "mixed"); err != nil {
		t.Fatal(err)
	}
	for _, sku := range mixedSKUs {
		wantSKU(t, s, sku, 10, 0, 0)
	}
	AuditOK(t, s)
}

// testStartRacingFail: a second StartPayment sent while the first attempt's
// FailPayment commits is never answered order_expired for an order whose
// expires_at is ahead: the UPDATE that missed is explained from the row as
// it is once locked, against the transaction's now.
func testStartRacingFail(t *testing.T, newStore Factory) {
	s := newStore(t, clock.Real{})
	ctx := context.Background()
	Stock(t, s, 1000, "race")
	const rounds = 60
	for i := range rounds {
		id := fmt.Sprintf("sf-%02d", i)
		Create(t, s, id, "race")
		if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: id}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		var startErr, failErr error
		wg.Go(func() {
			<-start
			_, failErr = s.FailPayment(ctx, store.PaymentParams{OrderID: id, PaymentID: id + "-1", AmountCents: 1000})
		})
		wg.Go(func() {
			<-start
			_, startErr = s.StartPayment(ctx, store.StartPaymentParams{OrderID: id})
		})
		close(start)
		wg.Wait()
		if failErr != nil {
			t.Fatalf("%s: fail payment: %v", id, failErr)
		}
		if startErr != nil {
			t.Fatalf("%s: start payment beside a failing attempt: %v, want the order PAYING", id, startErr)
		}
	}
	AuditOK(t, s)
}

// testGroupAnswersAsAlone: a create repeated with the id of an order that
// took the last unit is answered order_exists — never insufficient_stock,
// which would tell the client its order failed while it holds the stock —
// whether the store commits it alone or in a group with others.
func testGroupAnswersAsAlone(t *testing.T, newStore Factory) {
	s := newStore(t, clock.Real{})
	Stock(t, s, 1, "last")
	Stock(t, s, 1000, "other")
	first, err := s.CreateOrder(context.Background(), Params("taker", order.Item{SKU: "last", Qty: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOrder(context.Background(), Params("taker", order.Item{SKU: "last", Qty: 1})); !errors.Is(err, store.ErrOrderExists) {
		t.Fatalf("alone, a retried create of %s: %v, want ErrOrderExists", first.Order.ID, err)
	}
	for round := range 5 {
		var ps []store.CreateOrderParams
		for i := range 8 { // unrelated creates to form a group around the retry
			ps = append(ps, Params(fmt.Sprintf("g%d-%d", round, i), order.Item{SKU: "other", Qty: 1}))
		}
		retry := Params("taker", order.Item{SKU: "last", Qty: 1})
		keyed := Params("taker", order.Item{SKU: "last", Qty: 1})
		keyed.IdempotencyKey, keyed.RequestHash = fmt.Sprintf("fresh-%d", round), "h"
		ps = append(ps, retry, keyed)
		slices.Reverse(ps[:5])
		_, errs := CreateAll(s, ps)
		for i, err := range errs {
			if ps[i].ID == "taker" {
				if !errors.Is(err, store.ErrOrderExists) {
					t.Errorf("round %d: a retried create of taker (key %q): %v, want ErrOrderExists", round, ps[i].IdempotencyKey, err)
				}
			} else if err != nil {
				t.Errorf("round %d: %s: %v", round, ps[i].ID, err)
			}
		}
	}
	wantSKU(t, s, "last", 0, 1, 0)
	AuditOK(t, s)
}

// NoDeadlocks runs creates (lone and concurrent, which a store may group),
// buyer cancels and timeout batches at once over SKUs that sort differently
// by byte and by most collations, each order's items in a random order: no
// call may fail. With a store that does not retry deadlocks, a deadlock
// reaches the caller, so drivers call it with retries off too (and
// PostgreSQL on a database with a non-C collation).
func NoDeadlocks(t *testing.T, s store.Store, pairs int) {
	t.Helper()
	ctx := context.Background()
	Stock(t, s, int64(10*pairs), mixedSKUs...)
	ids := make(chan string, 4*pairs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range pairs {
				items := make([]order.Item, 0, len(mixedSKUs))
				for _, k := range rng.Perm(len(mixedSKUs))[:2+rng.IntN(len(mixedSKUs)-1)] {
					items = append(items, order.Item{SKU: mixedSKUs[k], Qty: 1})
				}
				p := Params(fmt.Sprintf("dl-%d-%04d", w, i), items...)
				p.Timeout, p.Grace = 0, 0 // due at once: the timeout batches take them
				if _, err := s.CreateOrder(ctx, p); err != nil {
					fail(fmt.Errorf("create %s: %w", p.ID, err))
					continue
				}
				if i%2 == 0 {
					if _, err := s.CancelOrder(ctx, p.ID); err != nil && !errors.Is(err, store.ErrNotPending) {
						fail(fmt.Errorf("buyer cancel %s: %w", p.ID, err))
					}
					continue
				}
				ids <- p.ID
			}
		})
	}
	done := make(chan struct{})
	var cancels sync.WaitGroup
	for range 2 {
		cancels.Go(func() {
			var batch []string
			flush := func() {
				if len(batch) == 0 {
					return
				}
				if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: batch}); err != nil {
					fail(fmt.Errorf("cancel due: %w", err))
				}
				batch = nil
			}
			for {
				select {
				case id := <-ids:
					if batch = append(batch, id); len(batch) >= 8 {
						flush()
					}
				case <-done:
					flush()
					return
				case <-time.After(5 * time.Millisecond):
					flush()
				}
			}
		})
	}
	wg.Wait()
	close(done)
	cancels.Wait()
	for len(ids) > 0 { // what arrived after the last flush
		if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{<-ids}}); err != nil {
			fail(fmt.Errorf("cancel due: %w", err))
		}
	}
	for i, err := range failures {
		if i == 10 {
			t.Errorf("… and %d more", len(failures)-10)
			break
		}
		t.Error(err)
	}
	for _, sku := range mixedSKUs {
		wantSKU(t, s, sku, int64(10*pairs), 0, 0)
	}
	AuditOK(t, s)
}

func testNoDeadlocks(t *testing.T, newStore Factory) { NoDeadlocks(t, newStore(t, clock.Real{}), 40) }

// testClaimAgreesWithNextDeadline: with a gateway checking attempted orders,
// the claim skips a PENDING order with a failed attempt, so the next
// deadline a poller sleeps until must skip it too — else the poller wakes at
// once, claims nothing, and wakes again (it spun every 10 ms while a gateway
// was down). And a claim never reaches past now, whatever lag it is given.
func testClaimAgreesWithNextDeadline(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	att := Create(t, s, "att", "a")
	into(t, s, "att", order.Paying)
	if res, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "att", PaymentID: "att-1"}); err != nil || res.Outcome != store.OutcomeFailed {
		t.Fatalf("fail att: %+v %v", res, err)
	}
	clk.Advance(time.Second)
	plain := Create(t, s, "plain", "a")
	next := func(skip bool) time.Time {
		t.Helper()
		at, ok, err := s.NextDeadline(ctx, skip)
		if err != nil || !ok {
			t.Fatalf("next deadline (skip attempted %v): %v %v", skip, ok, err)
		}
		return at
	}
	if got := next(false); !got.Equal(att.CancelAfter) {
		t.Fatalf("next deadline %v, want the attempted order's %v", got, att.CancelAfter)
	}
	if got := next(true); !got.Equal(plain.CancelAfter) {
		t.Fatalf("next deadline skipping attempted orders %v, want %v", got, plain.CancelAfter)
	}
	clk.Set(att.CancelAfter) // att due, plain not yet
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 10, SkipAttempted: true})
	if err != nil || len(res.Cancelled) != 0 {
		t.Fatalf("claim skipping attempted orders: %+v %v, want none", res, err)
	}
	if got := next(true); !got.After(clk.Now()) {
		t.Fatalf("after a claim that took nothing the next deadline is %v, not after now %v: a poller would spin", got, clk.Now())
	}
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10, Lag: -time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cancelled {
		if c.ID == "plain" {
			t.Fatalf("a claim with a negative lag cancelled plain before its cancel_after %v (now %v)", plain.CancelAfter, clk.Now())
		}
	}
	AuditOK(t, s)
}
