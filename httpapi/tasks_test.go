package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/order"
)

// ---------------------------------------------------------------------------
// Remote stock over HTTP: reservation_id on create, the order's tasks,
// GET /v1/tasks and POST /v1/tasks/retry, against the reference inventory.
// ---------------------------------------------------------------------------

type tasksPage struct {
	Tasks     []order.StockTask `json:"tasks"`
	NextAfter string            `json:"next_after"`
}

func (e *env) listTasks(t *testing.T, query string) tasksPage {
	t.Helper()
	r := e.do(t, "GET", "/v1/tasks"+query, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/tasks%s: %d %s", query, r.Status, r.Body)
	}
	var p tasksPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRemoteStockOverHTTP(t *testing.T) {
	st := inventorytest.SQLite(t)
	ctx := context.Background()
	if _, err := st.SetAvailable(ctx, "tee", 100); err != nil {
		t.Fatal(err)
	}
	inv := reference.NewServer(st, reference.Config{Logger: discard})
	if err := inv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Stop() })
	client := inventory.NewHTTPClient(inv.URL(), inventory.WithTimeout(2*time.Second))
	e := newEnv(t, envConfig{Inventory: client})
	reserve := func(id string) {
		t.Helper()
		a, err := client.Send(ctx, inventory.Command{TaskID: "caller-" + id, Action: inventory.Reserve, ReservationID: id, Items: []inventory.Item{{SKU: "tee", Qty: 1}}})
		if err != nil || !a.Done() {
			t.Fatalf("reserve %s at the inventory: %+v, %v", id, a, err)
		}
	}

	wantError(t, e.do(t, "POST", "/v1/orders", createReq{ID: "h0", Items: []item{{"tee", 1}}, AmountCents: 100}), http.StatusBadRequest, "reservation_required")
	wantError(t, e.do(t, "POST", "/v1/orders", `{"items":[{"sku":"tee","qty":1}],"amount_cents":1,"reservation_id":""}`), http.StatusBadRequest, "invalid_field")
	wantError(t, e.do(t, "PUT", "/v1/skus/tee", map[string]int64{"available": 3}), http.StatusConflict, "stock_remote")
	wantError(t, e.do(t, "GET", "/v1/skus/tee", nil), http.StatusConflict, "stock_remote")
	for _, id := range []string{"h1", "h2", "h3"} {
		reserve("res-" + id)
		if o := e.create(t, createReq{ID: id, Items: []item{{"tee", 1}}, AmountCents: 100, ReservationID: "res-" + id}); o.ReservationID != "res-"+id {
			t.Fatalf("created %+v, want reservation res-%s", o, id)
		}
	}
	wantError(t, e.do(t, "POST", "/v1/orders", createReq{ID: "h4", Items: []item{{"tee", 1}}, AmountCents: 100, ReservationID: "res-h1"}), http.StatusConflict, "reservation_used")

	// The inventory rejects everything for a while: the cancels' releases die.
	inv.Applier().SetFaults(reference.Faults{Reject: true})
	for _, id := range []string{"h1", "h2"} {
		if r := e.do(t, "POST", "/v1/orders/"+id+"/cancel", nil); r.Status != http.StatusOK {
			t.Fatalf("cancel %s: %d %s", id, r.Status, r.Body)
		}
	}
	eventually(t, "both releases DEAD", func() bool { return len(e.listTasks(t, "?dead=true").Tasks) == 2 })
	o := e.get(t, "h1")
	if len(o.Tasks) != 1 || o.Tasks[0].Action != order.TaskRelease || o.Tasks[0].Status != order.TaskDead || o.Tasks[0].Result != "REJECTED" {
		t.Fatalf("h1's tasks %+v: want its release DEAD, REJECTED", o.Tasks)
	}
	if p := e.listTasks(t, "?limit=1"); len(p.Tasks) != 1 || p.NextAfter == "" {
		t.Fatalf("page of 1: %+v, want one task and a next_after", p)
	} else if rest := e.listTasks(t, "?limit=1&after="+p.NextAfter); len(rest.Tasks) != 1 || rest.Tasks[0].ID == p.Tasks[0].ID || rest.NextAfter != "" {
		t.Fatalf("second page: %+v", rest)
	}
	if p := e.listTasks(t, "?order_id=h3"); len(p.Tasks) != 0 {
		t.Fatalf("tasks of h3 (open): %+v, want none", p.Tasks)
	}

	for _, bad := range []struct{ body, code string }{
		{`{}`, "invalid_field"}, {`{"dead":false}`, "invalid_field"}, {`{"ids":["a"],"dead":true}`, "invalid_field"}, {`{"ids":[""]}`, "invalid_field"},
	} {
		wantError(t, e.do(t, "POST", "/v1/tasks/retry", bad.body), http.StatusBadRequest, bad.code)
	}
	wantError(t, e.do(t, "GET", "/v1/tasks?dead=maybe", nil), http.StatusBadRequest, "invalid_field")
	wantError(t, e.do(t, "GET", "/v1/tasks?limit=0", nil), http.StatusBadRequest, "invalid_field")

	inv.Applier().SetFaults(reference.Faults{})
	r := e.do(t, "POST", "/v1/tasks/retry", map[string]any{"ids": []string{o.Tasks[0].ID}})
	if r.Status != http.StatusOK || string(r.Body) != `{"retried":1}`+"\n" && string(r.Body) != `{"retried":1}` {
		t.Fatalf("retry by id: %d %s", r.Status, r.Body)
	}
	r = e.do(t, "POST", "/v1/tasks/retry", map[string]bool{"dead": true})
	if r.Status != http.StatusOK {
		t.Fatalf("retry every dead: %d %s", r.Status, r.Body)
	}
	eventually(t, "every task DONE", func() bool { return len(e.listTasks(t, "").Tasks) == 0 })
	for _, id := range []string{"res-h1", "res-h2"} {
		res, err := st.Reservation(ctx, id)
		if err != nil || res.Status != "RELEASED" {
			t.Fatalf("reservation %s at the inventory: %+v, %v; want RELEASED", id, res, err)
		}
	}
}

// eventually polls cond until it holds or 20 s pass.
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

// A caller's reservation is read at the inventory first: other items, or
// stock no longer held there, are 409 with a stable code and nothing is
// written; an inventory that does not answer leaves the reservation taken
// as sent (the create does not depend on its reads).
func TestRemoteStockReservationCheckedOverHTTP(t *testing.T) {
	st := inventorytest.SQLite(t)
	ctx := context.Background()
	if _, err := st.SetAvailable(ctx, "tee", 100); err != nil {
		t.Fatal(err)
	}
	inv := reference.NewServer(st, reference.Config{Logger: discard})
	if err := inv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Stop() })
	client := inventory.NewHTTPClient(inv.URL(), inventory.WithTimeout(2*time.Second))
	e := newEnv(t, envConfig{Inventory: client})
	send := func(c inventory.Command) {
		t.Helper()
		if a, err := client.Send(ctx, c); err != nil || a.Result != inventory.Success {
			t.Fatalf("%s %s at the inventory: %+v, %v", c.Action, c.ReservationID, a, err)
		}
	}
	send(inventory.Command{TaskID: "caller-1", Action: inventory.Reserve, ReservationID: "res-1", Items: []inventory.Item{{SKU: "tee", Qty: 1}}})
	send(inventory.Command{TaskID: "caller-2", Action: inventory.Reserve, ReservationID: "res-2", Items: []inventory.Item{{SKU: "tee", Qty: 2}}})
	send(inventory.Command{TaskID: "elsewhere-2", Action: inventory.Confirm, ReservationID: "res-2"})

	r := e.do(t, "POST", "/v1/orders", createReq{ID: "x1", Items: []item{{"tee", 2}}, AmountCents: 100, ReservationID: "res-1"})
	wantError(t, r, http.StatusConflict, "reservation_mismatch")
	if !strings.Contains(string(r.Body), `\"tee\": order 2, reservation 1`) {
		t.Errorf("the message does not name what differs: %s", r.Body)
	}
	wantError(t, e.do(t, "POST", "/v1/orders", createReq{ID: "x2", Items: []item{{"tee", 2}}, AmountCents: 100, ReservationID: "res-2"}), http.StatusConflict, "reservation_not_held")
	for _, id := range []string{"x1", "x2"} {
		wantError(t, e.do(t, "GET", "/v1/orders/"+id, nil), http.StatusNotFound, "order_not_found")
	}
	if p := e.do(t, "GET", "/v1/orders", nil); !strings.Contains(string(p.Body), `"orders":[]`) {
		t.Errorf("orders after the refused creates: %s", p.Body)
	}
	inv.Stop()
	if r := e.do(t, "POST", "/v1/orders", createReq{ID: "x3", Items: []item{{"tee", 1}}, AmountCents: 100, ReservationID: "res-1"}); r.Status != http.StatusCreated {
		t.Errorf("create with the inventory gone: %d %s, want 201 (taken as sent)", r.Status, r.Body)
	}
}
