package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// Creates sent at once are committed in groups, and the groups' own
// decisions stand: none falls back to lone creates (what they answer is
// storetest's "creates sent at once are answered as if alone").
func TestGroupCommitGroups(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 10, "scarce")
	storetest.Stock(t, s, 1000, "plenty")
	var ps []store.CreateOrderParams
	for i := range 60 {
		ps = append(ps, storetest.Params(fmt.Sprintf("s%02d", i), order.Item{SKU: "scarce", Qty: 1}, order.Item{SKU: "plenty", Qty: 2}))
	}
	for i := range 30 {
		p := storetest.Params(fmt.Sprintf("k%02d", i), order.Item{SKU: "plenty", Qty: 1})
		p.IdempotencyKey, p.RequestHash = fmt.Sprintf("key-%02d", i%10), "hash"
		ps = append(ps, p)
	}
	_, errs := storetest.CreateAll(s, ps)
	sold := 0
	for i, err := range errs {
		switch {
		case err == nil:
			if i < 60 {
				sold++
			}
		case i < 60 && errors.Is(err, store.ErrInsufficientStock):
		default:
			t.Errorf("%s: %v", ps[i].ID, err)
		}
	}
	if sold != 10 {
		t.Errorf("%d orders on a SKU of 10 units, want 10", sold)
	}
	groups, orders, fallbacks := s.GroupStats()
	if orders <= groups {
		t.Errorf("group commit grouped nothing: %d groups for %d orders", groups, orders)
	}
	if fallbacks != 0 {
		t.Errorf("%d groups fell back to lone creates; the group's own decisions should stand", fallbacks)
	}
	storetest.AuditOK(t, s)
}

// A create refused for stock does not keep its idempotency key: the same
// request succeeds once there is stock, as after a lone transaction's rollback.
func TestGroupRefusalGivesTheKeyBack(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 0, "none")
	p := storetest.Params("o1", order.Item{SKU: "none", Qty: 1})
	p.IdempotencyKey, p.RequestHash = "k", "h"
	if _, err := s.CreateOrder(context.Background(), p); !errors.Is(err, store.ErrInsufficientStock) {
		t.Fatalf("no stock: %v, want ErrInsufficientStock", err)
	}
	storetest.Stock(t, s, 1, "none")
	res, err := s.CreateOrder(context.Background(), p)
	if err != nil || res.Replayed || res.Order.ID != "o1" {
		t.Fatalf("retry with stock: %+v, %v; want o1 created", res, err)
	}
	storetest.AuditOK(t, s)
}

// An order the server refuses (a CHECK constraint: a negative amount) sends
// its group down the lone path: the others are created, it alone gets the
// server's error. An existing order id no longer does: the group reads which
// of its ids exist and answers ErrOrderExists itself (see
// TestGroupRetriedCreateIsOrderExists); it must still answer so here.
func TestGroupRefusedByTheServerFallsBackToLoneCreates(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 1000, "a")
	storetest.Create(t, s, "taken", "a")
	bad := storetest.Params("bad", order.Item{SKU: "a", Qty: 1})
	bad.AmountCents = -1
	ps := []store.CreateOrderParams{storetest.Params("taken", order.Item{SKU: "a", Qty: 1}), bad}
	for i := range 30 {
		ps = append(ps, storetest.Params(fmt.Sprintf("n%02d", i), order.Item{SKU: "a", Qty: 1}))
	}
	_, errs := storetest.CreateAll(s, ps)
	if !errors.Is(errs[0], store.ErrOrderExists) {
		t.Errorf("taken: %v, want ErrOrderExists", errs[0])
	}
	if pe := (*pgconn.PgError)(nil); !errors.As(errs[1], &pe) || pe.Code != "23514" {
		t.Errorf("bad: %v, want the server's check violation", errs[1])
	}
	for i, err := range errs[2:] {
		if err != nil {
			t.Errorf("%s: %v", ps[i+2].ID, err)
		}
	}
	if _, _, fallbacks := s.GroupStats(); fallbacks == 0 {
		t.Error("no group fell back, yet one held an order the server refuses")
	}
	if k, err := s.GetSKU(context.Background(), "a"); err != nil || k.Locked != 31 {
		t.Errorf("sku: %+v %v, want 31 units locked (taken once, n00…n29)", k, err)
	}
	storetest.AuditOK(t, s)
}

// create_group=1 in the URL turns group commit off; a bad value is refused.
func TestCreateGroupFromURL(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := openURL(t, u+"&create_group=1", nil)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, s, 100, "a")
	var ps []store.CreateOrderParams
	for i := range 20 {
		ps = append(ps, storetest.Params(fmt.Sprintf("o%02d", i), order.Item{SKU: "a", Qty: 1}))
	}
	for i, err := range func() []error { _, e := storetest.CreateAll(s, ps); return e }() {
		if err != nil {
			t.Errorf("%s: %v", ps[i].ID, err)
		}
	}
	if groups, orders, _ := s.GroupStats(); groups != 0 || orders != 0 {
		t.Errorf("create_group=1: %d groups of %d orders, want none", groups, orders)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		_, err := postgres.Open(context.Background(), postgres.Config{URL: u + "&create_group=" + bad})
		if err == nil || !strings.Contains(err.Error(), "create_group") {
			t.Errorf("create_group=%s: %v, want an error naming create_group", bad, err)
		}
	}
}

// BenchmarkCreateOrder creates orders from 16 goroutines, each with one item
// of one of 1,000 SKUs (the shape of scripts/pgbench_create.sql) or, for
// hot, all on one SKU; lone is one transaction per order (create_group=1),
// group is group commit. It reports orders/s.
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench CreateOrder -benchtime 20000x ./store/postgres/
func BenchmarkCreateOrder(b *testing.B) {
	for _, mode := range []string{"lone", "group"} {
		for _, skus := range []int{1000, 1} {
			name := fmt.Sprintf("%s/skus=%d", mode, skus)
			b.Run(name, func(b *testing.B) { benchCreate(b, mode == "group", skus) })
		}
	}
}

func benchCreate(b *testing.B, group bool, skus int) {
	u := newSchema(b)
	if !group {
		u += "&create_group=1"
	}
	s, err := postgres.Open(context.Background(), postgres.Config{URL: u})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	for i := range skus {
		storetest.Stock(b, s, int64(b.N)+1, fmt.Sprintf("sku-%04d", i))
	}
	var mu sync.Mutex
	next := 0
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			i := next
			next++
			mu.Unlock()
			_, err := s.CreateOrder(context.Background(), store.CreateOrderParams{
				ID: fmt.Sprintf("bench-%08d", i), AmountCents: 1000, Currency: "USD", Timeout: 15 * time.Minute,
				Items: []order.Item{{SKU: fmt.Sprintf("sku-%04d", i%skus), Qty: 1}},
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	if group {
		groups, orders, fallbacks := s.GroupStats()
		if groups > 0 {
			b.ReportMetric(float64(orders)/float64(groups), "orders/group")
		}
		if fallbacks > 0 {
			b.Errorf("%d groups fell back", fallbacks)
		}
	}
}

// A create sent again (same id, no idempotency key) after its first try took
// the last unit is answered ErrOrderExists, as a lone create is — decided in
// the group, which reads the ids it is given that exist, not refused for the
// stock the first try took.
func TestGroupRetriedCreateIsOrderExists(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 1, "last")
	p := storetest.Params("o1", order.Item{SKU: "last", Qty: 1})
	if _, err := s.CreateOrder(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOrder(context.Background(), p); !errors.Is(err, store.ErrOrderExists) {
		t.Fatalf("sent again: %v, want ErrOrderExists", err)
	}
	if groups, _, fallbacks := s.GroupStats(); groups != 2 || fallbacks != 0 {
		t.Errorf("%d groups, %d fallbacks: want both creates decided in a group of their own", groups, fallbacks)
	}
	if k, err := s.GetSKU(context.Background(), "last"); err != nil || k.Available != 0 || k.Locked != 1 {
		t.Errorf("sku: %+v %v, want the one unit locked once", k, err)
	}
	storetest.AuditOK(t, s)
}

// A SKU row held by another transaction (an operator's UPDATE, a long
// cancel) holds up only the creates that need it: the group that waits for
// it gives up after groupLockWait and its orders go one by one, so the
// groups queued behind it — creates of other SKUs — are committed while the
// row is still held. Before, one group in flight waited for the row, and
// every create behind it with it (29.7 s seen).
func TestAHeldSKURowHoldsUpOnlyItsOwnCreates(t *testing.T) {
	t.Parallel()
	s, u := open(t, nil)
	ctx := context.Background()
	storetest.Stock(t, s, 100, "held", "free")
	holder, err := connect(t, u).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT sku FROM lapse_skus WHERE sku = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	heldDone := make(chan error, 1)
	go func() {
		_, err := s.CreateOrder(ctx, storetest.Params("needs-held", order.Item{SKU: "held", Qty: 1}))
		heldDone <- err
	}()
	var ps []store.CreateOrderParams
	for i := range 20 {
		ps = append(ps, storetest.Params(fmt.Sprintf("free-%02d", i), order.Item{SKU: "free", Qty: 1}))
	}
	freeDone := make(chan []error, 1)
	go func() { _, errs := storetest.CreateAll(s, ps); freeDone <- errs }()
	select {
	case errs := <-freeDone:
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: %v", ps[i].ID, err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("creates of another SKU still waiting after 10 s while one SKU row is held")
	}
	select {
	case err := <-heldDone:
		t.Fatalf("the create that needs the held row finished while it is held: %v", err)
	default:
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-heldDone:
		if err != nil {
			t.Fatalf("needs-held, once the row is free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the create that needed the held row did not finish once it was free")
	}
	storetest.AuditOK(t, s)
}
