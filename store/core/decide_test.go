package core

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

func params(id, key string, items ...order.Item) store.CreateOrderParams {
	return store.CreateOrderParams{ID: id, IdempotencyKey: key, Items: store.ItemsBySKU(items)}
}

// remote is an order whose stock a remote inventory holds.
func remote(id string, items ...order.Item) store.CreateOrderParams {
	p := params(id, "", items...)
	p.ReservationID = "res-" + id
	return p
}

func item(sku string, qty int64) order.Item { return order.Item{SKU: sku, Qty: qty} }

// Admit applies a lone create's checks in its order — key, id, stock by SKU
// in byte order — each order seeing what the ones before it took; an order
// whose stock a remote inventory holds is not checked against lapse's, and
// takes none of it.
func TestAdmit(t *testing.T) {
	st := GroupState{
		Claimed:   map[string]bool{"k-mine": true},
		Existing:  map[string]bool{"taken": true},
		Available: map[string]int64{"a": 2, "B": 1},
	}
	ps := []store.CreateOrderParams{
		params("o1", "", item("a", 1), item("B", 1)),  // fits: a 1 left, B 0 left
		params("o2", "", item("B", 1)),                // B is gone
		params("taken", "", item("a", 1)),             // exists, though a unit is left
		params("o3", "k-theirs", item("a", 1)),        // key held elsewhere: alone
		params("o4", "k-mine", item("a", 1)),          // takes the last a
		params("o5", "", item("a", 1), item("zz", 1)), // a is gone: the first short SKU in byte order is named
		params("taken", "", item("nope", 1)),          // exists beats short
		remote("r1", item("a", 5), item("nope", 1)),   // a remote inventory holds its stock
		remote("taken", item("a", 1)),                 // exists all the same
	}
	vs, take := Admit(ps, st)
	want := []struct {
		alone bool
		err   error
		sku   string
	}{
		{}, {err: store.ErrInsufficientStock, sku: `"B"`}, {err: store.ErrOrderExists}, {alone: true},
		{}, {err: store.ErrInsufficientStock, sku: `"a"`}, {err: store.ErrOrderExists},
		{}, {err: store.ErrOrderExists},
	}
	for i, w := range want {
		v := vs[i]
		if v.Alone != w.alone || !errors.Is(v.Err, w.err) || (w.err == nil) != (v.Err == nil) {
			t.Errorf("%s: %+v, want alone=%v err=%v", ps[i].ID, v, w.alone, w.err)
		}
		if w.sku != "" && (v.Err == nil || !strings.Contains(v.Err.Error(), w.sku)) {
			t.Errorf("%s: %v, want it to name sku %s", ps[i].ID, v.Err, w.sku)
		}
	}
	if take["a"] != 2 || take["B"] != 1 || len(take) != 2 {
		t.Errorf("take = %v, want a:2 B:1", take)
	}
}

// A StartPayment whose UPDATE matched nothing is explained against the
// transaction's now, never the row's status alone.
func TestExplainStartMiss(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		status  order.Status
		expires time.Time
		want    error
	}{
		{order.Paying, now.Add(time.Minute), nil},
		{order.Paying, now.Add(-time.Minute), nil},
		{order.Pending, now, store.ErrOrderExpired},
		{order.Pending, now.Add(-time.Millisecond), store.ErrOrderExpired},
		{order.Pending, now.Add(time.Millisecond), errTryAgain}, // a failure put it back: try again, locked
		{order.Paid, now.Add(time.Minute), store.ErrNotPending},
		{order.Cancelled, now.Add(time.Minute), store.ErrNotPending},
	}
	for _, c := range cases {
		got := explainStartMiss(order.Order{Status: c.status, ExpiresAt: c.expires}, now)
		if !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("%s expiring %v: %v, want %v", c.status, c.expires.Sub(now), got, c.want)
		}
	}
}

// A claim never reaches past now, whatever lag it is given.
func TestDueByNeverPastNow(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for lag, want := range map[time.Duration]time.Time{
		10 * time.Second: now.Add(-10 * time.Second),
		0:                now,
		-7 * time.Second: now,
	} {
		if got := dueBy(now, lag); !got.Equal(want) {
			t.Errorf("dueBy(now, %v) = %v, want %v", lag, got, want)
		}
	}
}

func TestPerSKUSumsInByteOrder(t *testing.T) {
	skus, qtys := PerSKU([]order.Order{
		{Items: []order.Item{item("b", 1), item("B", 2)}},
		{Items: []order.Item{item("a", 3), item("b", 4)}},
	})
	if want := []string{"B", "a", "b"}; !slices.Equal(skus, want) {
		t.Errorf("skus %v, want %v", skus, want)
	}
	if want := []int64{2, 3, 5}; !slices.Equal(qtys, want) {
		t.Errorf("qtys %v, want %v", qtys, want)
	}
}
