package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// testDashboard checks the dashboard's reads: capped counts by status,
// per-minute series ahead and behind, the order finder's three filters and
// its pages, one order's events and the SKU pages.
func testDashboard(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a", "b")
	for i := range 10 {
		Create(t, s, fmt.Sprintf("d-%02d", i), "a")
	}
	into(t, s, "d-00", order.Paying)
	into(t, s, "d-01", order.Paid)
	into(t, s, "d-02", order.Cancelled)
	into(t, s, "d-03", order.Paid)
	// A payment for the cancelled order: money to give back.
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "d-02", PaymentID: "late-d-02", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomeRefundRequired {
		t.Fatalf("late payment: %+v %v", res, err)
	}
	clk.Advance(30 * time.Second)
	for i := range 3 {
		Create(t, s, fmt.Sprintf("e-%02d", i), "b")
	}

	minute := func(d time.Duration) time.Time { return t0.Add(d).Truncate(time.Minute) }
	wantSeries := func(name string, got []store.MinuteCount, want ...store.MinuteCount) {
		t.Helper()
		if !slices.EqualFunc(got, want, func(a, b store.MinuteCount) bool { return a.Minute.Equal(b.Minute) && a.Count == b.Count }) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	ov, err := s.Overview(ctx, store.OverviewParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[order.Status]int64{order.Pending: 9, order.Paying: 1, order.Paid: 2, order.Cancelled: 1}
	for st, n := range want {
		if ov.ByStatus[st] != n {
			t.Errorf("%s: %d orders, want %d", st, ov.ByStatus[st], n)
		}
	}
	if !ov.Now.Equal(clk.Now()) || ov.Stuck != 0 || ov.RefundRequired != 1 || ov.CountCap != store.DefaultCountCap {
		t.Errorf("overview: now %v stuck %d refund_required %d cap %d", ov.Now, ov.Stuck, ov.RefundRequired, ov.CountCap)
	}
	// Every pending order falls due at cancel_after = created + timeout + grace.
	wantSeries("due", ov.Due, store.MinuteCount{Minute: minute(timeout + grace), Count: 9})
	wantSeries("cancelled", ov.Cancelled, store.MinuteCount{Minute: minute(0), Count: 1})
	wantSeries("paid", ov.Paid, store.MinuteCount{Minute: minute(0), Count: 2})
	wantSeries("refunds", ov.Refunds, store.MinuteCount{Minute: minute(0), Count: 1})

	capped, err := s.Overview(ctx, store.OverviewParams{CountCap: 5})
	if err != nil || capped.ByStatus[order.Pending] != 5 || capped.ByStatus[order.Paid] != 2 {
		t.Fatalf("capped at 5: %v %v", capped.ByStatus, err)
	}

	// Past the deadline: the pending orders are cancelled, the PAYING one is stuck.
	clk.Advance(timeout + grace + time.Minute)
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 100})
	if err != nil || len(res.Cancelled) != 9 {
		t.Fatalf("cancel due: %d cancelled, %v", len(res.Cancelled), err)
	}
	if ov, err = s.Overview(ctx, store.OverviewParams{}); err != nil {
		t.Fatal(err)
	}
	if ov.ByStatus[order.Pending] != 0 || ov.ByStatus[order.Cancelled] != 10 || ov.Stuck != 1 {
		t.Errorf("after the deadline: %v stuck %d", ov.ByStatus, ov.Stuck)
	}
	wantSeries("due after the deadline", ov.Due)
	wantSeries("cancelled after the deadline", ov.Cancelled,
		store.MinuteCount{Minute: minute(0), Count: 1}, store.MinuteCount{Minute: res.Now.Truncate(time.Minute), Count: 9})
	// Money given back stays on the refunds chart, at the minute it went
	// back: the chart counts REFUND_REQUIRED and REFUNDED attempts.
	if res, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "d-04", PaymentID: "late-d-04", AmountCents: 1000}); err != nil || res.Outcome != store.OutcomeRefundRequired {
		t.Fatalf("late payment: %+v %v", res, err)
	}
	if _, err := s.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: "late-d-04", RefundID: "re_d04", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if ov, err = s.Overview(ctx, store.OverviewParams{}); err != nil {
		t.Fatal(err)
	}
	wantSeries("refunds after the refund", ov.Refunds,
		store.MinuteCount{Minute: minute(0), Count: 1}, store.MinuteCount{Minute: clk.Now().Truncate(time.Minute), Count: 1})

	// The finder: status pages, id prefix pages, time range.
	find := func(p store.FindOrdersParams) []string {
		t.Helper()
		var ids []string
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("pages do not end")
			}
			res, err := s.FindOrders(ctx, p)
			if err != nil {
				t.Fatalf("find %+v: %v", p, err)
			}
			for _, o := range res.Orders {
				if len(o.Items) != 1 {
					t.Fatalf("%s found without its items", o.ID)
				}
				ids = append(ids, o.ID)
			}
			if res.NextCursor == "" {
				return ids
			}
			p.Cursor = res.NextCursor
		}
	}
	wantIDs := func(name string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	wantIDs("paid", find(store.FindOrdersParams{Status: order.Paid, Limit: 1}), "d-03", "d-01")
	wantIDs("prefix e-", find(store.FindOrdersParams{IDPrefix: "e-", Limit: 2}), "e-00", "e-01", "e-02")
	wantIDs("prefix d-0, paid", find(store.FindOrdersParams{IDPrefix: "d-0", Status: order.Paid, Limit: 1}), "d-01", "d-03")
	wantIDs("prefix d-0_ (no wildcard)", find(store.FindOrdersParams{IDPrefix: "d-0_"}))
	wantIDs("created from t0+30s", find(store.FindOrdersParams{From: t0.Add(30 * time.Second), Limit: 2}), "e-02", "e-01", "e-00")
	before := find(store.FindOrdersParams{To: t0.Add(30 * time.Second), Limit: 3})
	if len(before) != 10 || before[0] != "d-09" || before[9] != "d-00" {
		t.Errorf("created before t0+30s: %v", before)
	}
	wantIDs("prefix e-, created before t0+30s", find(store.FindOrdersParams{IDPrefix: "e-", To: t0.Add(30 * time.Second)}))
	wantIDs("refund_required", find(store.FindOrdersParams{RefundRequired: true, Limit: 1}), "d-02")
	if got := find(store.FindOrdersParams{Status: order.Cancelled, Limit: 3}); len(got) != 10 {
		t.Errorf("cancelled: %d orders, want 10", len(got))
	}
	if _, err := s.FindOrders(ctx, store.FindOrdersParams{Cursor: "!!"}); err == nil {
		t.Error("a bad cursor was taken")
	}

	evs, err := s.OrderEvents(ctx, "d-02")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
		if ev.OrderID != "d-02" || ev.CreatedAt.IsZero() {
			t.Errorf("event %+v", ev)
		}
	}
	wantIDs("events of d-02", types, order.EventCreated, order.EventCancelled, order.EventRefundRequired)

	skus, err := s.ListSKUs(ctx, "", 1)
	if err != nil || len(skus) != 1 || skus[0] != (store.SKU{SKU: "a", Available: 97, Locked: 1, Sold: 2}) {
		t.Fatalf("skus page 1: %+v %v", skus, err)
	}
	if skus, err = s.ListSKUs(ctx, "a", 10); err != nil || len(skus) != 1 || skus[0] != (store.SKU{SKU: "b", Available: 100}) {
		t.Fatalf("skus page 2: %+v %v", skus, err)
	}
}

// testFindPastDeadline checks the finder's past-deadline filter: the
// PENDING and PAYING orders whose cancel_after has passed at the store's
// clock, the most overdue first, paged, narrowed by a status.
func testFindPastDeadline(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a")
	// Created a second apart: their deadlines are a second apart, f-00's first.
	for i := range 5 {
		Create(t, s, fmt.Sprintf("f-%02d", i), "a")
		clk.Advance(time.Second)
	}
	into(t, s, "f-01", order.Paying)
	into(t, s, "f-02", order.Paid)
	into(t, s, "f-03", order.Cancelled)
	find := func(p store.FindOrdersParams) []string {
		t.Helper()
		var ids []string
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("pages do not end")
			}
			res, err := s.FindOrders(ctx, p)
			if err != nil {
				t.Fatalf("find %+v: %v", p, err)
			}
			for _, o := range res.Orders {
				if len(o.Items) != 1 {
					t.Fatalf("%s found without its items", o.ID)
				}
				ids = append(ids, o.ID)
			}
			if res.NextCursor == "" {
				return ids
			}
			p.Cursor = res.NextCursor
		}
	}
	wantIDs := func(name string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	wantIDs("before any deadline", find(store.FindOrdersParams{PastDeadline: true}))
	// Past the first three deadlines (f-00's, f-01's and f-02's), before f-03's.
	clk.Set(get(t, s, "f-02").CancelAfter.Add(time.Millisecond))
	if ca := get(t, s, "f-01").CancelAfter; !ca.Before(clk.Now()) {
		t.Fatalf("f-01's cancel_after %v is not past %v", ca, clk.Now())
	}
	wantIDs("past deadline", find(store.FindOrdersParams{PastDeadline: true}), "f-00", "f-01")
	Create(t, s, "f-05", "a") // its deadline ahead
	clk.Advance(timeout + grace + time.Minute)
	// f-04 and f-05 PENDING, f-01 PAYING, all past; f-02 PAID and f-03
	// CANCELLED are not open any more.
	wantIDs("past deadline, one a page", find(store.FindOrdersParams{PastDeadline: true, Limit: 1}), "f-00", "f-01", "f-04", "f-05")
	wantIDs("past deadline, two a page", find(store.FindOrdersParams{PastDeadline: true, Limit: 2}), "f-00", "f-01", "f-04", "f-05")
	wantIDs("past deadline, PAYING", find(store.FindOrdersParams{PastDeadline: true, Status: order.Paying}), "f-01")
	wantIDs("past deadline, PENDING", find(store.FindOrdersParams{PastDeadline: true, Status: order.Pending, Limit: 1}), "f-00", "f-04", "f-05")
	wantIDs("past deadline, PAID", find(store.FindOrdersParams{PastDeadline: true, Status: order.Paid}))
}
