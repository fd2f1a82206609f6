package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
)

// openPostgresURL opens a store in a schema of its own on
// LAPSE_TEST_POSTGRES, dropped when the test ends, and returns it with the
// schema's URL.
func openPostgresURL(t *testing.T, clk *clock.Fake) (store.Store, string) {
	t.Helper()
	ctx := context.Background()
	u := testdb.PostgresSchema(t)
	cfg := postgres.Config{URL: u, MaxConns: 4}
	if clk != nil {
		cfg.Clock = clk
	}
	st, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	return st, u
}

// NUL and invalid UTF-8 are the client's error, answered 400 at the edge:
// they never reach the store, where PostgreSQL refuses them in text and the
// answer was a 500. Run on both stores: SQLite takes such text without a
// word (and answered 404, or stored it), PostgreSQL made a 500 of it.
func TestEdgeRefusesNULAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{Grace: time.Hour, Postgres: db == "postgres"})
			edgeCases(t, e)
		})
	}
}

func edgeCases(t *testing.T, e *env) {
	e.setStock(t, "a", 10)
	o := e.create(t, createReq{ID: "edge-1", Items: []item{{"a", 1}}, AmountCents: 5})
	before := e.snapshot(t, []string{o.ID}, []string{"a"})
	cursor := func(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }

	for _, c := range []struct {
		name, method, path string
		body               any
		hdr                []string
		code               string
	}{
		{"an order id with a NUL", "GET", "/v1/orders/%00", nil, nil, "invalid_field"},
		{"an order id with a NUL inside", "GET", "/v1/orders/edge%00-1", nil, nil, "invalid_field"},
		{"an order id of invalid UTF-8", "GET", "/v1/orders/%FF", nil, nil, "invalid_field"},
		{"an order id cut mid-character", "GET", "/v1/orders/edge-%C3", nil, nil, "invalid_field"},
		{"paying an order id with a NUL", "POST", "/v1/orders/%00/pay", nil, nil, "invalid_field"},
		{"paying an order id of invalid UTF-8", "POST", "/v1/orders/%C3%28/pay", nil, nil, "invalid_field"},
		{"cancelling an order id with a NUL", "POST", "/v1/orders/edge-1%00/cancel", nil, nil, "invalid_field"},
		{"cancelling an order id of invalid UTF-8", "POST", "/v1/orders/%FE/cancel", nil, nil, "invalid_field"},
		{"a sku with a NUL", "GET", "/v1/skus/a%00", nil, nil, "invalid_field"},
		{"a sku of invalid UTF-8", "GET", "/v1/skus/%FF", nil, nil, "invalid_field"},
		{"setting a sku of invalid UTF-8", "PUT", "/v1/skus/%FF", `{"available":1}`, nil, "invalid_field"},
		{"an Idempotency-Key of invalid UTF-8", "POST", "/v1/orders", `{"items":[{"sku":"a","qty":1}],"amount_cents":1}`,
			[]string{"Idempotency-Key", "key-\xff"}, "invalid_field"},
		{"an order id with a NUL in the body", "POST", "/v1/orders", `{"id":"x\u0000","items":[{"sku":"a","qty":1}],"amount_cents":1}`, nil, "invalid_field"},
		{"an order id of invalid UTF-8 in the body", "POST", "/v1/orders", "{\"id\":\"x\xff\",\"items\":[{\"sku\":\"a\",\"qty\":1}],\"amount_cents\":1}", nil, "invalid_field"},
		{"a currency with a NUL", "POST", "/v1/orders", `{"items":[{"sku":"a","qty":1}],"amount_cents":1,"currency":"US\u0000"}`, nil, "invalid_field"},
		{"a cursor whose id has a NUL", "GET", "/v1/orders?cursor=" + cursor("1700000000000|edge\x00"), nil, nil, "invalid_cursor"},
		{"a cursor whose id is invalid UTF-8", "GET", "/v1/orders?cursor=" + cursor("1700000000000|\xff\xfe"), nil, nil, "invalid_cursor"},
		{"a cursor past year 9999", "GET", "/v1/orders?cursor=" + cursor("9223372036854775807|edge-1"), nil, nil, "invalid_cursor"},
		{"a cursor before 1970", "GET", "/v1/orders?cursor=" + cursor("-1|edge-1"), nil, nil, "invalid_cursor"},
		{"a cursor with a leading zero", "GET", "/v1/orders?cursor=" + cursor("01700000000000|edge-1"), nil, nil, "invalid_cursor"},
		{"a cursor with a plus sign", "GET", "/v1/orders?cursor=" + cursor("+1700000000000|edge-1"), nil, nil, "invalid_cursor"},
		{"a padded cursor", "GET", "/v1/orders?cursor=" + base64.URLEncoding.EncodeToString([]byte("1700000000000|edge-1")), nil, nil, "invalid_cursor"},
		{"a status with a NUL", "GET", "/v1/orders?status=PENDING%00", nil, nil, "invalid_field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, e.do(t, c.method, c.path, c.body, c.hdr...), http.StatusBadRequest, c.code)
		})
	}

	callbacks := map[string]string{
		"an order_id with a NUL":          `{"order_id":"edge-1\u0000","payment_id":"p","status":"SUCCEEDED","amount_cents":5}`,
		"an order_id of invalid UTF-8":    "{\"order_id\":\"edge-\xff\",\"payment_id\":\"p\",\"status\":\"SUCCEEDED\",\"amount_cents\":5}",
		"a payment_id with a NUL":         `{"order_id":"edge-1","payment_id":"p\u0000","status":"SUCCEEDED","amount_cents":5}`,
		"a payment_id of invalid UTF-8":   "{\"order_id\":\"edge-1\",\"payment_id\":\"p\xc3\x28\",\"status\":\"FAILED\",\"amount_cents\":5}",
		"a payment_id cut mid-character":  "{\"order_id\":\"edge-1\",\"payment_id\":\"p\xe2\x82\",\"status\":\"SUCCEEDED\",\"amount_cents\":5}",
		"a status with a NUL":             `{"order_id":"edge-1","payment_id":"p","status":"SUCCEEDED\u0000","amount_cents":5}`,
		"a key of invalid UTF-8":          "{\"order_id\":\"edge-1\",\"payment_id\":\"p\",\"status\":\"SUCCEEDED\",\"amount_cents\":5,\"\xff\":1}",
		"an escaped NUL in a long string": `{"order_id":"edge-1","payment_id":"` + strings.Repeat("p", 100) + `\u0000","status":"SUCCEEDED","amount_cents":5}`,
	}
	for name, body := range callbacks {
		t.Run("a signed callback with "+name, func(t *testing.T) {
			b := []byte(body)
			r := e.notify(t, b, payment.Sign(e.secret, time.Now(), b))
			wantError(t, r, http.StatusBadRequest, "invalid_field")
		})
	}

	t.Run("a NUL in a header never reaches the handler", func(t *testing.T) {
		// net/http's client will not send one; its server answers 400 itself.
		u, _ := url.Parse(e.url)
		conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		body := `{"items":[{"sku":"a","qty":1}],"amount_cents":1}`
		fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nIdempotency-Key: k\x00\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", u.Host, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})

	wantUnchanged(t, before, e.snapshot(t, []string{o.ID}, []string{"a"}))
	r := e.do(t, "GET", "/v1/orders", nil)
	var page struct {
		Orders []json.RawMessage `json:"orders"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil || len(page.Orders) != 1 {
		t.Errorf("refused requests made orders: %s", r.Body)
	}
	t.Run("a cursor this API wrote still works", func(t *testing.T) {
		e.create(t, createReq{ID: "edge-2", Items: []item{{"a", 1}}, AmountCents: 5})
		r := e.do(t, "GET", "/v1/orders?limit=1", nil)
		var p struct {
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.Body, &p); err != nil || p.NextCursor == "" {
			t.Fatalf("first page: %s", r.Body)
		}
		if r := e.do(t, "GET", "/v1/orders?limit=1&cursor="+p.NextCursor, nil); r.Status != http.StatusOK {
			t.Errorf("second page: %d %s", r.Status, r.Body)
		}
	})
}
