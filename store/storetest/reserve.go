package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// exerciseReserve is the reserving step of creates whose stock lapse
// reserves itself at the remote inventory (--inventory-reserve).
func exerciseReserve(t *testing.T, newStore Factory) {
	t.Run("reserving: the reserve task is leased to the create, then DONE beside the order", func(t *testing.T) { testReserveCreated(t, newStore) })
	t.Run("reserving: a refused reserve leaves no order, and a retry is refused", func(t *testing.T) { testReserveRefused(t, newStore) })
	t.Run("reserving: a reserve resolved without its order gives the stock back", func(t *testing.T) { testReserveCompensated(t, newStore) })
	t.Run("reserving: a create retried while a dispatcher holds the reserve takes it over", func(t *testing.T) { testReserveTakenOver(t, newStore) })
	t.Run("reserving: a create whose idempotency key an order took reserves nothing", func(t *testing.T) { testReserveKeyTaken(t, newStore) })
	t.Run("reserving: a replay of another order gives the create's own reservation back", func(t *testing.T) { testReserveReplayReleases(t, newStore) })
	t.Run("reserving: a reserve that goes DEAD gives its stock back", func(t *testing.T) { testReserveDeadReleases(t, newStore) })
	t.Run("reserving: creates of one id sent at once share one reserve", func(t *testing.T) { testReserveConcurrent(t, newStore) })
}

func reserveParams(id string) store.CreateOrderParams {
	return store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "far", Qty: 2}}, AmountCents: 1000, Currency: "EUR",
		Timeout: timeout, Grace: grace, ReservationID: id}
}

func beginReserve(t testing.TB, s store.Store, id string) store.ReserveStart {
	t.Helper()
	st, err := s.BeginReserve(context.Background(), reserveParams(id), 30*time.Second)
	if err != nil {
		t.Fatalf("begin reserve %s: %v", id, err)
	}
	return st
}

func tasksOf(t testing.TB, s store.Store, id string) map[order.TaskAction]order.StockTask {
	t.Helper()
	ts, err := s.ListTasks(context.Background(), store.ListTasksParams{OrderID: id})
	if err != nil {
		t.Fatal(err)
	}
	out := map[order.TaskAction]order.StockTask{}
	for _, tk := range ts {
		out[tk.Action] = tk
	}
	return out
}

func testReserveCreated(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	st := beginReserve(t, s, "rv1")
	tk := st.Task
	if st.Exists || tk.Action != order.TaskReserve || tk.ReservationID != "rv1" || tk.Attempts != 1 || tk.Status != order.TaskPending ||
		len(tk.Items) != 1 || tk.Items[0] != (order.Item{SKU: "far", Qty: 2}) {
		t.Fatalf("begin reserve: %+v", st)
	}
	if got := claimTasks(t, s, 10, time.Minute); len(got) != 0 {
		t.Fatalf("a dispatcher claimed %v while the create holds it", taskNames(got))
	}
	res, err := s.CreateReserved(ctx, reserveParams("rv1"), tk, "REPLENISH_SUCCESS")
	if err != nil || res.Order.ReservationID != "rv1" || res.Order.Status != order.Pending {
		t.Fatalf("create reserved: %+v, %v", res, err)
	}
	if got := tasksOf(t, s, "rv1"); got[order.TaskReserve].Status != order.TaskDone || len(got) != 1 {
		t.Fatalf("tasks after the create: %+v; want the reserve DONE and nothing else", got)
	}
	if again := beginReserve(t, s, "rv1"); !again.Exists {
		t.Fatalf("begin reserve of a created order: %+v, want Exists", again)
	}
	clk.Advance(time.Hour)
	if got := claimTasks(t, s, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %v: a DONE reserve is never sent again", taskNames(got))
	}
	AuditOK(t, s)
}

func testReserveRefused(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	st := beginReserve(t, s, "rv2")
	if err := s.DropReserve(ctx, st.Task, "REJECTED"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetOrder(ctx, "rv2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get a refused order: %v, want not found", err)
	}
	if _, err := s.BeginReserve(ctx, reserveParams("rv2"), time.Minute); !errors.Is(err, store.ErrInsufficientStock) {
		t.Fatalf("begin reserve again: %v, want insufficient stock", err)
	}
	if got := tasksOf(t, s, "rv2"); len(got) != 1 || got[order.TaskReserve].Result != "REJECTED" {
		t.Fatalf("tasks %+v: want the refused reserve only", got)
	}
	AuditOK(t, s)
}

func testReserveCompensated(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	st := beginReserve(t, s, "rv3")
	// The inventory did not answer: the create hands the reserve to the
	// dispatchers (due at once) and its client gives up.
	settleTasks(t, s, store.TaskOutcome{ID: st.Task.ID, Attempts: st.Task.Attempts, Error: "timeout",
		Action: order.TaskReserve, OrderID: "rv3", ReservationID: "rv3"})
	got := claimTasks(t, s, 10, time.Minute)
	if len(got) != 1 || got[0].Action != order.TaskReserve || got[0].Attempts != 2 {
		t.Fatalf("dispatcher claimed %+v, want the reserve", got)
	}
	settleTasks(t, s, store.TaskOutcome{ID: got[0].ID, Attempts: got[0].Attempts, Done: true, Result: "ALREADY_DONE",
		Action: order.TaskReserve, OrderID: "rv3", ReservationID: "rv3"})
	tasks := tasksOf(t, s, "rv3")
	if tasks[order.TaskReserve].Status != order.TaskDone || tasks[order.TaskRelease].Status != order.TaskPending ||
		tasks[order.TaskRelease].ReservationID != "rv3" || len(tasks[order.TaskRelease].Items) != 1 {
		t.Fatalf("tasks %+v: want the reserve DONE and a release giving its stock back", tasks)
	}
	if _, err := s.BeginReserve(ctx, reserveParams("rv3"), time.Minute); !errors.Is(err, store.ErrReservationReleased) {
		t.Fatalf("begin reserve after the release: %v, want ErrReservationReleased", err)
	}

	// A create that cannot be made gives its stock back too.
	st4 := beginReserve(t, s, "rv4")
	CreateRemote(t, s, "rv4", "far") // the id is taken meanwhile
	if _, err := s.CreateReserved(ctx, reserveParams("rv4"), st4.Task, "REPLENISH_SUCCESS"); !errors.Is(err, store.ErrOrderExists) {
		t.Fatalf("create reserved on a taken id: %v, want ErrOrderExists", err)
	}
	if tasks := tasksOf(t, s, "rv4"); tasks[order.TaskReserve].Status != order.TaskDone || tasks[order.TaskRelease].ReservationID != "rv4" {
		t.Fatalf("tasks %+v: want the reserve DONE and its release", tasks)
	}
}

func testReserveTakenOver(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	st := beginReserve(t, s, "rv5")
	clk.Advance(time.Minute) // the create's lease ran out: a dispatcher takes the reserve
	held := claimTasks(t, s, 10, time.Minute)
	if len(held) != 1 {
		t.Fatalf("claimed %v", taskNames(held))
	}
	retry := beginReserve(t, s, "rv5") // the client retries its create
	if retry.Task.ID != st.Task.ID || retry.Task.Attempts != 3 {
		t.Fatalf("retry took %+v, want the same task at attempt 3", retry.Task)
	}
	// The dispatcher's answer comes back: its claim is stale, it decides nothing.
	settleTasks(t, s, store.TaskOutcome{ID: held[0].ID, Attempts: held[0].Attempts, Done: true, Result: "REPLENISH_SUCCESS",
		Action: order.TaskReserve, OrderID: "rv5", ReservationID: "rv5"})
	if tasks := tasksOf(t, s, "rv5"); len(tasks) != 1 || tasks[order.TaskReserve].Status != order.TaskPending {
		t.Fatalf("tasks %+v after a stale settle: want the reserve still held by the create", tasks)
	}
	if _, err := s.CreateReserved(ctx, reserveParams("rv5"), retry.Task, "ALREADY_DONE"); err != nil {
		t.Fatalf("create reserved: %v", err)
	}
	if tasks := tasksOf(t, s, "rv5"); len(tasks) != 1 || tasks[order.TaskReserve].Status != order.TaskDone {
		t.Fatalf("tasks %+v: want the reserve DONE, no release", tasks)
	}
	AuditOK(t, s)
}

// keyedReserve is reserveParams(id) sent with idempotency key "key-"+key.
func keyedReserve(id, key string) store.CreateOrderParams {
	p := reserveParams(id)
	p.IdempotencyKey, p.RequestHash = "key-"+key, "hash-"+key
	return p
}

func testReserveKeyTaken(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	first, err := s.BeginReserve(ctx, keyedReserve("rk1", "k"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateReserved(ctx, keyedReserve("rk1", "k"), first.Task, "REPLENISH_SUCCESS"); err != nil {
		t.Fatal(err)
	}
	// The same request under another order id (a retry that made its id
	// afresh): the key answers it, nothing is reserved for it.
	again, err := s.BeginReserve(ctx, keyedReserve("rk2", "k"), time.Minute)
	if err != nil || !again.Exists {
		t.Fatalf("begin reserve of a taken key: %+v, %v; want Exists", again, err)
	}
	if tasks := tasksOf(t, s, "rk2"); len(tasks) != 0 {
		t.Fatalf("tasks of rk2 %+v: want none, the key's order holds the stock", tasks)
	}
	AuditOK(t, s)
}

func testReserveReplayReleases(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	// Two tries of one create, each with an id of its own, reserve before
	// either takes the key: the one that comes second is a replay of the
	// first's order, and its reservation is nobody's.
	late, err := s.BeginReserve(ctx, keyedReserve("rr2", "r"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.BeginReserve(ctx, keyedReserve("rr1", "r"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateReserved(ctx, keyedReserve("rr1", "r"), won.Task, "REPLENISH_SUCCESS"); err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateReserved(ctx, keyedReserve("rr2", "r"), late.Task, "REPLENISH_SUCCESS")
	if err != nil || !res.Replayed || res.Order.ID != "rr1" {
		t.Fatalf("create reserved of the second try: %+v, %v; want a replay of rr1", res, err)
	}
	tasks := tasksOf(t, s, "rr2")
	if tasks[order.TaskReserve].Status != order.TaskDone || tasks[order.TaskRelease].Status != order.TaskPending ||
		tasks[order.TaskRelease].ReservationID != "rr2" {
		t.Fatalf("tasks of rr2 %+v: want its reserve DONE and a release giving its stock back", tasks)
	}
	if tasks := tasksOf(t, s, "rr1"); len(tasks) != 1 || tasks[order.TaskReserve].Status != order.TaskDone {
		t.Fatalf("tasks of rr1 %+v: want its reserve DONE, no release", tasks)
	}
	AuditOK(t, s)
}

func testReserveDeadReleases(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	st := beginReserve(t, s, "rd1")
	settleTasks(t, s, store.TaskOutcome{ID: st.Task.ID, Attempts: st.Task.Attempts, Error: "timeout",
		Action: order.TaskReserve, OrderID: "rd1", ReservationID: "rd1"})
	got := claimTasks(t, s, 10, time.Minute)
	if len(got) != 1 || got[0].Action != order.TaskReserve {
		t.Fatalf("claimed %v, want the reserve", taskNames(got))
	}
	// The dispatcher gives up: an earlier copy of the reserve may have been
	// applied, so the stock is given back.
	settleTasks(t, s, store.TaskOutcome{ID: got[0].ID, Attempts: got[0].Attempts, Error: "connection refused", Dead: true,
		Action: order.TaskReserve, OrderID: "rd1", ReservationID: "rd1"})
	tasks := tasksOf(t, s, "rd1")
	if tasks[order.TaskReserve].Status != order.TaskDead || tasks[order.TaskRelease].Status != order.TaskPending ||
		tasks[order.TaskRelease].ReservationID != "rd1" || len(tasks[order.TaskRelease].Items) != 1 {
		t.Fatalf("tasks %+v: want the reserve DEAD and a release giving its stock back", tasks)
	}
	if _, err := s.BeginReserve(ctx, reserveParams("rd1"), time.Minute); !errors.Is(err, store.ErrReservationReleased) {
		t.Fatalf("begin reserve after the release: %v, want ErrReservationReleased", err)
	}
	// A failure short of DEAD writes nothing more.
	st2 := beginReserve(t, s, "rd2")
	settleTasks(t, s, store.TaskOutcome{ID: st2.Task.ID, Attempts: st2.Task.Attempts, Error: "timeout",
		Action: order.TaskReserve, OrderID: "rd2", ReservationID: "rd2"})
	if tasks := tasksOf(t, s, "rd2"); len(tasks) != 1 {
		t.Fatalf("tasks %+v: want the reserve only", tasks)
	}
}

func testReserveConcurrent(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	for round := range 20 {
		id := fmt.Sprintf("rc%d", round)
		var wg sync.WaitGroup
		starts := make([]store.ReserveStart, 2)
		errs := make([]error, 2)
		for i := range starts {
			wg.Go(func() { starts[i], errs[i] = s.BeginReserve(ctx, reserveParams(id), time.Minute) })
		}
		wg.Wait()
		for i := range starts {
			if errs[i] != nil || starts[i].Exists || starts[i].Task.ReservationID != id {
				t.Fatalf("round %d: begin reserve %d of 2 at once: %+v, %v; want the reserve", round, i, starts[i], errs[i])
			}
		}
		if starts[0].Task.ID != starts[1].Task.ID {
			t.Fatalf("round %d: two reserve tasks %s and %s for one reservation", round, starts[0].Task.ID, starts[1].Task.ID)
		}
	}
}

func testOrderOfPayment(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "op1", "a")
	Create(t, s, "op2", "a")
	for _, p := range []store.StartPaymentParams{{OrderID: "op1", PaymentID: "pi_1"}, {OrderID: "op2", PaymentID: "pi_2"}, {OrderID: "op2", PaymentID: "pi_3"}} {
		if _, err := s.StartPayment(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for pid, want := range map[string]string{"pi_1": "op1", "pi_2": "op2", "pi_3": "op2"} {
		if got, err := s.OrderOfPayment(ctx, pid); err != nil || got != want {
			t.Errorf("order of %s: %q, %v; want %s", pid, got, err, want)
		}
	}
	if _, err := s.OrderOfPayment(ctx, "pi_none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("order of an unknown payment: %v, want ErrNotFound", err)
	}
}
