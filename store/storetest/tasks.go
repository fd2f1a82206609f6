package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseTasks is the stock-task part of the suite: orders whose stock a
// remote inventory holds, and the claims of the dispatchers that send them.
func exerciseTasks(t *testing.T, newStore Factory) {
	t.Run("stock tasks: remote orders move no counters; a cancel writes one release, a payment one confirm", func(t *testing.T) { testTasksWritten(t, newStore) })
	t.Run("stock tasks: claims lease, a stale claim cannot settle, failures back off, the dead wait for a retry", func(t *testing.T) { testTasksLifecycle(t, newStore) })
	t.Run("stock tasks: concurrent dispatchers never hold one task twice", func(t *testing.T) { testTasksConcurrentClaims(t, newStore) })
	t.Run("stock tasks: a create that may only replay writes nothing, or replays its key's order", func(t *testing.T) { testCreateReplayOnly(t, newStore) })
	t.Run("stock tasks: task refs page every task, DONE ones too, in id order", func(t *testing.T) { testTaskRefs(t, newStore) })
}

func testTaskRefs(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	if refs, err := s.TaskRefs(ctx, "", 10); err != nil || len(refs) != 0 {
		t.Fatalf("refs of no task: %+v, %v", refs, err)
	}
	CreateRemote(t, s, "tr-c", "far")
	CreateRemote(t, s, "tr-p", "far")
	into(t, s, "tr-c", order.Cancelled)
	into(t, s, "tr-p", order.Paid)
	claimed := claimTasks(t, s, 10, time.Minute)
	if len(claimed) != 2 {
		t.Fatalf("claimed %v, want a release and a confirm", taskNames(claimed))
	}
	settleTasks(t, s, store.TaskOutcome{ID: claimed[0].ID, Attempts: claimed[0].Attempts, Done: true, Result: "REPLENISH_SUCCESS",
		Action: claimed[0].Action, OrderID: claimed[0].OrderID, ReservationID: claimed[0].ReservationID})
	want := map[string]store.TaskRef{}
	for _, c := range claimed {
		want[c.ID] = store.TaskRef{ID: c.ID, OrderID: c.OrderID, Action: c.Action, ReservationID: c.ReservationID}
	}
	var got []store.TaskRef
	for after := ""; ; {
		page, err := s.TaskRefs(ctx, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) != 1 || page[0].ID <= after {
			t.Fatalf("page after %q: %+v, want one task after it", after, page)
		}
		got = append(got, page[0])
		after = page[0].ID
	}
	if len(got) != 2 || got[0] != want[got[0].ID] || got[1] != want[got[1].ID] || got[0].ID == got[1].ID {
		t.Fatalf("refs %+v, want %+v (the DONE one too)", got, want)
	}
	for _, r := range got {
		if r.ReservationID != "res-"+r.OrderID || (r.OrderID == "tr-c") != (r.Action == order.TaskRelease) {
			t.Errorf("ref %+v: want tr-c's release and tr-p's confirm, each on its reservation", r)
		}
	}
}

// A refused caller's reservation (store.CreateOrderParams.ReplayOnly) writes
// nothing — no order, no key — yet a retry of a create that succeeded still
// gets its order.
func testCreateReplayOnly(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(t0))
	ctx := context.Background()
	refused := errors.New("the reservation is refused")
	p := store.CreateOrderParams{ID: "ro-1", Items: []order.Item{{SKU: "far", Qty: 1}}, AmountCents: 1000, Currency: "EUR",
		Timeout: timeout, Grace: grace, ReservationID: "res-ro-1", IdempotencyKey: "k-ro-1", RequestHash: "h1", ReplayOnly: refused}
	if _, err := s.CreateOrder(ctx, p); !errors.Is(err, refused) {
		t.Fatalf("a create that may only replay, nothing to replay: %v, want its error", err)
	}
	if _, err := s.GetOrder(ctx, "ro-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused create wrote its order: %v", err)
	}
	// Nor its key: the same key makes the order once the refusal is gone.
	p.ReplayOnly = nil
	if res, err := s.CreateOrder(ctx, p); err != nil || res.Replayed {
		t.Fatalf("the create after the refusal: %+v, %v; want a new order", res, err)
	}
	p.ReplayOnly = refused
	if res, err := s.CreateOrder(ctx, p); err != nil || !res.Replayed || res.Order.ID != "ro-1" {
		t.Fatalf("a retry that may only replay: %+v, %v; want ro-1 replayed", res, err)
	}
	p.RequestHash = "h2"
	if _, err := s.CreateOrder(ctx, p); !errors.Is(err, store.ErrIdempotencyMismatch) {
		t.Fatalf("another request under the key: %v, want ErrIdempotencyMismatch", err)
	}
	p.IdempotencyKey, p.ID = "", "ro-2"
	if _, err := s.CreateOrder(ctx, p); !errors.Is(err, refused) {
		t.Fatalf("without a key: %v, want its error", err)
	}
	if _, err := s.GetOrder(ctx, "ro-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused create wrote its order: %v", err)
	}
}

// CreateRemote places an order whose stock the remote inventory holds under
// reservation "res-<id>": qty 1 per SKU, the suite's timeout and grace.
func CreateRemote(t testing.TB, s store.Store, id string, skus ...string) order.Order {
	t.Helper()
	items := make([]order.Item, len(skus))
	for i, sku := range skus {
		items[i] = order.Item{SKU: sku, Qty: 1}
	}
	res, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
		ID: id, Items: items, AmountCents: 1000, Currency: "EUR", Timeout: timeout, Grace: grace, ReservationID: "res-" + id,
	})
	if err != nil {
		t.Fatalf("create remote %s: %v", id, err)
	}
	return res.Order
}

func claimTasks(t testing.TB, s store.Store, limit int, lease time.Duration) []store.ClaimedTask {
	t.Helper()
	ts, err := s.ClaimTasks(context.Background(), store.ClaimTasksParams{Limit: limit, Lease: lease})
	if err != nil {
		t.Fatalf("claim tasks: %v", err)
	}
	return ts
}

func settleTasks(t testing.TB, s store.Store, os ...store.TaskOutcome) {
	t.Helper()
	if err := s.SettleTasks(context.Background(), os); err != nil {
		t.Fatalf("settle tasks: %v", err)
	}
}

func taskNames(ts []store.ClaimedTask) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.OrderID + " " + string(tk.Action)
	}
	slices.Sort(out)
	return out
}

func testTasksWritten(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "local")
	// No SKU row exists for "far": the inventory holds it, not lapse.
	o := CreateRemote(t, s, "r-buyer", "far")
	if o.ReservationID != "res-r-buyer" || o.Status != order.Pending {
		t.Fatalf("created %+v, want PENDING with reservation res-r-buyer", o)
	}
	CreateRemote(t, s, "r-paid", "far")
	CreateRemote(t, s, "r-timeout", "far")
	if _, err := s.CreateOrder(ctx, store.CreateOrderParams{ID: "r-again", Items: []order.Item{{SKU: "far", Qty: 1}}, AmountCents: 1,
		Currency: "EUR", Timeout: timeout, ReservationID: "res-r-paid"}); !errors.Is(err, store.ErrReservationUsed) {
		t.Fatalf("a second order on one reservation: %v, want ErrReservationUsed", err)
	}
	Create(t, s, "l-timeout", "local")
	if _, err := s.GetSKU(ctx, "far"); err == nil {
		t.Fatal("a remote create made a SKU row")
	}
	if got := sku(t, s, "local"); got.Locked != 1 {
		t.Fatalf("local sku %+v, want 1 locked", got)
	}
	if ts := claimTasks(t, s, 10, time.Minute); len(ts) != 0 {
		t.Fatalf("creates wrote tasks %v; a reservation the caller made needs none", taskNames(ts))
	}

	into(t, s, "r-buyer", order.Cancelled)
	into(t, s, "r-paid", order.Paid)
	clk.Advance(timeout + grace)
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"r-timeout", "l-timeout"}})
	if err != nil || len(res.Cancelled) != 2 {
		t.Fatalf("cancel due: %+v, %v; want both cancelled", res, err)
	}
	if got := sku(t, s, "local"); got.Locked != 0 || got.Available != 10 {
		t.Fatalf("local sku after the mixed batch %+v, want its unit back", got)
	}

	got := claimTasks(t, s, 10, time.Minute)
	if want := []string{"r-buyer release", "r-paid confirm", "r-timeout release"}; !slices.Equal(taskNames(got), want) {
		t.Fatalf("tasks %v, want %v", taskNames(got), want)
	}
	for _, tk := range got {
		if tk.ReservationID != "res-"+tk.OrderID || !slices.Equal(tk.Items, []order.Item{{SKU: "far", Qty: 1}}) ||
			tk.Status != order.TaskPending || tk.Attempts != 1 || tk.Failures != 0 || !tk.CreatedAt.Equal(tk.Since) {
			t.Errorf("task %+v: want reservation res-%s, its items, PENDING, first attempt", tk, tk.OrderID)
		}
	}

	full, err := s.GetOrder(ctx, "r-paid")
	if err != nil {
		t.Fatal(err)
	}
	if full.ReservationID != "res-r-paid" || len(full.Tasks) != 1 || full.Tasks[0].Action != order.TaskConfirm {
		t.Fatalf("get r-paid: reservation %q, tasks %+v; want its confirm task", full.ReservationID, full.Tasks)
	}
	if local, err := s.GetOrder(ctx, "l-timeout"); err != nil || local.Tasks != nil {
		t.Fatalf("get l-timeout: tasks %+v, %v; a local order has none", local.Tasks, err)
	}
	AuditOK(t, s)
}

func testTasksLifecycle(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	for _, id := range []string{"t1", "t2"} {
		CreateRemote(t, s, id, "far")
		into(t, s, id, order.Cancelled)
	}
	first := claimTasks(t, s, 10, time.Minute)
	if len(first) != 2 {
		t.Fatalf("claimed %v, want both", taskNames(first))
	}
	if again := claimTasks(t, s, 10, time.Minute); len(again) != 0 {
		t.Fatalf("claimed leased tasks again: %v", taskNames(again))
	}
	clk.Advance(time.Minute)
	second := claimTasks(t, s, 10, time.Minute)
	if len(second) != 2 || second[0].Attempts != 2 {
		t.Fatalf("after the lease: claimed %+v, want both at attempt 2", second)
	}
	byOrder := map[string]store.ClaimedTask{}
	for _, tk := range second {
		byOrder[tk.OrderID] = tk
	}
	stale := first[0]
	settleTasks(t, s, store.TaskOutcome{ID: stale.ID, Attempts: stale.Attempts, Done: true, Result: "REPLENISH_SUCCESS"})

	t1, t2 := byOrder["t1"], byOrder["t2"]
	settleTasks(t, s,
		store.TaskOutcome{ID: t1.ID, Attempts: t1.Attempts, Error: "inventory down", RetryIn: 30 * time.Second},
		store.TaskOutcome{ID: t2.ID, Attempts: t2.Attempts, Error: "REJECTED: unknown reservation", Result: "REJECTED", Dead: true},
	)
	open, err := s.ListTasks(ctx, store.ListTasksParams{})
	if err != nil || len(open) != 2 {
		t.Fatalf("list open tasks: %+v, %v; want both (the stale settle did nothing)", open, err)
	}
	dead, err := s.ListTasks(ctx, store.ListTasksParams{Dead: true})
	if err != nil || len(dead) != 1 || dead[0].OrderID != "t2" || dead[0].Status != order.TaskDead || dead[0].DeadAt.IsZero() || dead[0].Result != "REJECTED" {
		t.Fatalf("list dead: %+v, %v; want t2's task DEAD with its answer", dead, err)
	}
	st, err := s.TaskStats(ctx)
	if err != nil || st.Pending != 1 || st.Dead != 1 || st.OldestPending.IsZero() {
		t.Fatalf("stats %+v, %v; want 1 pending, 1 dead", st, err)
	}
	rep, err := s.Audit(ctx, store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() || warnings(rep, "stock_tasks_not_done") != 1 {
		t.Fatalf("audit %+v, %v; want ok with the dead task as one warning", rep, err)
	}

	clk.Advance(29 * time.Second)
	if got := claimTasks(t, s, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %v before its backoff ended", taskNames(got))
	}
	clk.Advance(time.Second)
	retried := claimTasks(t, s, 10, time.Minute)
	if len(retried) != 1 || retried[0].OrderID != "t1" || retried[0].Failures != 1 || retried[0].LastError != "inventory down" {
		t.Fatalf("after the backoff: %+v; want t1 with one failure and its error", retried)
	}
	settleTasks(t, s, store.TaskOutcome{ID: retried[0].ID, Attempts: retried[0].Attempts, Done: true, Result: "ALREADY_DONE"})

	n, err := s.RetryTasks(ctx, store.RetryTasksParams{AllDead: true})
	if err != nil || n != 1 {
		t.Fatalf("retry dead: %d, %v; want 1", n, err)
	}
	back := claimTasks(t, s, 10, time.Minute)
	if len(back) != 1 || back[0].OrderID != "t2" || back[0].Failures != 0 || !back[0].Since.Equal(clk.Now()) {
		t.Fatalf("after the retry: %+v; want t2, its failures and age counted from now", back)
	}
	settleTasks(t, s, store.TaskOutcome{ID: back[0].ID, Attempts: back[0].Attempts, Done: true, Result: "REPLENISH_SUCCESS"})
	if open, err := s.ListTasks(ctx, store.ListTasksParams{}); err != nil || len(open) != 0 {
		t.Fatalf("open tasks after both done: %+v, %v", open, err)
	}
	full, err := s.GetOrder(ctx, "t1")
	if err != nil || len(full.Tasks) != 1 || full.Tasks[0].Status != order.TaskDone || full.Tasks[0].DoneAt.IsZero() || full.Tasks[0].Result != "ALREADY_DONE" {
		t.Fatalf("t1's tasks %+v, %v; want one DONE with its answer", full.Tasks, err)
	}
	if n, err := s.RetryTasks(ctx, store.RetryTasksParams{IDs: []string{full.Tasks[0].ID}}); err != nil || n != 0 {
		t.Fatalf("retry of a DONE task: %d, %v; want 0", n, err)
	}
	AuditOK(t, s)
}

// warnings counts the findings of the warning check name.
func warnings(rep store.AuditReport, name string) int64 {
	for _, c := range rep.Checks {
		if c.Name == name && c.Warning {
			return c.Count
		}
	}
	return -1
}

func testTasksConcurrentClaims(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	const n = 120
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		CreateRemote(t, s, id, "far")
		into(t, s, id, order.Cancelled)
	}
	claimEachOnce(t, "tasks", n, func() ([]store.ClaimedTask, error) {
		return s.ClaimTasks(context.Background(), store.ClaimTasksParams{Limit: 7, Lease: time.Hour})
	}, func(tk store.ClaimedTask) string { return tk.ID }, func(ts []store.ClaimedTask) error {
		os := make([]store.TaskOutcome, len(ts))
		for i, tk := range ts {
			os[i] = store.TaskOutcome{ID: tk.ID, Attempts: tk.Attempts, Done: true}
		}
		return s.SettleTasks(context.Background(), os)
	})
	if st, err := s.TaskStats(context.Background()); err != nil || st.Pending != 0 || st.Dead != 0 {
		t.Fatalf("stats after the run %+v, %v; want nothing left", st, err)
	}
}
