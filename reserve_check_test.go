package lapse_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
)

// callerReserves reserves items under id at the inventory, as a caller does
// before it creates the order, for order orderID ("" for none).
func callerReserves(t *testing.T, c inventory.Client, id, orderID string, items ...inventory.Item) {
	t.Helper()
	a, err := c.Send(context.Background(), inventory.Command{TaskID: "caller-" + id, Action: inventory.Reserve, ReservationID: id, OrderID: orderID, Items: items})
	if err != nil || a.Result != inventory.Success {
		t.Fatalf("the caller's reserve of %s: %+v, %v", id, a, err)
	}
}

// wantNoOrder fails unless order id does not exist.
func wantNoOrder(t *testing.T, svc *lapse.Service, id string) {
	t.Helper()
	if o, err := svc.Get(context.Background(), id); !errors.Is(err, lapse.ErrNotFound) {
		t.Fatalf("order %s after a refused create: %+v, %v; want none", id, o, err)
	}
}

// A caller's reservation is read at the inventory before the order takes
// it: other items, another order, or stock no longer held there are
// refused, and nothing is written.
func TestRemoteStockRefusesAReservationOfOtherItemsOrOrder(t *testing.T) {
	_, c := remoteInventory(t, 20)
	svc, _ := newRemoteService(t, c, false)
	ctx := context.Background()
	callerReserves(t, c, "r-less", "", inventory.Item{SKU: "tee", Qty: 1})
	callerReserves(t, c, "r-other", "o-someone-else", inventory.Item{SKU: "tee", Qty: 2})
	for _, tc := range []struct{ id, reservation string }{{"o-less", "r-less"}, {"o-mine", "r-other"}} {
		_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: tc.id, Items: tee, AmountCents: 100, ReservationID: tc.reservation, IdempotencyKey: "k-" + tc.id})
		var re *lapse.ReservationError
		if !errors.Is(err, lapse.ErrReservationMismatch) || !errors.As(err, &re) || re.ReservationID != tc.reservation {
			t.Fatalf("%s on %s: %v, want ErrReservationMismatch", tc.id, tc.reservation, err)
		}
		t.Logf("%s: %v", tc.id, err)
		wantNoOrder(t, svc, tc.id)
	}
	// Without an id of its own the order cannot be another's: r-other's
	// items are the order's, so it is taken.
	res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{Items: tee, AmountCents: 100, ReservationID: "r-other"})
	if err != nil || res.Order.ReservationID != "r-other" {
		t.Fatalf("a create without an id on r-other: %+v, %v", res, err)
	}
	// The key of the refused create was not taken: with a reservation that
	// fits, the same key makes the order.
	callerReserves(t, c, "r-fits", "o-less", inventory.Item{SKU: "tee", Qty: 2})
	if res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-less", Items: tee, AmountCents: 100, ReservationID: "r-fits", IdempotencyKey: "k-o-less-2"}); err != nil || res.Replayed {
		t.Fatalf("o-less on a reservation that fits: %+v, %v", res, err)
	}
}

func TestRemoteStockRefusesAReservationConfirmedOrReleasedElsewhere(t *testing.T) {
	_, c := remoteInventory(t, 20)
	svc, _ := newRemoteService(t, c, false)
	ctx := context.Background()
	two := inventory.Item{SKU: "tee", Qty: 2}
	callerReserves(t, c, "r-sold", "", two)
	callerReserves(t, c, "r-back", "", two)
	for id, action := range map[string]inventory.Action{"r-sold": inventory.Confirm, "r-back": inventory.Release} {
		if a, err := c.Send(ctx, inventory.Command{TaskID: "elsewhere-" + id, Action: action, ReservationID: id}); err != nil || a.Result != inventory.Success {
			t.Fatalf("%s %s at the inventory: %+v, %v", action, id, a, err)
		}
	}
	for _, id := range []string{"r-sold", "r-back", "r-never-made"} {
		_, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-" + id, Items: tee, AmountCents: 100, ReservationID: id, IdempotencyKey: "k-" + id})
		if !errors.Is(err, lapse.ErrReservationNotHeld) {
			t.Fatalf("an order on %s: %v, want ErrReservationNotHeld", id, err)
		}
		wantNoOrder(t, svc, "o-"+id)
	}
}

// A retry of a create that succeeded is answered with its order, though
// the reservation has been confirmed since (the order was paid).
func TestRemoteStockReplaysACreateWhoseReservationWasConfirmedSince(t *testing.T) {
	srv, c := remoteInventory(t, 20)
	svc, _ := newRemoteService(t, c, false)
	start(t, svc)
	ctx := context.Background()
	callerReserves(t, c, "r-p", "o-p", inventory.Item{SKU: "tee", Qty: 2})
	req := lapse.CreateOrderRequest{ID: "o-p", Items: tee, AmountCents: 100, ReservationID: "r-p", IdempotencyKey: "k-o-p"}
	if _, err := svc.CreateOrder(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "o-p", PaymentID: "pay-o-p", Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "r-p confirmed", func() bool { return reservationStatus(t, srv, "r-p") == "CONFIRMED" })
	res, err := svc.CreateOrder(ctx, req)
	if err != nil || !res.Replayed || res.Order.Status != order.Paid {
		t.Fatalf("the retried create: %+v, %v; want o-p replayed, PAID", res, err)
	}
}

// An inventory that does not answer the read: 503 reservation_unknown,
// nothing written.
func TestRemoteStockReservationUnreadableIsUnknown(t *testing.T) {
	srv, c := remoteInventory(t, 20)
	svc, _ := newRemoteService(t, c, false)
	callerReserves(t, c, "r-u", "", inventory.Item{SKU: "tee", Qty: 2})
	srv.Stop()
	// No answer is not a refusal: the create does not depend on the
	// inventory answering reads, and the reservation is taken as sent.
	if _, err := svc.CreateOrder(context.Background(), lapse.CreateOrderRequest{ID: "o-u", Items: tee, AmountCents: 100, ReservationID: "r-u"}); err != nil {
		t.Fatalf("create with the inventory gone: %v, want the reservation taken as sent", err)
	}
	// A route the server does not have is not a reservation never made.
	nf := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(nf.Close)
	c2 := inventory.NewHTTPClient(nf.URL)
	svc2, _ := newRemoteService(t, c2, false)
	if _, err := svc2.CreateOrder(context.Background(), lapse.CreateOrderRequest{ID: "o-u2", Items: tee, AmountCents: 100, ReservationID: "r-u2"}); err != nil {
		t.Fatalf("create at an inventory without the route: %v, want the reservation taken as sent", err)
	}
	if got := metric(t, svc, "lapse_reservation_checks_total"); got != 1 {
		t.Fatalf("lapse_reservation_checks_total = %v, want 1", got)
	}
}
