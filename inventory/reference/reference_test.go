package reference_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
)

// api is a running reference server and a way to call it.
type api struct {
	t   *testing.T
	srv *reference.Server
}

func start(t *testing.T, st *reference.Store) *api {
	t.Helper()
	srv := reference.NewServer(st, reference.Config{})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return &api{t: t, srv: srv}
}

// call sends a request and returns the status and decoded JSON body.
func (a *api) call(method, path, key, body string) (int, map[string]any) {
	a.t.Helper()
	status, raw, err := a.try(method, path, key, body)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	var m map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			a.t.Fatalf("%s %s: %d %s: %v", method, path, status, raw, err)
		}
	}
	return status, m
}

func (a *api) try(method, path, key, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, a.srv.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// want calls and fails the test unless the status is status and, when code
// is set, the error code is code.
func (a *api) want(method, path, key, body string, status int, code string) map[string]any {
	a.t.Helper()
	got, m := a.call(method, path, key, body)
	var gotCode string
	if e, ok := m["error"].(map[string]any); ok {
		gotCode, _ = e["code"].(string)
	}
	if got != status || gotCode != code {
		a.t.Fatalf("%s %s %s: %d %v, want %d %q", method, path, body, got, m, status, code)
	}
	return m
}

func TestInventoryReferenceAPI(t *testing.T) {
	a := start(t, inventorytest.SQLite(t))

	// SKUs, and what is refused about them.
	sku := a.want("PUT", "/skus/tee", "", `{"available": 5}`, 200, "")
	if fmt.Sprint(sku) != "map[available:5 reserved:0 sku:tee sold:0]" {
		t.Errorf("PUT /skus/tee: %v", sku)
	}
	a.want("PUT", "/skus/mug", "", `{"available": 1}`, 200, "")
	a.want("PUT", "/skus/tee", "", `{"available": -1}`, 400, reference.CodeInvalidAvailable)
	a.want("PUT", "/skus/tee", "", `{}`, 400, reference.CodeInvalidAvailable)
	a.want("PUT", "/skus/tee", "", `{"available": "5"}`, 400, reference.CodeInvalidJSON)
	a.want("PUT", "/skus/"+strings.Repeat("x", 201), "", `{"available": 1}`, 400, reference.CodeInvalidSKU)
	a.want("GET", "/skus/nope", "", "", 404, reference.CodeUnknownSKU)

	// Reserve: a generated id, derived from the key so a retry finds it.
	first := a.want("POST", "/reservations", "task-1", `{"items": [{"sku": "tee", "qty": 2}]}`, 201, "")
	again := a.want("POST", "/reservations", "task-1", `{"items": [{"sku": "tee", "qty": 2}]}`, 200, "")
	id, _ := first["reservation_id"].(string)
	if id == "" || again["reservation_id"] != id || first["status"] != "RESERVED" {
		t.Fatalf("reserve %v, then %v", first, again)
	}
	other := a.want("POST", "/reservations", "", `{"order_id": "o-9", "items": [{"sku": "mug", "qty": 1}]}`, 201, "")
	if other["reservation_id"] == id {
		t.Fatalf("two reservations without a key share id %v", id)
	}
	a.want("POST", "/reservations", "", `{"reservation_id": "short", "items": [{"sku": "tee", "qty": 1}, {"sku": "mug", "qty": 1}]}`, 409, inventory.ReasonInsufficientStock)

	// Bad input: 400, nothing written.
	for _, body := range []string{
		`{"reservation_id": "bad", "items": []}`,
		`{"reservation_id": "bad", "items": [{"sku": "tee", "qty": 0}]}`,
		`{"reservation_id": "bad", "items": [{"sku": "", "qty": 1}]}`,
		`{"reservation_id": "bad\u0000", "items": [{"sku": "tee", "qty": 1}]}`,
		`{"reservation_id": "bad", "items": [{"sku": "tee", "qty": 1}, {"sku": "mug", "qty": -1}]}`,
	} {
		a.want("POST", "/reservations", "", body, 400, reference.CodeInvalidCommand)
	}
	a.want("POST", "/reservations", "", `{"items": [`, 400, reference.CodeInvalidJSON)
	a.want("POST", "/reservations", strings.Repeat("k", 201), `{"items": [{"sku": "tee", "qty": 1}]}`, 400, reference.CodeInvalidCommand)
	a.want("GET", "/reservations/bad", "", "", 404, reference.ReasonUnknownReservation)
	a.want("GET", "/reservations/short", "", "", 404, reference.ReasonUnknownReservation)
	if k := a.want("GET", "/skus/tee", "", "", 200, ""); k["available"] != 3.0 || k["reserved"] != 2.0 {
		t.Fatalf("tee after the refusals: %v", k)
	}

	// Release, confirm and their refusals.
	a.want("POST", "/reservations/"+id+"/release", "task-2", "", 200, "")
	a.want("POST", "/reservations/"+id+"/release", "task-2", `{"order_id": "o-1"}`, 409, reference.CodeAlreadyDone)
	a.want("POST", "/reservations/"+id+"/confirm", "task-3", "", 422, reference.ReasonReleased)
	a.want("POST", "/reservations", "task-1", `{"items": [{"sku": "tee", "qty": 2}]}`, 409, reference.ReasonReleased)
	a.want("POST", "/reservations/never/confirm", "task-4", "", 422, reference.ReasonUnknownReservation)
	oid := other["reservation_id"].(string)
	a.want("POST", "/reservations/"+oid+"/confirm", "task-5", "", 200, "")
	a.want("POST", "/reservations/"+oid+"/release", "task-6", "", 422, reference.ReasonConfirmed)
	a.want("POST", "/reservations/"+oid+"/release", "task-6", `{"items": [{"sku": "mug", "qty": 0}]}`, 400, reference.CodeInvalidCommand)

	r := a.want("GET", "/reservations/"+id, "", "", 200, "")
	ledger, _ := r["ledger"].([]any)
	if r["status"] != "RELEASED" || len(ledger) != 2 || fmt.Sprint(r["items"]) != "[map[qty:2 sku:tee]]" {
		t.Fatalf("GET /reservations/%s: %v", id, r)
	}
	if l := ledger[1].(map[string]any); l["action"] != "release" || l["task_id"] != "task-2" || l["at"] == "" {
		t.Errorf("ledger row %v", l)
	}
	if k := a.want("GET", "/skus/mug", "", "", 200, ""); k["available"] != 0.0 || k["sold"] != 1.0 {
		t.Errorf("mug: %v", k)
	}

	// The ledger, page by page: reserve, reserve, release, confirm.
	var actions []string
	after := "0"
	for pages := 0; ; pages++ {
		p := a.want("GET", "/ledger?limit=3&after="+after, "", "", 200, "")
		for _, row := range p["rows"].([]any) {
			actions = append(actions, row.(map[string]any)["action"].(string))
		}
		if p["next"] == nil {
			break
		}
		after = fmt.Sprint(int64(p["next"].(float64)))
		if pages > 3 {
			t.Fatal("the ledger does not end")
		}
	}
	if strings.Join(actions, " ") != "reserve reserve release confirm" {
		t.Errorf("ledger actions %v", actions)
	}
	a.want("GET", "/ledger?limit=0", "", "", 400, reference.CodeInvalidParameter)
	a.want("GET", "/ledger?after=x", "", "", 400, reference.CodeInvalidParameter)
}

// The switches, set at runtime, act on the command routes only.
func TestInventoryReferenceFaults(t *testing.T) {
	a := start(t, inventorytest.SQLite(t))
	a.want("PUT", "/skus/tee", "", `{"available": 5}`, 200, "")

	f := a.want("POST", "/faults", "", `{"drop_answers": true, "delay_ms": 1}`, 200, "")
	if f["drop_answers"] != true || f["delay_ms"] != 1.0 || f["fail"] != false {
		t.Fatalf("POST /faults: %v", f)
	}
	if status, raw, err := a.try("POST", "/reservations", "k1", `{"reservation_id": "d1", "items": [{"sku": "tee", "qty": 1}]}`); err == nil {
		t.Fatalf("answer withheld: got %d %s, want the connection closed", status, raw)
	}
	a.want("GET", "/reservations/d1", "", "", 200, "") // applied all the same

	a.want("POST", "/faults", "", `{"drop_answers": false, "fail": true}`, 200, "")
	if f := a.want("GET", "/faults", "", "", 200, ""); f["fail"] != true || f["delay_ms"] != 1.0 {
		t.Fatalf("GET /faults: %v, want the delay kept", f)
	}
	a.want("POST", "/reservations", "k2", `{"reservation_id": "d2", "items": [{"sku": "tee", "qty": 1}]}`, 503, reference.CodeUnavailable)
	a.want("GET", "/reservations/d2", "", "", 404, reference.ReasonUnknownReservation)
	a.want("GET", "/skus/tee", "", "", 200, "") // other routes unaffected

	a.want("POST", "/faults", "", `{"fail": false, "reject": true}`, 200, "")
	a.want("POST", "/reservations/d1/release", "k3", "", 422, reference.ReasonFault)
	a.want("POST", "/faults", "", `{"delay_ms": -1}`, 400, reference.CodeInvalidParameter)
	a.want("POST", "/faults", "", `{"reject": false, "delay_ms": 0}`, 200, "")
	a.want("POST", "/reservations/d1/release", "k3", "", 200, "")
}

// Stop is the inventory going away; Start("") brings it back on the same
// address and store.
func TestInventoryReferenceRestart(t *testing.T) {
	a := start(t, inventorytest.SQLite(t))
	a.want("PUT", "/skus/tee", "", `{"available": 5}`, 200, "")
	a.want("POST", "/reservations", "k", `{"reservation_id": "r", "items": [{"sku": "tee", "qty": 1}]}`, 201, "")
	addr := a.srv.Addr()
	if err := a.srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.try("GET", "/skus/tee", "", ""); err == nil {
		t.Fatal("stopped, the server still answers")
	}
	if err := a.srv.Start(""); err != nil {
		t.Fatal(err)
	}
	if a.srv.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", a.srv.Addr(), addr)
	}
	a.want("POST", "/reservations", "k", `{"reservation_id": "r", "items": [{"sku": "tee", "qty": 1}]}`, 200, "")
	a.want("GET", "/healthz", "", "", 200, "")
}

// Reserves racing for the last units never sell more than there is, on
// either store; duplicates of each are applied once.
func TestInventoryReferenceNoOversell(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *reference.Store{
		"sqlite": inventorytest.SQLite, "postgres": inventorytest.Postgres,
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			ctx := context.Background()
			if _, err := st.SetAvailable(ctx, "a", 7); err != nil {
				t.Fatal(err)
			}
			if _, err := st.SetAvailable(ctx, "b", 100); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			count := map[inventory.Result]int{}
			var wg sync.WaitGroup
			for i := range 12 {
				for range 2 { // each command twice at once
					wg.Go(func() {
						// Items in both orders, so that a lock order
						// other than the SKUs' would deadlock.
						items := []inventory.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}
						if i%2 == 1 {
							items[0], items[1] = items[1], items[0]
						}
						ans, err := st.Apply(ctx, inventory.Command{TaskID: fmt.Sprint("t", i), Action: inventory.Reserve, ReservationID: fmt.Sprint("r", i), Items: items})
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							t.Error(err)
							return
						}
						count[ans.Result]++
					})
				}
			}
			wg.Wait()
			k, err := st.SKU(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if k.Available != 0 || k.Reserved != 7 || count[inventory.Success] != 7 {
				t.Fatalf("a: %+v; answers %v", k, count)
			}
			rows, err := st.Ledger(ctx, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 7 {
				t.Fatalf("%d ledger rows, want 7", len(rows))
			}
		})
	}
}

// sqlite://:memory: is a store for a quick try.
func TestInventoryReferenceMemoryStore(t *testing.T) {
	ctx := context.Background()
	st, err := reference.Open(ctx, "sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SetAvailable(ctx, "tee", 1); err != nil {
		t.Fatal(err)
	}
	ans, err := st.Apply(ctx, inventory.Command{TaskID: "t", Action: inventory.Reserve, ReservationID: "r", Items: []inventory.Item{{SKU: "tee", Qty: 1}}})
	if err != nil || ans.Result != inventory.Success {
		t.Fatalf("%+v %v", ans, err)
	}
	for _, bad := range []string{"sqlite://", "mysql://x", "postgres://%zz"} {
		if _, err := reference.Open(ctx, bad); err == nil {
			t.Errorf("Open(%q): want an error", bad)
		}
	}
	// A password in the URL never shows in the error.
	_, err = reference.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1")
	if err == nil || bytes.Contains([]byte(err.Error()), []byte("hunter2")) {
		t.Errorf("Open with a password: %v", err)
	}
}
