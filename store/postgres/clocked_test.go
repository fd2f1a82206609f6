package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/core"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// The pipelined timeout cancel (the clock folded into the UPDATE, the items
// returned by it, the effects sent with the COMMIT) leaves exactly the rows
// of the core's general path: the same orders cancelled and skipped, ledger
// rows, counters, events (payload bytes alike but for the times) and stock
// tasks for remote-stock orders, by id and by claim.
func TestPipelinedCancelMatchesGeneralPath(t *testing.T) {
	t.Parallel()
	pipelined, pu := open(t, nil)
	plain, gu := open(t, nil)
	general := plain.WithoutPipelinedCancel()
	a, b := run(t, pipelined, pu), run(t, general, gu)
	if a.report != b.report {
		t.Errorf("results differ:\npipelined:\n%s\ngeneral:\n%s", a.report, b.report)
	}
	if a.rows != b.rows {
		t.Errorf("rows differ:\npipelined:\n%s\ngeneral:\n%s", a.rows, b.rows)
	}
	for _, want := range []string{"release o1 a 1", "release o1 b 2", "claimed o2", "task r1 release res-1", "event o1", "skipped later PENDING"} {
		if !strings.Contains(a.report+a.rows, want) {
			t.Errorf("pipelined run lacks %q:\n%s\n%s", want, a.report, a.rows)
		}
	}
	t.Logf("statements: pipelined %d, general %d; round trips of a cancel: pipelined %v, general %v", a.statements, b.statements, a.trips, b.trips)
	// A batch that cancels every order, and a claim: BEGIN + clock + UPDATE
	// + items, then ledger + counters + events + COMMIT. The general path:
	// BEGIN, clock, UPDATE, items, effects, COMMIT.
	if a.trips != [2]int64{2, 2} || b.trips != [2]int64{6, 6} {
		t.Errorf("round trips of a batch and of a claim: pipelined %v, want [2 2]; general %v, want [6 6]", a.trips, b.trips)
	}
	// The pipelined path sends fewer statements: no clock read of its own.
	if a.statements >= b.statements {
		t.Errorf("pipelined cancel sent %d statements, the general path %d", a.statements, b.statements)
	}
}

type cancelRun struct {
	report, rows string
	statements   int64
	trips        [2]int64 // round trips of a batch all cancelled, of a claim
}

var times = regexp.MustCompile(`"\d{4}-\d\d-\d\dT[^"]*"`)

func run(t *testing.T, s *postgres.Store, u string) cancelRun {
	t.Helper()
	ctx := context.Background()
	storetest.Stock(t, s, 10, "a", "b")
	create := func(p store.CreateOrderParams) {
		t.Helper()
		p.AmountCents, p.Currency = 100, "EUR"
		if _, err := s.CreateOrder(ctx, p); err != nil {
			t.Fatalf("create %s: %v", p.ID, err)
		}
	}
	create(store.CreateOrderParams{ID: "o1", Items: []order.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}})
	create(store.CreateOrderParams{ID: "r1", ReservationID: "res-1", Items: []order.Item{{SKU: "x", Qty: 3}}})
	create(store.CreateOrderParams{ID: "later", Items: []order.Item{{SKU: "a", Qty: 1}}, Timeout: time.Hour})
	create(store.CreateOrderParams{ID: "o2", Items: []order.Item{{SKU: "b", Qty: 1}}})
	var out cancelRun
	var rep strings.Builder
	before := s.Statements()
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"later", "o1", "r1", "missing", "o1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cancelled {
		if !c.CancelledAt.Equal(res.Now) || c.CancelAfter.After(res.Now) {
			t.Errorf("%s cancelled at %v (due %v), now %v", c.ID, c.CancelledAt, c.CancelAfter, res.Now)
		}
		fmt.Fprintf(&rep, "cancelled %s %d\n", c.ID, c.PaymentAttempts)
	}
	for _, k := range res.Skipped {
		fmt.Fprintf(&rep, "skipped %s %s %v\n", k.ID, k.Status, k.Missing)
	}
	claim, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claim.Cancelled {
		fmt.Fprintf(&rep, "claimed %s\n", c.ID)
	}
	empty, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 10, Lag: -time.Hour})
	if err != nil || len(empty.Cancelled) != 0 || empty.Now.Before(claim.Now) {
		t.Errorf("empty claim: %+v, %v (after a claim at %v)", empty, err, claim.Now)
	}
	out.statements = s.Statements() - before
	out.report = rep.String()

	// Round trips, the statements prepared on the pool's connections by
	// the runs above (a first use costs one more, to prepare).
	create(store.CreateOrderParams{ID: "o3", Items: []order.Item{{SKU: "a", Qty: 1}}})
	create(store.CreateOrderParams{ID: "o4", Items: []order.Item{{SKU: "b", Qty: 1}}})
	trips := s.RoundTrips()
	if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"o3"}}); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("cancel o3: %+v %v", res, err)
	}
	out.trips[0], trips = s.RoundTrips()-trips, s.RoundTrips()
	if res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 10}); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("claim o4: %+v %v", res, err)
	}
	out.trips[1] = s.RoundTrips() - trips

	conn := connect(t, u)
	var rows strings.Builder
	dump := func(sql string) {
		t.Helper()
		r, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			vals, err := r.Values()
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if i > 0 {
					rows.WriteString(" ")
				}
				fmt.Fprint(&rows, v)
			}
			rows.WriteString("\n")
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	}
	dump(`SELECT id, status, coalesce(cancel_reason, ''), version, cancelled_at IS NOT NULL FROM lapse_orders ORDER BY id`)
	dump(`SELECT action, order_id, sku, qty FROM lapse_stock_ledger ORDER BY action, order_id, sku`)
	dump(`SELECT sku, available, locked, sold FROM lapse_skus ORDER BY sku`)
	dump(`SELECT 'task', order_id, action, reservation_id, items::text, status FROM lapse_stock_tasks ORDER BY order_id`)
	var events []string
	r, err := conn.Query(ctx, `SELECT o.order_id, o.type, o.payload::text, o.payload->>'cancelled_at', (SELECT cancelled_at FROM lapse_orders WHERE id = o.order_id)
		FROM lapse_outbox o ORDER BY o.seq`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var id, typ, payload string
		var paidAt *string
		var cancelledAt *time.Time
		if err := r.Scan(&id, &typ, &payload, &paidAt, &cancelledAt); err != nil {
			t.Fatal(err)
		}
		if typ == order.EventCancelled {
			if paidAt == nil || cancelledAt == nil {
				t.Errorf("event of %s: no cancelled_at in %s", id, payload)
			} else if at, err := time.Parse(time.RFC3339Nano, *paidAt); err != nil || !at.Equal(*cancelledAt) {
				t.Errorf("event of %s says cancelled at %s, the order %v", id, *paidAt, cancelledAt)
			}
		}
		events = append(events, fmt.Sprintf("event %s %s %s", id, typ, times.ReplaceAllString(payload, `"T"`)))
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(events) // two stores' seqs may interleave creates differently
	rows.WriteString(strings.Join(events, "\n"))
	out.rows = rows.String()
	return out
}

// Effects sent with the COMMIT that the server refuses (here a release the
// ledger already holds) roll the whole cancel back, answer ErrMovedTwice,
// and leave the pool's connections usable.
func TestCancelEffectsRefusedAtCommitRollBack(t *testing.T) {
	t.Parallel()
	s, u := open(t, nil)
	ctx := context.Background()
	storetest.Stock(t, s, 10, "a")
	if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "o1", AmountCents: 1, Currency: "EUR", Items: []order.Item{{SKU: "a", Qty: 1}}}); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at) VALUES ('o1', 'a', 'release', 1, now())`); err != nil {
		t.Fatal(err)
	}
	for range 12 { // more than the pool's connections: none is left inside a transaction
		_, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"o1"}})
		if !errors.Is(err, core.ErrMovedTwice) {
			t.Fatalf("cancel with the release already in the ledger: %v, want ErrMovedTwice", err)
		}
	}
	got, err := s.GetOrder(ctx, "o1")
	if err != nil || got.Status != order.Pending {
		t.Fatalf("order after the refused cancel: %v %v, want PENDING", got.Status, err)
	}
	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lapse_outbox WHERE type = 'order.cancelled'`).Scan(&events); err != nil || events != 0 {
		t.Fatalf("%d cancelled events (%v), want none", events, err)
	}
	if sku, err := s.GetSKU(ctx, "a"); err != nil || sku.Locked != 1 || sku.Available != 9 {
		t.Fatalf("stock after the refused cancel: %+v %v", sku, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM lapse_stock_ledger WHERE order_id = 'o1' AND action = 'release'`); err != nil {
		t.Fatal(err)
	}
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"o1"}})
	if err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("cancel once the ledger is clear: %+v %v", res, err)
	}
}

// An operator's cancel takes the pipelined path too: an order an hour
// before its deadline, PAYING, is cancelled with cancel_reason operator on
// both paths; without the reason, the deadline binds.
func TestPipelinedOperatorCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pipelined, _ := open(t, nil)
	plain, _ := open(t, nil)
	for name, s := range map[string]store.Store{"pipelined": pipelined, "general": plain.WithoutPipelinedCancel()} {
		storetest.Stock(t, s, 10, "a")
		if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "op", Items: []order.Item{{SKU: "a", Qty: 1}}, AmountCents: 100, Currency: "EUR", Timeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "op"}); err != nil {
			t.Fatal(err)
		}
		if res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"op"}, Confirmed: true}); err != nil || len(res.Cancelled) != 0 {
			t.Fatalf("%s: a timeout's confirmed cancel an hour early: %+v, %v", name, res, err)
		}
		res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"op"}, Confirmed: true, Reason: order.ReasonOperator})
		if err != nil || len(res.Cancelled) != 1 {
			t.Fatalf("%s: an operator's cancel: %+v, %v", name, res, err)
		}
		if o, err := s.GetOrder(ctx, "op"); err != nil || o.Status != order.Cancelled || o.CancelReason != order.ReasonOperator {
			t.Errorf("%s: %s %q, %v", name, o.Status, o.CancelReason, err)
		}
	}
}
