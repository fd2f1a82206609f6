package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

// shop is a real lapse store (SQLite) whose stock the reference inventory
// holds, served over HTTP, with orders in every state.
type shop struct {
	t      *testing.T
	ctx    context.Context
	lapse  *sqlite.Store
	inv    *reference.Server
	client inventory.Client
}

func newShop(t *testing.T, inv *reference.Store) *shop {
	t.Helper()
	ctx := context.Background()
	st := servicetest.SQLite(t)
	srv := reference.NewServer(inv, reference.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if _, err := inv.SetAvailable(ctx, "sku", 1000); err != nil {
		t.Fatal(err)
	}
	c := inventory.NewHTTPClient(srv.URL(), inventory.WithTimeout(5*time.Second))
	t.Cleanup(func() { c.Close() })
	return &shop{t: t, ctx: ctx, lapse: st, inv: srv, client: c}
}

// send sends c and wants it applied.
func (s *shop) send(c inventory.Command) {
	s.t.Helper()
	a, err := s.client.Send(s.ctx, c)
	if err != nil || !a.Done() {
		s.t.Fatalf("send %s %s: %+v, %v", c.Action, c.ReservationID, a, err)
	}
}

// order reserves stock for id at the inventory, as a caller does, then
// creates the order at lapse with that reservation.
func (s *shop) order(id, reservation string) {
	s.t.Helper()
	s.send(inventory.Command{TaskID: "reserve-" + id, Action: inventory.Reserve, ReservationID: reservation, OrderID: id,
		Items: []inventory.Item{{SKU: "sku", Qty: 1}}})
	_, err := s.lapse.CreateOrder(s.ctx, store.CreateOrderParams{
		ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 1000, Currency: "EUR", Timeout: time.Hour, ReservationID: reservation,
	})
	if err != nil {
		s.t.Fatalf("create %s: %v", id, err)
	}
}

func (s *shop) cancel(id string) {
	s.t.Helper()
	if _, err := s.lapse.CancelOrder(s.ctx, id); err != nil {
		s.t.Fatalf("cancel %s: %v", id, err)
	}
}

func (s *shop) pay(id string) {
	s.t.Helper()
	res, err := s.lapse.CompletePayment(s.ctx, store.PaymentParams{OrderID: id, PaymentID: "pay-" + id, AmountCents: 1000})
	if err != nil || res.Outcome != store.OutcomePaid {
		s.t.Fatalf("pay %s: %v, %v", id, res.Outcome, err)
	}
}

// dispatch runs a Dispatcher until no task is PENDING, and wants none DEAD.
func (s *shop) dispatch() {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	d := &inventory.Dispatcher{Store: s.lapse, Client: s.client, DispatcherConfig: inventory.DispatcherConfig{
		Interval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			s.t.Error(err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		stats, err := s.lapse.TaskStats(s.ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		if stats.Pending == 0 {
			if stats.Dead != 0 {
				s.t.Fatalf("%d tasks DEAD", stats.Dead)
			}
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("tasks still PENDING after 20 s: %+v", stats)
		}
		d.Notify()
		select {
		case <-time.After(5 * time.Millisecond):
		case err := <-done:
			s.t.Fatalf("the dispatcher stopped: %v", err)
		}
	}
}

// settleByHand claims every due task and settles each as decide says —
// sending its command first when send — instead of a dispatcher.
func (s *shop) settleByHand(decide func(t store.ClaimedTask) (send bool, o store.TaskOutcome)) {
	s.t.Helper()
	claimed, err := s.lapse.ClaimTasks(s.ctx, store.ClaimTasksParams{Limit: 100, Lease: time.Minute})
	if err != nil {
		s.t.Fatal(err)
	}
	var outcomes []store.TaskOutcome
	for _, c := range claimed {
		send, o := decide(c)
		o.ID, o.Attempts = c.ID, c.Attempts
		if send {
			a, err := s.client.Send(s.ctx, inventory.CommandOf(c.StockTask))
			if err != nil {
				s.t.Fatal(err)
			}
			o.Result = string(a.Result)
			o.Done = a.Done()
			o.Dead = !a.Done()
			o.Error = a.Reason
		}
		outcomes = append(outcomes, o)
	}
	if err := s.lapse.SettleTasks(s.ctx, outcomes); err != nil {
		s.t.Fatal(err)
	}
}

func (s *shop) reconcile(p reconcile.StockParams) reconcile.StockReport {
	s.t.Helper()
	p.Orders = s.lapse
	if p.Ledger == nil {
		p.Ledger = reconcile.NewHTTPLedger(s.inv.URL(), nil)
	}
	rep, err := reconcile.ReconcileStock(s.ctx, p)
	if err != nil {
		s.t.Fatal(err)
	}
	return rep
}

// healthy fills the shop with n orders run to their end: every third paid,
// every third cancelled, the rest open; the tasks dispatched.
func (s *shop) healthy(n int) (open int) {
	for i := range n {
		id := fmt.Sprintf("o-%03d", i)
		s.order(id, "rsv-"+id)
		switch i % 3 {
		case 0:
			s.pay(id)
		case 1:
			s.cancel(id)
		default:
			open++
		}
	}
	s.dispatch()
	return open
}

func foundStock(rep reconcile.StockReport) []string {
	var out []string
	for _, m := range rep.Mismatches {
		out = append(out, string(m.Kind)+" "+m.OrderID)
	}
	slices.Sort(out)
	return out
}

func TestStockReconcileOnSQLite(t *testing.T) {
	t.Parallel()
	stockReconcile(t, inventorytest.SQLite(t))
}

func TestStockReconcileOnPostgres(t *testing.T) {
	t.Parallel()
	stockReconcile(t, inventorytest.Postgres(t))
}

func stockReconcile(t *testing.T, inv *reference.Store) {
	s := newShop(t, inv)
	const n = 30
	open := s.healthy(n)
	// Paged 7 rows at a time, so that the ledger takes many pages.
	rep := s.reconcile(reconcile.StockParams{LedgerPageSize: 7, PageSize: 4})
	if !rep.OK() || len(rep.Mismatches) != 0 {
		t.Fatalf("a clean run: %+v", rep)
	}
	// Every order reserved, a third released, a third confirmed.
	if rep.Orders != n || rep.Open != open || rep.LedgerRows != n+2*n/3 || rep.OtherRows != 0 || rep.Rechecked != 0 {
		t.Errorf("clean counts: %+v", rep)
	}

	// Now break things.
	//   paid:     paid at lapse; released at the inventory behind lapse's
	//             back, so that its confirm is refused (DEAD).
	//   lost:     cancelled; its release task settled DONE but never sent.
	//   dead:     cancelled; its release task DEAD (the inventory refused).
	//   early:    open at lapse; released at the inventory.
	s.order("paid", "rsv-paid")
	s.pay("paid")
	s.send(inventory.Command{TaskID: "rogue-1", Action: inventory.Release, ReservationID: "rsv-paid"})
	s.order("lost", "rsv-lost")
	s.cancel("lost")
	s.order("dead", "rsv-dead")
	s.cancel("dead")
	s.order("early", "rsv-early")
	s.send(inventory.Command{TaskID: "rogue-2", Action: inventory.Release, ReservationID: "rsv-early"})
	// An order outside the range, released behind lapse's back: not
	// compared, its rows counted as others'.
	s.send(inventory.Command{TaskID: "rogue-3", Action: inventory.Release, ReservationID: "rsv-elsewhere"})

	s.settleByHand(func(c store.ClaimedTask) (bool, store.TaskOutcome) {
		switch c.OrderID {
		case "paid":
			return true, store.TaskOutcome{}
		case "lost":
			return false, store.TaskOutcome{Done: true, Result: "REPLENISH_SUCCESS"}
		case "dead":
			return false, store.TaskOutcome{Dead: true, Result: "REJECTED", Error: "rejected_by_fault_switch"}
		}
		t.Fatalf("unexpected task %s of %s", c.Action, c.OrderID)
		return false, store.TaskOutcome{}
	})

	rep = s.reconcile(reconcile.StockParams{LedgerPageSize: 7, MaxExamples: 10})
	want := []string{
		"applied_elsewhere early",
		"applied_elsewhere paid",
		"applied_while_open early",
		"done_but_not_applied lost",
		"never_confirmed paid",
		"never_released dead",
		"never_released lost",
		"released_but_paid paid",
	}
	if got := foundStock(rep); !slices.Equal(got, want) {
		t.Errorf("found\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if rep.OK() || rep.MismatchedOrders != 4 || rep.Counts["never_released"] != 2 || rep.OtherRows != 1 {
		t.Errorf("counts: ok %v, %d orders mismatched, %v, %d other rows", rep.OK(), rep.MismatchedOrders, rep.Counts, rep.OtherRows)
	}
	for _, m := range rep.Mismatches {
		switch {
		case m.OrderID == "dead" && !strings.Contains(m.Detail, "is DEAD since") && !strings.Contains(m.Detail, "lapse tasks retry"):
			t.Errorf("dead's detail does not say its task is DEAD: %s", m.Detail)
		case m.OrderID == "lost" && m.Kind == "never_released" && !strings.Contains(m.Detail, "is DONE since"):
			t.Errorf("lost's detail does not say its task is DONE: %s", m.Detail)
		case m.OrderID == "paid" && m.Kind == "never_confirmed" && !strings.Contains(m.Detail, "DEAD"):
			t.Errorf("paid's confirm task is not shown DEAD: %s", m.Detail)
		case m.OrderID == "paid" && (m.Ledger["reserve"] != 1 || m.Ledger["release"] != 1 || m.LapseStatus != order.Paid || len(m.Tasks) != 1):
			t.Errorf("paid's mismatch: %+v", m)
		}
	}

	// The examples are capped per kind; the counts are not.
	capped := s.reconcile(reconcile.StockParams{MaxExamples: 1})
	if len(capped.Mismatches) != 6 || capped.Counts["never_released"] != 2 || capped.Counts["done_but_not_applied"] != 1 {
		t.Errorf("MaxExamples 1: %d examples, counts %v", len(capped.Mismatches), capped.Counts)
	}

	// The table and the JSON.
	var b bytes.Buffer
	if err := reconcile.WriteStockTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{": NOT OK\n", "never_released", "release DEAD", "reserve×1 release×1", "4 orders mismatched"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table has no %q:\n%s", w, b.String())
		}
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Counts     map[string]int `json:"counts"`
		Mismatches []struct {
			Kind   string            `json:"kind"`
			Tasks  []order.StockTask `json:"tasks"`
			Ledger map[string]int    `json:"ledger"`
		} `json:"mismatches"`
	}
	if err := json.Unmarshal(j, &back); err != nil || back.Counts["never_released"] != 2 || len(back.Mismatches) != len(want) {
		t.Errorf("JSON: %v\n%s", err, j)
	}
}

// TestStockReconcileFailsOnABrokenInventory: a ledger that cannot be read
// is an error, never a clean report.
func TestStockReconcileFailsOnABrokenInventory(t *testing.T) {
	t.Parallel()
	s := newShop(t, inventorytest.SQLite(t))
	s.order("o-1", "rsv-1")
	s.cancel("o-1")
	s.settleByHand(func(store.ClaimedTask) (bool, store.TaskOutcome) { return false, store.TaskOutcome{Done: true} })

	for name, url := range map[string]string{
		"a path the inventory does not serve": s.inv.URL() + "/nothing-here",
		"no inventory at all":                 "http://127.0.0.1:1",
		"a password in the URL":               "http://inv:hunter2@127.0.0.1:1",
	} {
		_, err := reconcile.ReconcileStock(s.ctx, reconcile.StockParams{Orders: s.lapse, Ledger: reconcile.NewHTTPLedger(url, nil)})
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	// A suspect whose reservation the inventory does not know is judged
	// on no rows, not an error.
	rep := s.reconcile(reconcile.StockParams{})
	if got := foundStock(rep); !slices.Equal(got, []string{"done_but_not_applied o-1", "never_released o-1"}) {
		t.Errorf("found %v", got)
	}
	if _, err := reconcile.ReconcileStock(s.ctx, reconcile.StockParams{Orders: s.lapse}); err == nil {
		t.Error("no Ledger: no error")
	}
}

// A reservation confirmed at the inventory by someone else after lapse took
// it: lapse's confirm is answered ALREADY_DONE and the order is PAID, the
// counts agree — only the task ids tell.
func TestStockReconcileFindsAConfirmAppliedElsewhere(t *testing.T) {
	t.Parallel()
	s := newShop(t, inventorytest.SQLite(t))
	s.healthy(6)
	s.order("taken", "rsv-taken")
	s.send(inventory.Command{TaskID: "someone-else", Action: inventory.Confirm, ReservationID: "rsv-taken"})
	s.pay("taken")
	s.dispatch()
	o, err := s.lapse.GetOrder(s.ctx, "taken")
	if err != nil || len(o.Tasks) != 1 || o.Tasks[0].Status != order.TaskDone || o.Tasks[0].Result != string(inventory.AlreadyDone) {
		t.Fatalf("taken: %+v, %v; want its confirm DONE, ALREADY_DONE", o.Tasks, err)
	}
	rep := s.reconcile(reconcile.StockParams{LedgerPageSize: 5})
	if got := foundStock(rep); !slices.Equal(got, []string{"applied_elsewhere taken"}) {
		t.Fatalf("found %v, want applied_elsewhere taken", got)
	}
	if m := rep.Mismatches[0]; !strings.Contains(m.Detail, "someone-else") || !strings.Contains(m.Detail, o.Tasks[0].ID) || rep.Rechecked != 1 {
		t.Errorf("the mismatch %+v (rechecked %d): want the detail to name both tasks, one order rechecked", m, rep.Rechecked)
	}
}

// With CheckItems, every order's items are compared with what the
// inventory holds under its reservation.
func TestStockReconcileCheckItemsFindsItemsThatDiffer(t *testing.T) {
	t.Parallel()
	s := newShop(t, inventorytest.SQLite(t))
	s.healthy(6)
	// The caller reserved two units for an order of one; and an order on
	// a reservation the inventory never saw.
	s.send(inventory.Command{TaskID: "reserve-more", Action: inventory.Reserve, ReservationID: "rsv-more", OrderID: "more",
		Items: []inventory.Item{{SKU: "sku", Qty: 2}}})
	for id, rsv := range map[string]string{"more": "rsv-more", "ghost": "rsv-ghost"} {
		if _, err := s.lapse.CreateOrder(s.ctx, store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}},
			AmountCents: 1000, Currency: "EUR", Timeout: time.Hour, ReservationID: rsv}); err != nil {
			t.Fatal(err)
		}
	}
	if rep := s.reconcile(reconcile.StockParams{}); !rep.OK() || rep.ItemsChecked != 0 {
		t.Fatalf("without CheckItems: %+v, want OK, no items read", rep)
	}
	rep := s.reconcile(reconcile.StockParams{CheckItems: true, Concurrency: 3})
	if got := foundStock(rep); !slices.Equal(got, []string{"items_differ ghost", "items_differ more"}) {
		t.Fatalf("found %v", got)
	}
	if rep.ItemsChecked != 8 || rep.MismatchedOrders != 2 {
		t.Errorf("%d reservations checked, %d orders mismatched; want 8, 2", rep.ItemsChecked, rep.MismatchedOrders)
	}
	for _, m := range rep.Mismatches {
		if m.OrderID == "more" && !strings.Contains(m.Detail, `"sku": order 1, reservation 2`) {
			t.Errorf("more's detail does not name the difference: %s", m.Detail)
		}
	}
	var b bytes.Buffer
	if err := reconcile.WriteStockTable(&b, rep); err != nil || !strings.Contains(b.String(), "items of 8 reservations compared") {
		t.Errorf("the table: %v\n%s", err, b.String())
	}
}
