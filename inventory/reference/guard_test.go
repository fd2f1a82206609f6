package reference_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
)

// raw sends a request with the headers given (Host among them) and returns
// the status and the error code of the answer.
func raw(t *testing.T, srv *reference.Server, method, path, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Code
}

// What a page of another site can make a browser send — a text/plain or
// form POST, a request with its Origin, a request to a name re-pointed at
// the inventory (DNS rebinding) — is refused before it changes or reads
// anything; the inventory's own clients are answered.
func TestInventoryReferenceRefusesCrossSiteRequests(t *testing.T) {
	ctx := context.Background()
	st := inventorytest.SQLite(t)
	if _, err := st.SetAvailable(ctx, "tee", 5); err != nil {
		t.Fatal(err)
	}
	srv := reference.NewServer(st, reference.Config{AllowedHosts: []string{"inventory.internal"}})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	_, port, _ := net.SplitHostPort(srv.Addr())
	const js = "application/json"
	if status, code := raw(t, srv, "POST", "/reservations", `{"reservation_id": "r1", "items": [{"sku": "tee", "qty": 1}]}`, "Content-Type", js); status != 201 {
		t.Fatalf("reserve: %d %s", status, code)
	}

	for _, c := range []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     string
	}{
		{"text/plain switches faults", "POST", "/faults", `{"fail": true}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"a form switches faults", "POST", "/faults", `{"fail": true}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"text/plain releases", "POST", "/reservations/r1/release", `{}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"an empty form releases", "POST", "/reservations/r1/release", ``, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"no content type sets stock", "PUT", "/skus/tee", `{"available": 0}`, nil, 415, "unsupported_media_type"},
		{"another site's page switches faults", "POST", "/faults", `{"fail": true}`, []string{"Content-Type", js, "Origin", "https://evil.example"}, 403, "foreign_origin"},
		{"another site's page releases", "POST", "/reservations/r1/release", `{}`, []string{"Content-Type", js, "Origin", "http://evil.example:" + port}, 403, "foreign_origin"},
		{"a rebound name reads the ledger", "GET", "/ledger", ``, []string{"Host", "evil.example:" + port}, 403, "foreign_origin"},
		{"a rebound name reads a reservation", "GET", "/reservations/r1", ``, []string{"Host", "evil.example"}, 403, "foreign_origin"},
		{"a rebound name releases", "POST", "/reservations/r1/release", `{}`, []string{"Content-Type", js, "Host", "evil.example:" + port}, 403, "foreign_origin"},
		{"the listen address on another port", "GET", "/ledger", ``, []string{"Host", "127.0.0.1:1"}, 403, "foreign_origin"},
	} {
		if status, code := raw(t, srv, c.method, c.path, c.body, c.headers...); status != c.status || code != c.code {
			t.Errorf("%s: %d %q, want %d %q", c.name, status, code, c.status, c.code)
		}
	}
	if f := srv.Applier().Faults(); f.Fail {
		t.Errorf("faults %+v after the refused requests", f)
	}
	if r, err := st.Reservation(ctx, "r1"); err != nil || r.Status != reference.StatusReserved {
		t.Errorf("reservation r1 %+v, %v after the refused requests: want it RESERVED", r, err)
	}
	if k, err := st.SKU(ctx, "tee"); err != nil || k.Available != 4 {
		t.Errorf("sku %+v, %v after the refused requests: want 4 available", k, err)
	}

	// Its own clients: the address, localhost, an allowed name, its own
	// Origin, JSON (with a UTF-8 charset), and a release without a body.
	for _, c := range []struct {
		name, method, path, body string
		headers                  []string
	}{
		{"the ledger", "GET", "/ledger", ``, nil},
		{"the ledger at localhost", "GET", "/ledger", ``, []string{"Host", "localhost:" + port}},
		{"the ledger at an allowed name", "GET", "/ledger", ``, []string{"Host", "inventory.internal:" + port}},
		{"faults from its own page", "POST", "/faults", `{"delay_ms": 0}`, []string{"Content-Type", js, "Origin", "http://127.0.0.1:" + port}},
		{"faults with a charset", "POST", "/faults", `{"delay_ms": 0}`, []string{"Content-Type", "application/json; charset=utf-8"}},
		{"a release without a body", "POST", "/reservations/r1/release", ``, nil},
	} {
		if status, code := raw(t, srv, c.method, c.path, c.body, c.headers...); status != 200 {
			t.Errorf("%s: %d %q, want 200", c.name, status, code)
		}
	}
}
