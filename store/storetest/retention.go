package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
)

// exerciseRetention: finished orders go with every row that belongs to
// them, the others stay however old, the counters never move and the audit
// holds; retention running beside creates, cancels and the relay never
// deadlocks.
func exerciseRetention(t *testing.T, newStore Factory) {
	t.Run("retention: finished orders go with their rows; open, flagged, undelivered and unsettled ones stay", func(t *testing.T) { testRetentionOrders(t, newStore) })
	t.Run("retention: an order cancelled after a payment attempt stays until its confirming gateway query is past", func(t *testing.T) { testRetentionAttempted(t, newStore) })
	t.Run("retention: DONE tasks no order reads go, DEAD ones stay", func(t *testing.T) { testRetentionTasks(t, newStore) })
	t.Run("retention: batches beside creates, cancels and the relay never deadlock", func(t *testing.T) { testRetentionConcurrent(t, newStore) })
}

// retentionAge is the age past which the tests' finished orders go.
const retentionAge = 20 * time.Minute

func prune(t testing.TB, s store.Store, limit int) store.PruneResult {
	t.Helper()
	res, err := s.PruneOrders(context.Background(), store.PruneOrdersParams{Age: retentionAge, Limit: limit})
	if err != nil {
		t.Fatalf("prune orders: %v", err)
	}
	if !res.Turn {
		t.Fatalf("prune orders: no turn, with no other instance running")
	}
	return res
}

// deliverAll claims and settles, for sink, every event of every order but
// those of keep, until nothing more comes; keep's stay claimed.
func deliverAll(t testing.TB, s store.Store, sink string, keep ...string) {
	t.Helper()
	for range 20 {
		ds := claim(t, s, sink, 100)
		ds = slices.DeleteFunc(ds, func(d store.Delivery) bool { return slices.Contains(keep, d.OrderID) })
		if len(ds) == 0 {
			return
		}
		settle(t, s, sink, ds...)
	}
	t.Fatalf("events of %s still coming after 20 rounds", sink)
}

// rowsOf is what a deleted order leaves in each table, counted through the
// store's own reads before it goes: items, ledger rows (one reserve and one
// release or commit per item of an order whose stock lapse holds), attempts,
// events, tasks, commands, refunds.
func rowsOf(t testing.TB, s store.Store, id string, keys int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	o := get(t, s, id)
	evs, err := s.OrderEvents(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.ListCommands(ctx, store.ListTasksParams{OrderID: id})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := s.ListTasks(ctx, store.ListTasksParams{OrderID: id})
	if err != nil {
		t.Fatal(err)
	}
	ledger := 0
	if !o.RemoteStock() {
		ledger = 2 * len(o.Items)
	}
	return map[string]int64{
		"order_items": int64(len(o.Items)), "stock_ledger": int64(ledger), "payments": int64(len(o.Payments)),
		"stock_tasks": int64(len(ts)), "order_commands": int64(len(cs)), "refunds": int64(len(refundsOf(t, s, id))),
		"hook_failures": 0, "outbox": int64(len(evs)), "idempotency_keys": int64(keys), "orders": 1,
	}
}

// sum adds row counts per table.
func sum(ms ...map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// wantGone checks that nothing of order id is left for the store to read.
func wantGone(t testing.TB, s store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetOrder(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("order %s after retention: %v, want not found", id, err)
	}
	if evs, err := s.OrderEvents(ctx, id); err != nil || len(evs) != 0 {
		t.Errorf("events of %s after retention: %d (%v)", id, len(evs), err)
	}
	if ts, err := s.ListTasks(ctx, store.ListTasksParams{OrderID: id}); err != nil || len(ts) != 0 {
		t.Errorf("tasks of %s after retention: %d (%v)", id, len(ts), err)
	}
	if cs, err := s.ListCommands(ctx, store.ListTasksParams{OrderID: id}); err != nil || len(cs) != 0 {
		t.Errorf("commands of %s after retention: %d (%v)", id, len(cs), err)
	}
	if rs := refundsOf(t, s, id); len(rs) != 0 {
		t.Errorf("refunds of %s after retention: %d", id, len(rs))
	}
}

// wantKept checks that the orders are still there, in their status.
func wantKept(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.GetOrder(context.Background(), id); err != nil {
			t.Errorf("order %s after retention: %v, want it kept", id, err)
		}
	}
}

func counters(t testing.TB, s store.Store, skus ...string) []store.SKU {
	t.Helper()
	out := make([]store.SKU, len(skus))
	for i, k := range skus {
		out[i] = sku(t, s, k)
	}
	return out
}

func testRetentionOrders(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a", "b", "r-sku")
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	// paid: two items, an idempotency key, one attempt that paid it.
	if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "paid", Items: []order.Item{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 1}},
		AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace, IdempotencyKey: "k-paid", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	into(t, s, "paid", order.Paid)
	Create(t, s, "cancelled", "a")
	into(t, s, "cancelled", order.Cancelled)
	Create(t, s, "open", "a", "b")
	owing(t, s, false, "flagged", "flagged-late")    // CANCELLED, refund_required
	owing(t, s, true, "refunding", "refunding-late") // CANCELLED, refund_required, a refund PENDING
	Create(t, s, "undelivered", "b")
	into(t, s, "undelivered", order.Cancelled)
	remote := store.CreateOrderParams{ID: "remote", Items: []order.Item{{SKU: "far", Qty: 1}}, AmountCents: 1000, Currency: "EUR",
		Timeout: timeout, Grace: grace, ReservationID: "res-remote"}
	if _, err := s.CreateOrder(ctx, remote); err != nil {
		t.Fatal(err)
	}
	into(t, s, "remote", order.Cancelled) // a release task, PENDING
	CreateCommanded(t, s, "commanded")
	clk.Advance(timeout + grace)
	commandDue(t, s, "commanded")
	cs := claimCommands(t, s, 10, time.Minute)
	if len(cs) != 1 {
		t.Fatalf("claimed %d commands, want commanded's", len(cs))
	}
	settleCommands(t, s, answer(cs[0], ordersvc.Cancelled))
	deliverAll(t, s, "s", "undelivered")
	skus := []string{"a", "b", "r-sku"}
	before := counters(t, s, skus...)
	AuditOK(t, s)

	// Not old enough yet: nothing goes.
	clk.Advance(retentionAge - timeout - grace - time.Second)
	if res := prune(t, s, 100); res.Orders != 0 {
		t.Fatalf("pruned %d orders younger than the retention", res.Orders)
	}
	clk.Advance(timeout + grace + time.Minute)
	want := sum(rowsOf(t, s, "paid", 1), rowsOf(t, s, "cancelled", 0), rowsOf(t, s, "commanded", 0))
	if want["order_commands"] != 1 || want["payments"] < 1 || want["stock_ledger"] != 6 {
		t.Fatalf("the orders to delete hold %v: the setup is wrong", want)
	}
	first := prune(t, s, 2)
	if first.Orders != 2 {
		t.Fatalf("a batch of 2 deleted %d orders (%v)", first.Orders, first.Deleted)
	}
	rest := prune(t, s, 100)
	if got := sum(first.Deleted, rest.Deleted); !maps.Equal(got, want) {
		t.Errorf("deleted rows per table:\n got %v\nwant %v", got, want)
	}
	for _, id := range []string{"paid", "cancelled", "commanded"} {
		wantGone(t, s, id)
	}
	wantKept(t, s, "open", "flagged", "refunding", "undelivered", "remote")
	if got := counters(t, s, skus...); !slices.Equal(got, before) {
		t.Errorf("counters after retention:\n got %+v\nwant %+v", got, before)
	}
	AuditOK(t, s)
	if res := prune(t, s, 100); res.Orders != 0 {
		t.Fatalf("a second run deleted %v", res.Deleted)
	}

	// A late timer of a deleted order is a no-op (the order is Missing, as
	// any unknown id), and a late payment report for it is ErrNotFound, as
	// for an order that never was: nothing is written.
	due, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"cancelled"}})
	if err != nil || len(due.Cancelled) != 0 || len(due.Skipped) != 1 || !due.Skipped[0].Missing {
		t.Errorf("a late timer of a deleted order: %+v, %v; want it skipped as missing", due, err)
	}
	if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "cancelled", PaymentID: "late", AmountCents: 1000, CallbackID: "cb-late"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a late success of a deleted order: %v, want ErrNotFound", err)
	}
	if _, err := s.GetOrder(ctx, "cancelled"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the late success wrote an order: %v", err)
	}

	// The key of a deleted order went with it: the same request makes a
	// new order, not a replay of the deleted one.
	res, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "paid", Items: []order.Item{{SKU: "a", Qty: 1}},
		AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace, IdempotencyKey: "k-paid", RequestHash: "h"})
	if err != nil || res.Replayed {
		t.Fatalf("create again under the deleted order's key: %+v, %v; want a new order", res, err)
	}
	into(t, s, "paid", order.Cancelled)
	deliverAll(t, s, "s", "undelivered")
	before = counters(t, s, skus...)

	// Delivered at last, the undelivered order goes; settled, the remote
	// order goes with its task; refunded, the refunding order goes with its
	// refund. The flagged one owes money still and stays, however old.
	clk.Advance(2 * time.Minute) // the lease of the undelivered order's claim runs out
	deliverAll(t, s, "s")
	ts := claimTasks(t, s, 10, time.Minute)
	if len(ts) != 1 || ts[0].OrderID != "remote" {
		t.Fatalf("claimed tasks %+v, want remote's release", ts)
	}
	settleTasks(t, s, store.TaskOutcome{ID: ts[0].ID, Attempts: ts[0].Attempts, Action: ts[0].Action, OrderID: ts[0].OrderID,
		ReservationID: ts[0].ReservationID, Done: true, Result: "released"})
	rs := claimRefunds(t, s, 10, time.Minute)
	if len(rs) != 1 {
		t.Fatalf("claimed %d refunds, want refunding's", len(rs))
	}
	settleRefunds(t, s, refunded(rs[0], "re-1"))
	deliverAll(t, s, "s") // order.refunded
	want = sum(rowsOf(t, s, "undelivered", 0), rowsOf(t, s, "remote", 0), rowsOf(t, s, "refunding", 0))
	if want["stock_tasks"] != 1 || want["refunds"] != 1 {
		t.Fatalf("the orders to delete hold %v: the setup is wrong", want)
	}
	clk.Advance(time.Second)
	got := prune(t, s, 100)
	if !maps.Equal(got.Deleted, want) {
		t.Errorf("deleted rows per table:\n got %v\nwant %v", got.Deleted, want)
	}
	for _, id := range []string{"undelivered", "remote", "refunding"} {
		wantGone(t, s, id)
	}
	wantKept(t, s, "open", "flagged", "paid")
	if got := counters(t, s, skus...); !slices.Equal(got, before) {
		t.Errorf("counters after retention:\n got %+v\nwant %+v", got, before)
	}
	AuditOK(t, s)

	oldest, now, ok, err := s.OldestFinished(ctx)
	if err != nil || !ok || !oldest.Equal(t0) || !now.Equal(clk.Now().UTC().Truncate(time.Millisecond)) {
		t.Errorf("oldest finished: %v at %v, %v, %v; want the flagged order's cancel at %v", oldest, now, ok, err, t0)
	}
}

func testRetentionTasks(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	// A reserve the inventory refused: DONE, and its order never created.
	st := beginReserve(t, s, "refused")
	if err := s.DropReserve(ctx, st.Task, "insufficient_stock"); err != nil {
		t.Fatal(err)
	}
	// A remote order cancelled, its release DEAD; another's DONE.
	for _, id := range []string{"dead", "done"} {
		if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "far", Qty: 1}}, AmountCents: 1000,
			Currency: "EUR", Timeout: timeout, Grace: grace, ReservationID: "res-" + id}); err != nil {
			t.Fatal(err)
		}
		into(t, s, id, order.Cancelled)
	}
	for _, tk := range claimTasks(t, s, 10, time.Minute) {
		o := store.TaskOutcome{ID: tk.ID, Attempts: tk.Attempts, Action: tk.Action, OrderID: tk.OrderID, ReservationID: tk.ReservationID}
		if tk.OrderID == "dead" {
			o.Error, o.Dead = "gone", true
		} else {
			o.Done, o.Result = true, "released"
		}
		settleTasks(t, s, o)
	}
	// An order-service command answered: DONE.
	CreateCommanded(t, s, "commanded")
	clk.Advance(timeout + grace)
	commandDue(t, s, "commanded")
	cs := claimCommands(t, s, 10, time.Minute)
	settleCommands(t, s, answer(cs[0], ordersvc.Cancelled))

	res, err := s.PruneTasks(ctx, store.PruneTasksParams{Age: time.Hour, Limit: 100})
	if err != nil || !res.Turn || res.Rows() != 0 {
		t.Fatalf("prune tasks younger than the retention: %v, %v", res.Deleted, err)
	}
	clk.Advance(time.Hour + time.Second)
	res, err = s.PruneTasks(ctx, store.PruneTasksParams{Age: time.Hour, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	// The refused reserve's task and the command go; the done release of an
	// order still kept stays (the audit reads it), and the DEAD one stays.
	if want := map[string]int64{"stock_tasks": 1, "order_commands": 1, "refunds": 0}; !maps.Equal(res.Deleted, want) {
		t.Errorf("deleted %v, want %v", res.Deleted, want)
	}
	if got := tasksOf(t, s, "refused"); len(got) != 0 {
		t.Errorf("the refused reserve's tasks after retention: %v", got)
	}
	if got := tasksOf(t, s, "dead"); got[order.TaskRelease].Status != order.TaskDead {
		t.Errorf("the DEAD release after retention: %+v", got)
	}
	if got := tasksOf(t, s, "done"); got[order.TaskRelease].Status != order.TaskDone {
		t.Errorf("the DONE release of a kept order after retention: %+v", got)
	}
	AuditOK(t, s)
}

// testRetentionConcurrent runs retention batches beside creates, buyer and
// operator cancels (CancelDue) and the relay's claims and settles, on
// shared SKUs, for a bounded number of rounds: no call may fail (a
// deadlock would surface as an error or hang the test), and the audit holds
// afterwards.
func testRetentionConcurrent(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	skus := []string{"x", "y", "z"}
	Stock(t, s, 1_000_000, skus...)
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 3, 15
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				ids := make([]string, 4)
				for i := range ids {
					ids[i] = fmt.Sprintf("w%d-r%02d-%d", w, r, i)
					items := []order.Item{{SKU: skus[(i+w)%3], Qty: 1}, {SKU: skus[(i+w+1)%3], Qty: 1}}
					if _, err := s.CreateOrder(ctx, Params(ids[i], items...)); err != nil {
						fail(fmt.Errorf("create %s: %w", ids[i], err))
						return
					}
				}
				if _, err := s.CancelOrder(ctx, ids[0]); err != nil {
					fail(fmt.Errorf("cancel %s: %w", ids[0], err))
					return
				}
				if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids[1:3], Confirmed: true, Reason: order.ReasonOperator}); err != nil {
					fail(fmt.Errorf("operator cancel %v: %w", ids[1:3], err))
					return
				}
				if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: ids[3]}); err == nil {
					if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: ids[3], PaymentID: ids[3] + "-p", AmountCents: 100}); err != nil {
						fail(fmt.Errorf("pay %s: %w", ids[3], err))
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the relay
		defer wg.Done()
		for range workers * rounds {
			ds, err := s.ClaimEvents(ctx, store.ClaimEventsParams{Sink: "s", Limit: 50, Lease: time.Minute})
			if err != nil {
				fail(fmt.Errorf("claim events: %w", err))
				return
			}
			os := make([]store.Outcome, len(ds))
			for i, d := range ds {
				os[i] = store.Outcome{Seq: d.Seq, Attempts: d.Attempts, Delivered: true}
			}
			if err := s.SettleEvents(ctx, "s", os); err != nil {
				fail(fmt.Errorf("settle events: %w", err))
				return
			}
		}
	}()
	var pruned int
	wg.Add(1)
	go func() { // retention, the clock moving on so that orders come of age
		defer wg.Done()
		for range workers * rounds {
			clk.Advance(time.Second)
			res, err := s.PruneOrders(ctx, store.PruneOrdersParams{Age: time.Second, Limit: 5})
			if err != nil {
				fail(fmt.Errorf("prune orders: %w", err))
				return
			}
			pruned += res.Orders
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d orders deleted while the others ran", pruned)
	// Drain: every event delivered, every finished order gone.
	deliverAll(t, s, "s")
	clk.Advance(time.Minute)
	for range 100 {
		res, err := s.PruneOrders(ctx, store.PruneOrdersParams{Age: time.Second, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		if res.Orders == 0 {
			break
		}
	}
	if _, _, ok, err := s.OldestFinished(ctx); err != nil || ok {
		t.Errorf("a finished order is left after draining (%v)", err)
	}
	AuditOK(t, s)
}

// testRetentionAttempted: the service queries the gateway once more about
// an order cancelled after a payment attempt (ConfirmAfter after the
// cancel: a success after all is money owed back), so such an order is
// kept for AttemptedAge even when the retention is shorter; an order
// cancelled with no attempt goes at the retention.
func testRetentionAttempted(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 100, "a")
	if err := s.RegisterSinks(ctx, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	Create(t, s, "plain", "a")
	into(t, s, "plain", order.Cancelled)
	Create(t, s, "attempted", "a")
	if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "attempted", PaymentID: "attempted-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FailPayment(ctx, store.PaymentParams{OrderID: "attempted", PaymentID: "attempted-1"}); err != nil {
		t.Fatal(err)
	}
	into(t, s, "attempted", order.Cancelled)
	deliverAll(t, s, "s")
	const age, attempted = time.Minute, 3 * time.Minute
	pruneAt := func() store.PruneResult {
		t.Helper()
		res, err := s.PruneOrders(ctx, store.PruneOrdersParams{Age: age, AttemptedAge: attempted, Limit: 100})
		if err != nil || !res.Turn {
			t.Fatalf("prune orders: %+v, %v", res, err)
		}
		return res
	}
	clk.Advance(age + time.Second)
	if res := pruneAt(); res.Orders != 1 {
		t.Fatalf("past the retention, %d orders went, want the one cancelled with no attempt", res.Orders)
	}
	wantGone(t, s, "plain")
	if o := get(t, s, "attempted"); o.Status != order.Cancelled {
		t.Fatalf("the order cancelled after an attempt: %+v", o)
	}
	clk.Advance(attempted - age)
	if res := pruneAt(); res.Orders != 1 {
		t.Fatalf("past AttemptedAge, %d orders went, want the one cancelled after an attempt", res.Orders)
	}
	wantGone(t, s, "attempted")
	AuditOK(t, s)
}
