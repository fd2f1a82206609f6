package lapse_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
	"github.com/lapsehq/lapse/inventory/reference"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// remoteInventoryAMQP is the reference inventory taking commands over
// RabbitMQ on names of the test's own, with n units of sku "tee"; the
// returned Server is not listening (its store and switches are the point).
func remoteInventoryAMQP(t *testing.T, n int64) (*reference.Server, inventory.Client) {
	t.Helper()
	st := inventorytest.SQLite(t)
	if _, err := st.SetAvailable(context.Background(), "tee", n); err != nil {
		t.Fatal(err)
	}
	srv := reference.NewServer(st, reference.Config{Logger: quiet})
	url, admin, prefix := rabbittest.URL(t), rabbittest.Admin(t), rabbittest.Name("stock")
	opts := []inventory.AMQPOption{inventory.AMQPPrefix(prefix), inventory.AMQPRetryBackoff(10*time.Millisecond, 100*time.Millisecond),
		inventory.AMQPTimeout(2 * time.Second), inventory.AMQPLogger(slog.New(slog.DiscardHandler))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, err := inventory.NewAMQPServer(ctx, url, srv.Applier(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(serveCtx) }()
	c, err := inventory.DialAMQP(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		stop()
		if err := <-served; err != nil {
			t.Errorf("AMQP inventory: %v", err)
		}
		_ = server.Close()
		deleteAMQP(admin, []string{prefix, prefix + ".dead"}, []string{prefix + ".commands", prefix + ".dead", c.ReplyQueue()})
	})
	return srv, c
}

func deleteAMQP(conn *amqp.Connection, exchanges, queues []string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	for _, q := range queues {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range exchanges {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

// inventoryTransports are the reference inventory on each transport lapse
// sends its stock commands over.
var inventoryTransports = []struct {
	name string
	open func(t *testing.T, n int64) (*reference.Server, inventory.Client)
}{{"http", remoteInventory}, {"amqp", remoteInventoryAMQP}}

// reserves counts the reserve rows of the inventory's ledger.
func reserves(t *testing.T, srv *reference.Server) int {
	t.Helper()
	rows, err := srv.Store().Ledger(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.Action == inventory.Reserve {
			n++
		}
	}
	return n
}

func skuOf(t *testing.T, srv *reference.Server) reference.SKU {
	t.Helper()
	k, err := srv.Store().SKU(context.Background(), "tee")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A create retried with the same Idempotency-Key and no id holds the stock
// once, at one reservation, and is answered with the first create's order
// — also when that order took the last units.
func TestInventoryReserveCreateRetriedWithoutIDReservesOnce(t *testing.T) {
	for _, tr := range inventoryTransports {
		t.Run(tr.name, func(t *testing.T) {
			ctx := context.Background()
			for _, stock := range []int64{10, 2} { // 2: the order takes the last units
				srv, c := tr.open(t, stock)
				svc, st := newRemoteService(t, c, true)
				start(t, svc)
				req := lapse.CreateOrderRequest{Items: tee, AmountCents: 100, IdempotencyKey: "k-retry"}
				first, err := svc.CreateOrder(ctx, req)
				if err != nil {
					t.Fatalf("stock %d: create: %v", stock, err)
				}
				again, err := svc.CreateOrder(ctx, req)
				if err != nil || !again.Replayed || again.Order.ID != first.Order.ID || again.Order.ReservationID != first.Order.ReservationID {
					t.Fatalf("stock %d: the retried create: %+v, %v; want a replay of %s", stock, again, err, first.Order.ID)
				}
				if n := reserves(t, srv); n != 1 {
					t.Fatalf("stock %d: %d reserves at the inventory, want 1", stock, n)
				}
				if k := skuOf(t, srv); k.Reserved != 2 || k.Available != stock-2 {
					t.Fatalf("stock %d: inventory %+v after a create and its retry, want 2 reserved", stock, k)
				}
				if _, err := svc.Cancel(ctx, first.Order.ID); err != nil {
					t.Fatal(err)
				}
				eventually(t, "every task done", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 && s.Dead == 0 })
				if k := skuOf(t, srv); k.Reserved != 0 || k.Available != stock {
					t.Fatalf("stock %d: inventory %+v after the cancel, want all %d available", stock, k, stock)
				}
				rep, err := svc.Audit(ctx, store.AuditParams{AllowedLag: time.Hour})
				if err != nil || !rep.OK() {
					t.Fatalf("audit %+v, %v", rep, err)
				}
			}
		})
	}
}

// A create whose answer was lost, retried with the same key and no id,
// takes its first reserve over rather than reserving again.
func TestInventoryReserveUnansweredCreateRetriedWithoutIDTakesItsReserveOver(t *testing.T) {
	for _, tr := range inventoryTransports {
		t.Run(tr.name, func(t *testing.T) {
			ctx := context.Background()
			srv, c := tr.open(t, 2)
			svc, st := newRemoteService(t, c, true) // no dispatcher until the retry is answered
			req := lapse.CreateOrderRequest{Items: tee, AmountCents: 100, IdempotencyKey: "k-lost"}
			srv.Applier().SetFaults(reference.Faults{DropAnswers: true})
			if _, err := svc.CreateOrder(ctx, req); !errors.Is(err, lapse.ErrReservationUnknown) {
				t.Fatalf("create with the answer dropped: %v, want ErrReservationUnknown", err)
			}
			srv.Applier().SetFaults(reference.Faults{})
			res, err := svc.CreateOrder(ctx, req)
			if err != nil {
				t.Fatalf("the retried create: %v; want the order (the first reserve holds the stock for it)", err)
			}
			if n := reserves(t, srv); n != 1 || reservationStatus(t, srv, res.Order.ReservationID) != reference.StatusReserved {
				t.Fatalf("%d reserves at the inventory, %s's %q; want its one reservation", n, res.Order.ID, reservationStatus(t, srv, res.Order.ReservationID))
			}
			start(t, svc)
			if _, err := svc.Cancel(ctx, res.Order.ID); err != nil {
				t.Fatal(err)
			}
			eventually(t, "every task done", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 && s.Dead == 0 })
			if k := skuOf(t, srv); k.Reserved != 0 || k.Available != 2 {
				t.Fatalf("inventory %+v after the cancel, want both units available", k)
			}
		})
	}
}

// The id a key names is spent once its reserve was given back or refused:
// a retry of the create reserves afresh, and retries after it replay the
// order it made. A key reused for another request reserves nothing.
func TestInventoryReserveRetryAfterTheKeysReserveWasGivenBackOrRefused(t *testing.T) {
	ctx := context.Background()
	srv, c := remoteInventory(t, 2)
	svc, st := newRemoteService(t, c, true)
	req := lapse.CreateOrderRequest{Items: tee, AmountCents: 100, IdempotencyKey: "k-spent"}
	srv.Applier().SetFaults(reference.Faults{DropAnswers: true})
	if _, err := svc.CreateOrder(ctx, req); !errors.Is(err, lapse.ErrReservationUnknown) {
		t.Fatalf("create with the answer dropped: %v, want ErrReservationUnknown", err)
	}
	srv.Applier().SetFaults(reference.Faults{})
	start(t, svc)
	eventually(t, "the unanswered reserve given back", func() bool {
		s, err := st.TaskStats(ctx)
		return err == nil && s.Pending == 0 && skuOf(t, srv).Available == 2
	})
	res, err := svc.CreateOrder(ctx, req)
	if err != nil || res.Replayed || reservationStatus(t, srv, res.Order.ReservationID) != reference.StatusReserved {
		t.Fatalf("the retry after the give-back: %+v, %v; want a new order holding the stock", res, err)
	}
	again, err := svc.CreateOrder(ctx, req)
	if err != nil || !again.Replayed || again.Order.ID != res.Order.ID {
		t.Fatalf("a retry after that: %+v, %v; want a replay of %s", again, err, res.Order.ID)
	}
	if k := skuOf(t, srv); k.Reserved != 2 || k.Available != 0 {
		t.Fatalf("inventory %+v, want the order's 2 units reserved", k)
	}
	other := req
	other.AmountCents = 999
	if _, err := svc.CreateOrder(ctx, other); !errors.Is(err, lapse.ErrIdempotencyMismatch) {
		t.Fatalf("the key reused for another request: %v, want ErrIdempotencyMismatch", err)
	}
	if n := reserves(t, srv); n != 2 {
		t.Fatalf("%d reserves at the inventory, want 2 (the given-back one and the order's)", n)
	}

	// Refused for want of stock, then restocked: the retry reserves.
	short := lapse.CreateOrderRequest{Items: tee, AmountCents: 100, IdempotencyKey: "k-short"}
	if _, err := svc.CreateOrder(ctx, short); !errors.Is(err, lapse.ErrInsufficientStock) {
		t.Fatalf("create beyond the stock: %v, want ErrInsufficientStock", err)
	}
	if _, err := srv.Store().SetAvailable(ctx, "tee", 2); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.CreateOrder(ctx, short); err != nil || res.Replayed {
		t.Fatalf("the retry after a restock: %+v, %v; want a new order", res, err)
	}
	eventually(t, "no task left", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 && s.Dead == 0 })
	if k := skuOf(t, srv); k.Reserved != 4 || k.Available != 0 {
		t.Fatalf("inventory %+v, want two orders' 4 units reserved", k)
	}
	rep, err := svc.Audit(ctx, store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("audit %+v, %v", rep, err)
	}
}

// Tries of one create sent at once, with the same key and no id, make one
// order on one reservation.
func TestInventoryReserveConcurrentTriesOfOneCreateReserveOnce(t *testing.T) {
	ctx := context.Background()
	srv, c := remoteInventory(t, 2)
	svc, st := newRemoteService(t, c, true)
	start(t, svc)
	req := lapse.CreateOrderRequest{Items: tee, AmountCents: 100, IdempotencyKey: "k-burst"}
	const tries = 8
	results := make([]lapse.CreateOrderResult, tries)
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() { results[i], errs[i] = svc.CreateOrder(ctx, req) })
	}
	wg.Wait()
	id := ""
	for i := range tries {
		if errs[i] != nil {
			t.Fatalf("try %d of %d at once: %v", i, tries, errs[i])
		}
		if id == "" {
			id = results[i].Order.ID
		}
		if results[i].Order.ID != id {
			t.Fatalf("tries made orders %s and %s", id, results[i].Order.ID)
		}
	}
	eventually(t, "no task left", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 && s.Dead == 0 })
	if n, k := reserves(t, srv), skuOf(t, srv); n != 1 || k.Reserved != 2 {
		t.Fatalf("%d reserves, inventory %+v: want one reservation of 2", n, k)
	}
}

// A reserve the dispatcher gives up on (DEAD) may have been applied by an
// earlier copy whose answer was lost: its release is written with it, and
// the inventory ends holding nothing.
func TestInventoryReserveGivenUpDeadReleasesItsStock(t *testing.T) {
	ctx := context.Background()
	srv, c := remoteInventory(t, 10)
	st := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	t.Cleanup(func() { st.Close() })
	svc, err := lapse.New(lapse.Config{Store: st, Inventory: c, InventoryReserve: true, Logger: quiet,
		Tasks: inventory.DispatcherConfig{Interval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
			// Given up by age: the release, written then, has as long again
			// before it could be given up too, while the test clears the fault.
			MaxAge: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	// The reserve is applied, its answer lost; then the inventory fails
	// every command until the dispatcher gives the reserve up.
	srv.Applier().SetFaults(reference.Faults{DropAnswers: true})
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "d1", Items: tee, AmountCents: 100}); !errors.Is(err, lapse.ErrReservationUnknown) {
		t.Fatalf("create with the answer dropped: %v, want ErrReservationUnknown", err)
	}
	if reservationStatus(t, srv, "d1") != reference.StatusReserved {
		t.Fatal("the dropped answer's reserve was not applied: the test proves nothing")
	}
	srv.Applier().SetFaults(reference.Faults{Fail: true})
	start(t, svc)
	eventually(t, "the reserve DEAD", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Dead == 1 })
	srv.Applier().SetFaults(reference.Faults{})
	eventually(t, "d1 released at the inventory", func() bool { return reservationStatus(t, srv, "d1") == reference.StatusReleased })
	eventually(t, "nothing pending", func() bool { s, err := st.TaskStats(ctx); return err == nil && s.Pending == 0 })
	if k := skuOf(t, srv); k.Reserved != 0 || k.Available != 10 {
		t.Fatalf("inventory %+v, want nothing held", k)
	}
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "d1", Items: tee, AmountCents: 100}); !errors.Is(err, lapse.ErrReservationReleased) {
		t.Fatalf("a create of d1 after its reserve was given up: %v, want ErrReservationReleased", err)
	}
}

// A release answered 301 (an http:// inventory URL behind a proxy that
// redirects to https://) is not followed: the task is retried with the
// status as its error, never DONE on what the redirect's target answers.
func TestRemoteStockReleaseAnsweredRedirectIsNeverDone(t *testing.T) {
	ctx := context.Background()
	var followed atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, r *http.Request) { followed.Add(1); w.WriteHeader(http.StatusOK) })
	// The create reads the caller's reservation: that read is answered.
	mux.HandleFunc("GET /reservations/r-m1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"reservation_id":"r-m1","status":"RESERVED","items":[{"sku":"tee","qty":2}],"ledger":[]}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/moved"+r.URL.Path, http.StatusMovedPermanently)
	})
	inv := httptest.NewServer(mux)
	t.Cleanup(inv.Close)
	c := inventory.NewHTTPClient(inv.URL, inventory.WithTimeout(2*time.Second))
	t.Cleanup(func() { c.Close() })
	svc, _ := newRemoteService(t, c, false)
	start(t, svc)
	if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "m1", Items: tee, AmountCents: 100, ReservationID: "r-m1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Cancel(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	var release order.StockTask
	eventually(t, "the release sent three times", func() bool {
		o, err := svc.Get(ctx, "m1")
		if err != nil || len(o.Tasks) != 1 {
			return false
		}
		release = o.Tasks[0]
		return release.Status == order.TaskDone || release.Attempts >= 3
	})
	if release.Status != order.TaskPending || !strings.Contains(release.LastError, "301") {
		t.Fatalf("release task %+v: want it PENDING, its error naming the 301", release)
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}
