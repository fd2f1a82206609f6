package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// CreateAll runs every create at once (released together) and returns each
// one's result and error, position by position.
func CreateAll(s store.Store, ps []store.CreateOrderParams) ([]store.CreateOrderResult, []error) {
	res, errs := make([]store.CreateOrderResult, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range ps {
		wg.Go(func() {
			<-start
			res[i], errs[i] = s.CreateOrder(context.Background(), p)
		})
	}
	close(start)
	wg.Wait()
	return res, errs
}

// Params is a create of the given items with the suite's timeout and grace.
func Params(id string, items ...order.Item) store.CreateOrderParams {
	return store.CreateOrderParams{ID: id, Items: items, AmountCents: 100, Currency: "EUR", Timeout: timeout, Grace: grace}
}

// testConcurrentCreates: creates sent at once, which a store may commit
// together (group commit), get the answers transactions of their own would
// give: exactly the stock there is is sold, retries with one key make one
// order, one id sent twice makes one order.
func testConcurrentCreates(t *testing.T, newStore Factory) {
	s := newStore(t, clock.Real{})
	Stock(t, s, 10, "scarce")
	Stock(t, s, 1000, "plenty")

	var ps []store.CreateOrderParams
	for i := range 60 {
		ps = append(ps, Params(fmt.Sprintf("s%02d", i), order.Item{SKU: "scarce", Qty: 1}, order.Item{SKU: "plenty", Qty: 2}))
	}
	for i := range 10 { // ten requests, each sent three times with one key and body
		for r := range 3 {
			p := Params(fmt.Sprintf("k%02d-%d", i, r), order.Item{SKU: "plenty", Qty: 1})
			p.IdempotencyKey, p.RequestHash = fmt.Sprintf("key-%02d", i), "hash"
			ps = append(ps, p)
		}
	}
	for i := range 5 { // five ids sent twice with different bodies
		id := fmt.Sprintf("twice-%d", i)
		ps = append(ps, Params(id, order.Item{SKU: "plenty", Qty: 1}), Params(id, order.Item{SKU: "plenty", Qty: 3}))
	}

	res, errs := CreateAll(s, ps)

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
	plenty := int64(10 * 2)
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
		plenty++
	}
	for i := range 5 {
		a, b := 90+2*i, 91+2*i
		switch {
		case errs[a] == nil && errors.Is(errs[b], store.ErrOrderExists):
			plenty++
		case errs[b] == nil && errors.Is(errs[a], store.ErrOrderExists):
			plenty += 3
		default:
			t.Errorf("%s sent twice: %v and %v, want one order and one ErrOrderExists", ps[a].ID, errs[a], errs[b])
		}
	}
	wantSKU(t, s, "scarce", 0, 10, 0)
	wantSKU(t, s, "plenty", 1000-plenty, plenty, 0)
	AuditOK(t, s)
}

// claimEachOnce is the step every claim's concurrency test shares: four
// claimers each call claim until it takes nothing, and the test fails
// unless together they took n distinct items (named by id), each once.
// took, when set, hears each batch a claimer took, on its goroutine (to
// check the batch, or settle it); an error it returns stops that claimer
// and fails the test.
func claimEachOnce[T any](t *testing.T, what string, n int, claim func() ([]T, error), id func(T) string, took func([]T) error) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				batch, err := claim()
				if err != nil {
					t.Errorf("claim %s: %v", what, err)
					return
				}
				if len(batch) == 0 {
					return
				}
				mu.Lock()
				for _, it := range batch {
					seen[id(it)]++
				}
				mu.Unlock()
				if took == nil {
					continue
				}
				if err := took(batch); err != nil {
					t.Errorf("claimed %s: %v", what, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct %s, want %d", len(seen), what, n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s %s claimed %d times", what, id, k)
		}
	}
}
