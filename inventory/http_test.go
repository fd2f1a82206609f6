package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
)

// httpTransport serves the applier with the reference's command routes.
func httpTransport(t *testing.T, a inventory.Applier) inventory.Client {
	srv := httptest.NewServer(reference.CommandHandler(a, nil))
	t.Cleanup(srv.Close)
	c := inventory.NewHTTPClient(srv.URL)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestInventoryHTTPConformance(t *testing.T) {
	inventorytest.Exercise(t, httpTransport)
}

// fixed is a server that answers every request with status and body, and
// records the last request.
type fixed struct {
	mu     sync.Mutex
	status int
	body   string
	last   *http.Request
	read   string
}

func (f *fixed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last, f.read = r, string(b)
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func (f *fixed) set(status int, body string) {
	f.mu.Lock()
	f.status, f.body = status, body
	f.mu.Unlock()
}

// Every status maps to the answer NewHTTPClient documents, for an inventory
// of anyone's making.
func TestInventoryHTTPStatusMapping(t *testing.T) {
	f := &fixed{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := inventory.NewHTTPClient(srv.URL + "/")
	defer c.Close()
	items := []inventory.Item{{SKU: "tee", Qty: 1}}
	reserve := inventory.Command{TaskID: "t1", Action: inventory.Reserve, ReservationID: "r1", OrderID: "o1", Items: items}
	release := inventory.Command{TaskID: "t2", Action: inventory.Release, ReservationID: "r/1 x", OrderID: "o1"}
	confirm := inventory.Command{TaskID: "t3", Action: inventory.Confirm, ReservationID: "r1"}
	code := func(c string) string { return `{"error":{"code":"` + c + `","message":"m"}}` }
	for _, tc := range []struct {
		name   string
		cmd    inventory.Command
		status int
		body   string
		result inventory.Result // "" wants an error
		reason string
	}{
		{"reserve 201", reserve, 201, `{}`, inventory.Success, ""},
		{"reserve 202", reserve, 202, ``, inventory.Success, ""},
		{"reserve 200", reserve, 200, `{}`, inventory.AlreadyDone, ""},
		{"reserve 409 short", reserve, 409, code("insufficient_stock"), inventory.Rejected, "insufficient_stock"},
		{"reserve 409 released", reserve, 409, code("released"), inventory.Rejected, "released"},
		{"reserve 409 other", reserve, 409, code("already_done"), inventory.AlreadyDone, ""},
		{"reserve 409 no body", reserve, 409, `conflict`, inventory.AlreadyDone, ""},
		{"release 200", release, 200, ``, inventory.Success, ""},
		{"release 204", release, 204, ``, inventory.Success, ""},
		{"release 409", release, 409, code("already_done"), inventory.AlreadyDone, ""},
		{"release 409 released", release, 409, code("released"), inventory.AlreadyDone, ""},
		{"release 422", release, 422, code("confirmed"), inventory.Rejected, "confirmed"},
		{"confirm 409 released", confirm, 409, code("released"), inventory.Rejected, "released"},
		{"confirm 404 no code", confirm, 404, `not found`, inventory.Rejected, "http_404"},
		{"confirm 400", confirm, 400, code("invalid_command"), inventory.Rejected, "invalid_command"},
		{"408 retried", confirm, 408, ``, "", ""},
		{"429 retried", confirm, 429, ``, "", ""},
		{"500", confirm, 500, code("boom"), "", ""},
		{"503", reserve, 503, ``, "", ""},
		{"302", reserve, 302, ``, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.set(tc.status, tc.body)
			ans, err := c.Send(context.Background(), tc.cmd)
			if tc.result == "" {
				if err == nil {
					t.Fatalf("answered %+v, want an error", ans)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ans.Result != tc.result || ans.Reason != tc.reason || ans.TaskID != tc.cmd.TaskID {
				t.Fatalf("answered %+v, want %s %q for task %s", ans, tc.result, tc.reason, tc.cmd.TaskID)
			}
		})
	}

	// The request itself: method, path (the id escaped), key and body.
	f.set(200, "")
	if _, err := c.Send(context.Background(), release); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	r, body := f.last, f.read
	f.mu.Unlock()
	if r.Method != "POST" || r.URL.EscapedPath() != "/reservations/r%2F1%20x/release" || r.Header.Get("Idempotency-Key") != "t2" {
		t.Errorf("release sent as %s %s with key %q", r.Method, r.URL.EscapedPath(), r.Header.Get("Idempotency-Key"))
	}
	if body != `{"order_id":"o1"}` {
		t.Errorf("release body %s", body)
	}
	f.set(201, "")
	if _, err := c.Send(context.Background(), reserve); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	r, body = f.last, f.read
	f.mu.Unlock()
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil || r.URL.Path != "/reservations" || got["reservation_id"] != "r1" || got["order_id"] != "o1" || got["items"] == nil {
		t.Errorf("reserve sent to %s with body %s", r.URL.Path, body)
	}

	// An invalid command is not sent.
	if _, err := c.Send(context.Background(), inventory.Command{Action: inventory.Reserve, ReservationID: "r"}); err == nil || !strings.Contains(err.Error(), "task_id") {
		t.Errorf("a command without a task id: %v, want an error", err)
	}
}

// A timeout, a refused connection and an inventory that goes away mid-way
// are errors: the outcome is unknown.
func TestInventoryHTTPUnknownOutcomes(t *testing.T) {
	st := inventorytest.SQLite(t)
	faulty := reference.NewFaulty(st, reference.Faults{DelayMS: 2000})
	srv := httptest.NewServer(reference.CommandHandler(faulty, nil))
	defer srv.Close()
	cmd := inventory.Command{TaskID: "t", Action: inventory.Release, ReservationID: "r"}

	c := inventory.NewHTTPClient(srv.URL, inventory.WithTimeout(50*time.Millisecond))
	defer c.Close()
	start := time.Now()
	if ans, err := c.Send(context.Background(), cmd); err == nil {
		t.Fatalf("past the timeout: answered %+v, want an error", ans)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the 50 ms timeout returned after %s", d)
	}

	// The caller's own deadline counts too.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := inventory.NewHTTPClient(srv.URL, inventory.WithHTTPClient(&http.Client{})).Send(ctx, cmd); err == nil {
		t.Fatal("past ctx's deadline: want an error")
	}

	// Nobody listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := inventory.NewHTTPClient("http://"+addr).Send(context.Background(), cmd); err == nil {
		t.Fatal("to a closed port: want an error")
	}
}

// redirector answers every command 301 to /moved, where a handler answers
// 200 to anything — what an http:// URL behind a proxy that redirects to
// https:// looks like to a client that follows redirects.
func redirector(t *testing.T) (srv *httptest.Server, moved *int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	mux := http.NewServeMux()
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/reservations/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/reservations", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &n
}

// A redirect is never followed: a release answered 301 is no answer (the
// command was not applied), whatever the redirect's target answers, and
// also with a client of the caller's that would follow it.
func TestInventoryHTTPRedirectIsAnErrorNotFollowed(t *testing.T) {
	srv, moved := redirector(t)
	for name, c := range map[string]inventory.Client{
		"own client":      inventory.NewHTTPClient(srv.URL),
		"caller's client": inventory.NewHTTPClient(srv.URL, inventory.WithHTTPClient(&http.Client{})),
	} {
		for _, cmd := range []inventory.Command{
			{TaskID: "t1", Action: inventory.Release, ReservationID: "r1", OrderID: "o1"},
			{TaskID: "t2", Action: inventory.Confirm, ReservationID: "r1", OrderID: "o1"},
			{TaskID: "t3", Action: inventory.Reserve, ReservationID: "r1", OrderID: "o1", Items: []inventory.Item{{SKU: "tee", Qty: 1}}},
		} {
			a, err := c.Send(context.Background(), cmd)
			if err == nil || !strings.Contains(err.Error(), "301") {
				t.Errorf("%s: %s answered 301: %+v, %v; want an error naming the status", name, cmd.Action, a, err)
			}
		}
		c.Close()
	}
	if *moved != 0 {
		t.Errorf("the redirect was followed %d times", *moved)
	}
}

// The HTTP client reads a reservation as GET /reservations/{id} answers it;
// 404 unknown_reservation is ErrUnknownReservation, any other status (a
// redirect included, never followed) an error.
func TestInventoryHTTPReadsAReservation(t *testing.T) {
	st := inventorytest.SQLite(t)
	ctx := context.Background()
	if _, err := st.SetAvailable(ctx, "tee", 5); err != nil {
		t.Fatal(err)
	}
	srv := reference.NewServer(st, reference.Config{})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	c := inventory.NewHTTPClient(srv.URL())
	t.Cleanup(func() { c.Close() })
	insp, ok := c.(inventory.Inspector)
	if !ok {
		t.Fatal("the HTTP client is not an Inspector")
	}
	if a, err := c.Send(ctx, inventory.Command{TaskID: "t-1", Action: inventory.Reserve, ReservationID: "r 1/x", OrderID: "o-1",
		Items: []inventory.Item{{SKU: "tee", Qty: 2}}}); err != nil || !a.Done() {
		t.Fatalf("reserve: %+v, %v", a, err)
	}
	res, err := insp.Reservation(ctx, "r 1/x")
	if err != nil || res.Status != inventory.StatusReserved || res.OrderID != "o-1" || len(res.Items) != 1 || res.Items[0] != (inventory.Item{SKU: "tee", Qty: 2}) ||
		len(res.Ledger) != 1 || res.Ledger[0].TaskID != "t-1" || res.Ledger[0].Action != inventory.Reserve {
		t.Fatalf("reservation: %+v, %v", res, err)
	}
	if _, err := insp.Reservation(ctx, "never"); !errors.Is(err, inventory.ErrUnknownReservation) {
		t.Fatalf("an unknown reservation: %v, want ErrUnknownReservation", err)
	}
	f := &fixed{}
	other := httptest.NewServer(f)
	defer other.Close()
	oc := inventory.NewHTTPClient(other.URL).(inventory.Inspector)
	for _, tc := range []struct {
		status int
		body   string
	}{{404, `not found`}, {301, ``}, {500, `{}`}, {200, `not json`}, {200, `{"reservation_id":"r"}`}} {
		f.set(tc.status, tc.body)
		if _, err := oc.Reservation(ctx, "r"); err == nil || errors.Is(err, inventory.ErrUnknownReservation) {
			t.Errorf("status %d %q: %v, want an error (not unknown)", tc.status, tc.body, err)
		}
	}
}

func TestItemsDiff(t *testing.T) {
	it := func(sku string, qty int64) inventory.Item { return inventory.Item{SKU: sku, Qty: qty} }
	for _, tc := range []struct {
		order, res []inventory.Item
		want       string
	}{
		{[]inventory.Item{it("a", 2), it("b", 1)}, []inventory.Item{it("b", 1), it("a", 1), it("a", 1)}, ""},
		{[]inventory.Item{it("a", 2)}, []inventory.Item{it("a", 1)}, `"a": order 2, reservation 1`},
		{[]inventory.Item{it("a", 1)}, []inventory.Item{it("a", 1), it("z", 3)}, `"z": order 0, reservation 3`},
		{[]inventory.Item{it("a", 1)}, nil, `"a": order 1, reservation 0`},
	} {
		if got := strings.Join(inventory.ItemsDiff(tc.order, tc.res), "; "); got != tc.want {
			t.Errorf("ItemsDiff(%v, %v) = %q, want %q", tc.order, tc.res, got, tc.want)
		}
	}
}
