package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// TestShop runs the example shop over HTTP against the machine's PostgreSQL
// and MariaDB: lapse's order and the shop's row are created together,
// cancelled together at the deadline or by the buyer, paid together by the
// provider's webhook, and a checkout the shop rolls back leaves nothing of
// lapse's.
func TestShop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	backends := map[string]func(t *testing.T) database{
		"postgres": func(t *testing.T) database {
			db, err := openPostgres(ctx, testdb.PostgresSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
		"mysql": func(t *testing.T) database {
			c := testdb.MySQLDatabase(t)
			c.ParseTime, c.ClientFoundRows = true, true // what lapse's FromDB asks of a pool
			db, err := openMySQL(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, open(t))

			t.Run("the deadline passes: cancelled with the shop's row, stock back", func(t *testing.T) {
				before := h.stock(t)
				row := h.checkout(t, h.fast, `{"id":"late-1","items":[{"sku":"tee","qty":2}]}`)
				if row.Status != statusPending || row.AmountCents != 2*teePrice {
					t.Fatalf("checkout: %+v, want pending at %d cents", row, 2*teePrice)
				}
				o := h.lapseOrder(t, "late-1")
				if stored := h.row(t, "late-1"); !row.PayBy.Equal(o.ExpiresAt) || !stored.PayBy.Equal(o.ExpiresAt) {
					t.Fatalf("the shop's pay_by %s (stored %s), lapse's expires_at %s: want the same", row.PayBy, stored.PayBy, o.ExpiresAt)
				}
				if got := h.stock(t); got.Available != before.Available-2 || got.Locked != before.Locked+2 {
					t.Fatalf("stock after the checkout %+v, before %+v: want 2 locked", got, before)
				}
				h.waitCancelled(t, "late-1")
				o = h.lapseOrder(t, "late-1")
				if o.CancelReason != order.ReasonTimeout || o.CancelledAt.Before(o.ExpiresAt) {
					t.Fatalf("lapse's order: %s at %s (deadline %s), want a timeout cancel after the deadline",
						o.CancelReason, o.CancelledAt, o.ExpiresAt)
				}
				if got := h.stock(t); got != before {
					t.Fatalf("stock after the timeout %+v, want it back to %+v", got, before)
				}
			})

			t.Run("the provider's webhook pays: the shop's row is paid", func(t *testing.T) {
				before := h.stock(t)
				h.checkout(t, h.srv, `{"id":"paid-1","items":[{"sku":"tee","qty":1}]}`)
				body := `{"order_id":"paid-1","payment_id":"pi_1","status":"SUCCEEDED","amount_cents":1999}`

				// Unsigned, or signed with another secret: refused, nothing changes.
				for _, secret := range [][]byte{nil, []byte("not the shop's")} {
					hdr := http.Header{}
					if secret != nil {
						hdr.Set(payment.SignatureHeader, payment.Sign(secret, time.Now(), []byte(body)))
					}
					code, got := call(t, h.srv, http.MethodPost, "/webhook/payment", body, hdr)
					wantError(t, code, got, http.StatusUnauthorized, "bad_signature")
				}
				if got := h.row(t, "paid-1"); got.Status != statusPending {
					t.Fatalf("after refused callbacks the shop's row is %s, want pending", got.Status)
				}

				hdr := http.Header{}
				hdr.Set(payment.SignatureHeader, payment.Sign(h.secret, time.Now(), []byte(body)))
				for range 2 { // the provider sends it again: the same answer, nothing more changes
					code, got := call(t, h.srv, http.MethodPost, "/webhook/payment", body, hdr)
					if code != http.StatusOK || !strings.Contains(string(got), `"order_status":"PAID"`) {
						t.Fatalf("signed callback: %d %s, want 200 PAID", code, got)
					}
				}
				if got := h.row(t, "paid-1"); got.Status != statusPaid {
					t.Fatalf("the shop's row after the payment: %s, want paid (by OnPaid)", got.Status)
				}
				if o := h.lapseOrder(t, "paid-1"); o.Status != order.Paid || o.PaymentID != "pi_1" {
					t.Fatalf("lapse's order after the payment: %s by %q", o.Status, o.PaymentID)
				}
				if got := h.stock(t); got.Available != before.Available-1 || got.Locked != before.Locked || got.Sold != before.Sold+1 {
					t.Fatalf("stock after the payment %+v, before %+v: want one sold", got, before)
				}
			})

			t.Run("the buyer cancels: the shop's row is cancelled, stock back", func(t *testing.T) {
				before := h.stock(t)
				h.checkout(t, h.srv, `{"id":"mine-1","items":[{"sku":"tee","qty":3}]}`)
				code, body := call(t, h.srv, http.MethodPost, "/orders/mine-1/cancel", "", nil)
				if code != http.StatusOK || decodeRow(t, body).Status != statusCancelled {
					t.Fatalf("cancel: %d %s, want 200 and the row cancelled", code, body)
				}
				if o := h.lapseOrder(t, "mine-1"); o.Status != order.Cancelled || o.CancelReason != order.ReasonBuyer {
					t.Fatalf("lapse's order after the buyer's cancel: %s (%s)", o.Status, o.CancelReason)
				}
				if got := h.stock(t); got != before {
					t.Fatalf("stock after the cancel %+v, want it back to %+v", got, before)
				}
				code, body = call(t, h.srv, http.MethodPost, "/orders/mine-1/cancel", "", nil)
				wantError(t, code, body, http.StatusConflict, "not_pending")
				code, body = call(t, h.srv, http.MethodPost, "/orders/nobody/cancel", "", nil)
				wantError(t, code, body, http.StatusNotFound, "not_found")
			})

			t.Run("a checkout the shop rolls back leaves no lapse order", func(t *testing.T) {
				// An order of the shop's from before it used lapse holds the
				// id: lapse's order is made in the transaction, then the
				// shop's insert fails and the whole checkout rolls back.
				err := h.db.inTx(ctx, func(tx shopTx) error {
					return tx.insertOrder(ctx, shopOrder{ID: "legacy-1", Status: statusPending, AmountCents: 100, PayBy: time.Now().Add(time.Hour)})
				})
				if err != nil {
					t.Fatal(err)
				}
				before := h.stock(t)
				code, body := call(t, h.fast, http.MethodPost, "/checkout", `{"id":"legacy-1","items":[{"sku":"tee","qty":1}]}`, nil)
				wantError(t, code, body, http.StatusConflict, "order_exists")
				if _, err := h.svc.Get(ctx, "legacy-1"); !errors.Is(err, lapse.ErrNotFound) {
					t.Fatalf("lapse's order after the rolled-back checkout: %v, want not found", err)
				}
				if got := h.stock(t); got != before {
					t.Fatalf("stock after the rolled-back checkout %+v, want %+v", got, before)
				}
				// Its timer was set with a shorter deadline than this order's:
				// once this one is cancelled, that timer has fired, and must
				// have done nothing (the legacy row stays pending).
				h.checkout(t, h.fast, `{"id":"after-rollback","items":[{"sku":"tee","qty":1}]}`)
				h.waitCancelled(t, "after-rollback")
				if got := h.row(t, "legacy-1"); got.Status != statusPending {
					t.Fatalf("the shop's legacy row: %s, want pending (untouched by the rolled-back order's timer)", got.Status)
				}
				if got := h.stock(t); got != before {
					t.Fatalf("stock at the end %+v, want %+v", got, before)
				}
			})

			t.Run("bad input is a 4xx with a stable code", func(t *testing.T) {
				for _, c := range []struct{ body, code string }{
					{`{"items":[]}`, "invalid_field"},
					{`{"items":[{"sku":"hat","qty":1}]}`, "unknown_sku"},
					{`{"items":[{"sku":"tee","qty":0}]}`, "invalid_field"},
					{`{"items":[{"sku":"tee","qty":1}],"amount_cents":1}`, "invalid_json"},
					{`{"id":"no spaces please","items":[{"sku":"tee","qty":1}]}`, "invalid_field"},
					{`not json`, "invalid_json"},
				} {
					code, body := call(t, h.srv, http.MethodPost, "/checkout", c.body, nil)
					wantError(t, code, body, http.StatusBadRequest, c.code)
				}
				code, body := call(t, h.srv, http.MethodPost, "/checkout", `{"items":[{"sku":"tee","qty":100}]}`, nil)
				wantError(t, code, body, http.StatusConflict, "insufficient_stock")
				code, body = call(t, h.srv, http.MethodGet, "/orders/nobody", "", nil)
				wantError(t, code, body, http.StatusNotFound, "not_found")
			})

			// Every committed transition kept lapse's invariants.
			storetest.AuditOK(t, h.db.lapseStore())
		})
	}
}

// teePrice is the test catalogue's price of a tee, in cents.
const teePrice = 1999

// harness is the shop on one database, served twice over HTTP: srv with a
// payment window of a minute, fast with one short enough to watch pass.
type harness struct {
	db        database
	svc       *lapse.Service
	srv, fast *httptest.Server
	secret    []byte
}

func newHarness(t *testing.T, db database) *harness {
	t.Cleanup(db.close)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := lapse.New(lapse.Config{Store: db.lapseStore(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := stockUp(ctx, svc, "tee", 10); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("lapse's Run on shutdown: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("lapse's Run did not return within 10s of shutdown")
		}
	})
	h := &harness{db: db, svc: svc, secret: []byte("the provider's secret")}
	serve := func(window time.Duration) *httptest.Server {
		s := &shop{db: db, lapse: svc, prices: map[string]int64{"tee": teePrice}, payWindow: window,
			webhookSecrets: [][]byte{h.secret}, log: log}
		srv := httptest.NewServer(s.routes())
		t.Cleanup(srv.Close)
		return srv
	}
	h.srv, h.fast = serve(time.Minute), serve(2*time.Second)
	return h
}

// checkout places an order through srv and returns the shop's row.
func (h *harness) checkout(t *testing.T, srv *httptest.Server, body string) shopOrder {
	t.Helper()
	code, got := call(t, srv, http.MethodPost, "/checkout", body, nil)
	if code != http.StatusCreated {
		t.Fatalf("checkout %s: %d %s", body, code, got)
	}
	return decodeRow(t, got)
}

// row is the shop's row of order id, through GET /orders/{id}.
func (h *harness) row(t *testing.T, id string) shopOrder {
	t.Helper()
	code, body := call(t, h.srv, http.MethodGet, "/orders/"+id, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /orders/%s: %d %s", id, code, body)
	}
	return decodeRow(t, body)
}

func (h *harness) lapseOrder(t *testing.T, id string) order.Order {
	t.Helper()
	o, err := h.svc.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("lapse's order %s: %v", id, err)
	}
	return o
}

func (h *harness) stock(t *testing.T) store.SKU {
	t.Helper()
	s, err := h.svc.GetSKU(context.Background(), "tee")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitCancelled waits for lapse to cancel order id at its deadline. Each
// time lapse's order is read cancelled, the shop's row read after it must
// be too: the OnCancelled hook moved it in lapse's own commit.
func (h *harness) waitCancelled(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for h.lapseOrder(t, id).Status != order.Cancelled {
		if time.Now().After(deadline) {
			t.Fatalf("order %s not cancelled within 15s of its checkout", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.row(t, id); got.Status != statusCancelled {
		t.Fatalf("lapse cancelled order %s, but the shop's row is %s: want cancelled in the same commit", id, got.Status)
	}
}

// call sends one request to srv and returns the status and body.
func call(t *testing.T, srv *httptest.Server, method, path, body string, hdr http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}

func decodeRow(t *testing.T, body []byte) shopOrder {
	t.Helper()
	var o shopOrder
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return o
}

// wantError checks an error answer: its status and its JSON code.
func wantError(t *testing.T, code int, body []byte, wantCode int, wantErr string) {
	t.Helper()
	var e struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != wantCode || e.Error.Code != wantErr {
		t.Fatalf("answer %d %s, want %d with error code %s", code, body, wantCode, wantErr)
	}
}
