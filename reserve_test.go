package lapse_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// remoteInventory is the reference inventory over HTTP on loopback, with
// n units of sku "tee".
func remoteInventory(t *testing.T, n int64) (*reference.Server, inventory.Client) {
	t.Helper()
	st := inventorytest.SQLite(t)
	if _, err := st.SetAvailable(context.Background(), "tee", n); err != nil {
		t.Fatal(err)
	}
	srv := reference.NewServer(st, reference.Config{Logger: quiet})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	c := inventory.NewHTTPClient(srv.URL(), inventory.WithTimeout(2*time.Second))
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func reservationStatus(t *testing.T, srv *reference.Server, id string) string {
	t.Helper()
	r, err := srv.Store().Reservation(context.Background(), id)
	if errors.Is(err, reference.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func newRemoteService(t *testing.T, c inventory.Client, reserve bool) (*lapse.Service, store.Store) {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	t.Cleanup(func() { st.Close() })
	svc, err := lapse.New(lapse.Config{Store: st, Inventory: c, InventoryReserve: reserve, Logger: quiet,
		Tasks: inventory.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var tee = []order.Item{{SKU: "tee", Qty: 2}}

func TestRemoteStockTakesTheCallersReservationAndReleasesItOnCancel(t *testing.T) {
	srv, c := remoteInventory(t, 10)
	svc, _ := newRemoteService(t, c, false)
	ctx := context.Background()
	start(t, svc)
	if a, err := c.Send(ctx, inventory.Command{TaskID: "caller-1", Action: inventory.Reserve, ReservationID: "r-1", OrderID: "o-1",
		Items: []inventory.Item{{SKU: "tee", Qty: 2}}}); err != nil || a.Result != inventory.Success {
		t.Fatalf("caller's reserve: %+v, %v", a, err)
	}
	var inv *lapse.InvalidError
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-0", Items: tee, AmountCents: 100}); !errors.As(err, &inv) || inv.Code != "reservation_required" {
		t.Fatalf("a create without reservation_id: %v, want reservation_required", err)
	}
	res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-1", Items: tee, AmountCents: 100, ReservationID: "r-1"})
	if err != nil || res.Order.ReservationID != "r-1" {
		t.Fatalf("create: %+v, %v", res, err)
	}
	// r-1 was reserved for o-1: the inventory says so to o-2; to an order
	// without an id, the store's one order per reservation does.
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-2", Items: tee, AmountCents: 100, ReservationID: "r-1"}); !errors.Is(err, lapse.ErrReservationMismatch) {
		t.Fatalf("a second order on r-1: %v, want ErrReservationMismatch", err)
	}
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{Items: tee, AmountCents: 100, ReservationID: "r-1"}); !errors.Is(err, lapse.ErrReservationUsed) {
		t.Fatalf("a second order on r-1 without an id: %v, want ErrReservationUsed", err)
	}
	if _, err := svc.SetStock(ctx, "tee", 5); !errors.Is(err, lapse.ErrRemoteStock) {
		t.Fatalf("set stock in remote mode: %v, want ErrRemoteStock", err)
	}
	if _, err := svc.Cancel(ctx, "o-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reservation released at the inventory", func() bool { return reservationStatus(t, srv, "r-1") == "RELEASED" })
	o, err := svc.Get(ctx, "o-1")
	if err != nil || len(o.Tasks) != 1 || o.Tasks[0].Action != order.TaskRelease {
		t.Fatalf("order %+v, %v: want its release task", o.Tasks, err)
	}
	eventually(t, "the release task DONE", func() bool {
		o, err := svc.Get(ctx, "o-1")
		return err == nil && o.Tasks[0].Status == order.TaskDone
	})
}

func TestInventoryReserveCreatesReservesAndRefuses(t *testing.T) {
	srv, c := remoteInventory(t, 3)
	svc, st := newRemoteService(t, c, true)
	ctx := context.Background()
	start(t, svc)
	var inv *lapse.InvalidError
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "x", Items: tee, AmountCents: 1, ReservationID: "mine"}); !errors.As(err, &inv) {
		t.Fatalf("a caller's reservation_id with --inventory-reserve: %v, want invalid", err)
	}
	res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "a1", Items: tee, AmountCents: 100, IdempotencyKey: "k-a1"})
	if err != nil || res.Order.ReservationID != "a1" || reservationStatus(t, srv, "a1") != "RESERVED" {
		t.Fatalf("create: %+v, %v; inventory %q", res, err, reservationStatus(t, srv, "a1"))
	}
	if again, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "a1", Items: tee, AmountCents: 100, IdempotencyKey: "k-a1"}); err != nil || !again.Replayed {
		t.Fatalf("the same create again: %+v, %v; want a replay", again, err)
	}
	// 1 unit left: a second order of 2 is refused, and nothing is left of it.
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "a2", Items: tee, AmountCents: 100}); !errors.Is(err, lapse.ErrInsufficientStock) {
		t.Fatalf("create beyond the stock: %v, want ErrInsufficientStock", err)
	}
	if _, err := svc.Get(ctx, "a2"); !errors.Is(err, lapse.ErrNotFound) {
		t.Fatalf("a refused order exists: %v", err)
	}
	if _, err := svc.Cancel(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a1 released", func() bool { return reservationStatus(t, srv, "a1") == "RELEASED" })
	eventually(t, "no task left", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 && s.Dead == 0 })
	rep, err := svc.Audit(ctx, store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("audit %+v, %v", rep, err)
	}
}

func TestInventoryReserveUnansweredIsGivenBackUnlessTheCreateIsRetried(t *testing.T) {
	srv, c := remoteInventory(t, 10)
	ctx := context.Background()

	// Without a dispatcher running, a retried create takes the reserve over.
	svc, _ := newRemoteService(t, c, true)
	srv.Stop()
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "b1", Items: tee, AmountCents: 100, IdempotencyKey: "k-b1"}); !errors.Is(err, lapse.ErrReservationUnknown) {
		t.Fatalf("create while the inventory is down: %v, want ErrReservationUnknown", err)
	}
	if _, err := svc.Get(ctx, "b1"); !errors.Is(err, lapse.ErrNotFound) {
		t.Fatalf("an unanswered create left an order: %v", err)
	}
	if err := srv.Start(""); err != nil {
		t.Fatal(err)
	}
	res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "b1", Items: tee, AmountCents: 100, IdempotencyKey: "k-b1"})
	if err != nil || res.Order.ReservationID != "b1" || reservationStatus(t, srv, "b1") != "RESERVED" {
		t.Fatalf("the retried create: %+v, %v", res, err)
	}

	// With one, a reserve nobody comes back for is given back.
	svc2, st2 := newRemoteService(t, c, true)
	srv.Applier().SetFaults(reference.Faults{DropAnswers: true})
	if _, err := svc2.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "b2", Items: tee, AmountCents: 100}); !errors.Is(err, lapse.ErrReservationUnknown) {
		t.Fatalf("create with the answer dropped: %v, want ErrReservationUnknown", err)
	}
	if reservationStatus(t, srv, "b2") != "RESERVED" {
		t.Fatal("the dropped answer's reserve was not applied: the test proves nothing")
	}
	srv.Applier().SetFaults(reference.Faults{})
	start(t, svc2)
	eventually(t, "b2's reservation given back", func() bool { return reservationStatus(t, srv, "b2") == "RELEASED" })
	eventually(t, "no task left", func() bool { s, err := st2.TaskStats(ctx); return err == nil && s.Pending == 0 })
	if _, err := svc2.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "b2", Items: tee, AmountCents: 100}); !errors.Is(err, lapse.ErrReservationReleased) {
		t.Fatalf("a create of b2 after its reserve was given back: %v, want ErrReservationReleased", err)
	}
	rep, err := svc2.Audit(ctx, store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("audit %+v, %v", rep, err)
	}
}
