package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// createAll runs every create at once (released together) and returns each
// one's result and error, position by position.
func createAll(t *testing.T, s store.Store, ps []store.CreateOrderParams) ([]store.CreateOrderResult, []error) {
	t.Helper()
	res, errs := make([]store.CreateOrderResult, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = s.CreateOrder(context.Background(), p)
		}()
	}
	close(start)
	wg.Wait()
	return res, errs
}

func params(id string, items ...order.Item) store.CreateOrderParams {
	return store.CreateOrderParams{ID: id, Items: items, AmountCents: 100, Currency: "EUR", Timeout: time.Hour}
}

// Creates committed in groups give every caller the answer a transaction of
// its own would: exactly the stock there is is sold, the rest refused, and
// retries with one key get one order.
func TestGroupCommitAnswersEachCreateAsAlone(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 10, "scarce")
	storetest.Stock(t, s, 1000, "plenty")

	var ps []store.CreateOrderParams
	for i := range 60 {
		ps = append(ps, params(fmt.Sprintf("s%02d", i), order.Item{SKU: "scarce", Qty: 1}, order.Item{SKU: "plenty", Qty: 2}))
	}
	// Ten requests, each sent three times with the same key and body.
	for i := range 10 {
		for r := range 3 {
			p := params(fmt.Sprintf("k%02d-%d", i, r), order.Item{SKU: "plenty", Qty: 1})
			p.IdempotencyKey, p.RequestHash = fmt.Sprintf("key-%02d", i), "hash"
			ps = append(ps, p)
		}
	}
	res, errs := createAll(t, s, ps)

	sold, refused := 0, 0
	for i := range 60 {
		switch {
		case errs[i] == nil:
			sold++
		case errors.Is(errs[i], store.ErrInsufficientStock):
			refused++
			if !strings.Contains(errs[i].Error(), `"scarce"`) {
				t.Errorf("%s refused for the wrong SKU: %v", ps[i].ID, errs[i])
			}
		default:
			t.Errorf("%s: %v", ps[i].ID, errs[i])
		}
	}
	if sold != 10 || refused != 50 {
		t.Errorf("scarce SKU: %d sold, %d refused; want 10 and 50", sold, refused)
	}
	for i := range 10 {
		ids, replays := map[string]bool{}, 0
		for r := range 3 {
			j := 60 + 3*i + r
			if errs[j] != nil {
				t.Fatalf("key-%02d try %d: %v", i, r, errs[j])
			}
			ids[res[j].Order.ID] = true
			if res[j].Replayed {
				replays++
			}
		}
		if len(ids) != 1 || replays != 2 {
			t.Errorf("key-%02d: orders %v, %d replays; want one order and 2 replays", i, ids, replays)
		}
	}
	plenty := 10*2 + 10 // the scarce orders' 2 each, one per key
	sc, err := s.GetSKU(context.Background(), "scarce")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := s.GetSKU(context.Background(), "plenty")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Available != 0 || sc.Locked != 10 {
		t.Errorf("scarce: %+v, want 0 available, 10 locked", sc)
	}
	if pl.Available != int64(1000-plenty) || pl.Locked != int64(plenty) {
		t.Errorf("plenty: %+v, want %d available, %d locked", pl, 1000-plenty, plenty)
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

// One id sent twice at once, with different bodies: one order, one
// ErrOrderExists, whether the two meet in one group or in two.
func TestGroupOneIDTwice(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 100, "a")
	for round := range 5 {
		id := fmt.Sprintf("twice-%d", round)
		ps := []store.CreateOrderParams{params(id, order.Item{SKU: "a", Qty: 1}), params(id, order.Item{SKU: "a", Qty: 3})}
		for i := range 8 { // company, so the two may share a group
			ps = append(ps, params(fmt.Sprintf("%s-n%d", id, i), order.Item{SKU: "a", Qty: 1}))
		}
		_, errs := createAll(t, s, ps)
		dup := 0
		for i, err := range errs {
			switch {
			case i < 2 && errors.Is(err, store.ErrOrderExists):
				dup++
			case err != nil:
				t.Errorf("%s: %v", ps[i].ID, err)
			}
		}
		if dup != 1 {
			t.Errorf("%s: %d refused as existing, want 1", id, dup)
		}
	}
	storetest.AuditOK(t, s)
}

// A create refused for stock does not keep its idempotency key: the same
// request succeeds once there is stock, as after a lone transaction's rollback.
func TestGroupRefusalGivesTheKeyBack(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 0, "none")
	p := params("o1", order.Item{SKU: "none", Qty: 1})
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

// An order the server refuses (its id exists) sends its group down the lone
// path: the others are created, it alone gets ErrOrderExists.
func TestGroupRefusedByTheServerFallsBackToLoneCreates(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	storetest.Stock(t, s, 1000, "a")
	storetest.Create(t, s, "taken", "a")
	ps := []store.CreateOrderParams{params("taken", order.Item{SKU: "a", Qty: 1})}
	for i := range 30 {
		ps = append(ps, params(fmt.Sprintf("n%02d", i), order.Item{SKU: "a", Qty: 1}))
	}
	_, errs := createAll(t, s, ps)
	if !errors.Is(errs[0], store.ErrOrderExists) {
		t.Errorf("taken: %v, want ErrOrderExists", errs[0])
	}
	for i, err := range errs[1:] {
		if err != nil {
			t.Errorf("%s: %v", ps[i+1].ID, err)
		}
	}
	if _, _, fallbacks := s.GroupStats(); fallbacks == 0 {
		t.Error("no group fell back, yet one held an existing id")
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
		ps = append(ps, params(fmt.Sprintf("o%02d", i), order.Item{SKU: "a", Qty: 1}))
	}
	for i, err := range func() []error { _, e := createAll(t, s, ps); return e }() {
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
