package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// hearing is what a ListenDue of a test heard, by order id.
type hearing struct {
	mu    sync.Mutex
	heard map[string][]time.Time
	ready chan struct{}
	done  chan error
}

// listen runs s.ListenDue until the test ends, and waits until it listens.
func listen(t *testing.T, s *postgres.Store) *hearing {
	t.Helper()
	h := &hearing{heard: map[string][]time.Time{}, ready: make(chan struct{}, 8), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		h.done <- s.ListenDue(ctx, func() { h.ready <- struct{}{} }, func(key string, at time.Time) {
			h.mu.Lock()
			h.heard[key] = append(h.heard[key], at)
			h.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("ListenDue ended with %v, want nil when its context ends", err)
		}
	})
	select {
	case <-h.ready:
	case err := <-h.done:
		t.Fatalf("ListenDue: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("ListenDue never listened")
	}
	return h
}

// of returns what was heard of id.
func (h *hearing) of(id string) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heard[id]
}

// waitHeard waits until id was heard.
func (h *hearing) waitHeard(t *testing.T, id string) []time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if at := h.of(id); len(at) > 0 {
			return at
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never heard", id)
	return nil
}

// The deadlines a transaction sets are heard when it commits — a create in
// a caller's transaction, an extend, every order of a group commit — and
// never those of a transaction that rolls back. A store in another schema
// hears none of them.
func TestListenDueHearsCommitsNeverRollbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := embedded(t, clock.Real{})
	other, _ := embedded(t, clock.Real{})
	storetest.Stock(t, s, 1000, "tee")
	storetest.Stock(t, other, 10, "tee")
	h := listen(t, s)
	ho := listen(t, other)

	create := func(id string, commit bool) order.Order {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		res, err := s.CreateOrderTx(ctx, s.InTx(tx), store.CreateOrderParams{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
			AmountCents: 100, Currency: "EUR", Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		// The order is not heard before the commit.
		if got := h.of(id); len(got) != 0 {
			t.Fatalf("%s heard before its commit: %v", id, got)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return res.Order
	}
	create("rolled-back", false)
	kept := create("kept", true)
	if at := h.waitHeard(t, "kept"); !at[0].Equal(kept.CancelAfter) {
		t.Fatalf("kept heard due %v, want its cancel_after %v", at[0], kept.CancelAfter)
	}
	moved, err := s.Extend(ctx, store.ExtendParams{OrderID: "kept", ExpiresAt: time.Now().Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(h.of("kept")) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if at := h.of("kept"); len(at) != 2 || !at[1].Equal(moved.CancelAfter) {
		t.Fatalf("kept heard %v, want its create's deadline then its extend's %v", at, moved.CancelAfter)
	}

	// 200 creates at once, committed in groups: every one heard, with ids
	// as long as ids go.
	ps := make([]store.CreateOrderParams, 200)
	for i := range ps {
		ps[i] = storetest.Params(fmt.Sprintf("group-%03d-%s", i, strings.Repeat("x", 54)), order.Item{SKU: "tee", Qty: 1})
	}
	res, errs := storetest.CreateAll(s, ps)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %s: %v", ps[i].ID, err)
		}
	}
	for _, r := range res {
		if at := h.waitHeard(t, r.Order.ID); !at[0].Equal(r.Order.CancelAfter) {
			t.Fatalf("%s heard due %v, want %v", r.Order.ID, at[0], r.Order.CancelAfter)
		}
	}

	// Notifications come in commit order: once an order committed after
	// the rollback is heard, the rolled-back one never will be.
	create("sentinel", true)
	h.waitHeard(t, "sentinel")
	if got := h.of("rolled-back"); len(got) != 0 {
		t.Fatalf("a rolled-back create was heard: %v", got)
	}
	storetest.Create(t, other, "other-sentinel", "tee")
	ho.waitHeard(t, "other-sentinel")
	ho.mu.Lock()
	defer ho.mu.Unlock()
	if len(ho.heard) != 1 {
		t.Fatalf("the store of another schema heard %d orders, want only its own", len(ho.heard))
	}
}

// A listening connection that the server ends makes ListenDue return its
// error (the service listens again and plans from the store); listening
// again hears the next commit.
func TestListenDueReturnsWhenItsConnectionEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := open(t, clock.Real{})
	storetest.Stock(t, s, 10, "tee")
	h := listen(t, s)
	conn := connect(t, u)
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	var killed bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{"lapse_due:" + schema}.Sanitize()).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listening backend: %v %v", killed, err)
	}
	select {
	case err := <-h.done:
		if err == nil {
			t.Fatal("ListenDue returned nil after its connection ended, want the error")
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("ListenDue did not return after its connection ended")
	}
	again := listen(t, s)
	storetest.Create(t, s, "after", "tee")
	again.waitHeard(t, "after")
}

// A group's deadlines go in few notifications, each under PostgreSQL's
// 8000 bytes, and read back whole.
func TestNoticesPackDeadlines(t *testing.T) {
	t.Parallel()
	due := make([]store.Deadline, 200)
	base := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	for i := range due {
		due[i] = store.Deadline{OrderID: fmt.Sprintf("%03d-%s", i, strings.Repeat("y", 60)), CancelAfter: base.Add(time.Duration(i) * time.Millisecond)}
	}
	ps := postgres.Notices(due)
	if len(ps) < 2 || len(ps) > 3 {
		t.Fatalf("200 deadlines of 64-character ids in %d notifications, want 2 or 3", len(ps))
	}
	var got []store.Deadline
	for _, p := range ps {
		if len(p) >= 8000 {
			t.Fatalf("a notification of %d bytes", len(p))
		}
		postgres.ReadNotice(p, func(key string, at time.Time) { got = append(got, store.Deadline{OrderID: key, CancelAfter: at}) })
	}
	if len(got) != len(due) {
		t.Fatalf("read back %d deadlines, want %d", len(got), len(due))
	}
	for i := range due {
		if got[i].OrderID != due[i].OrderID || !got[i].CancelAfter.Equal(due[i].CancelAfter) {
			t.Fatalf("deadline %d read back as %+v, want %+v", i, got[i], due[i])
		}
	}
}

// A store with DisableDueNotify tells no one of its deadlines: its create
// is never heard, though a create of another store on the same schema,
// committed after it, is.
func TestDisableDueNotifyTellsNoOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := open(t, clock.Real{})
	quiet, err := postgres.Open(ctx, postgres.Config{URL: u, MaxConns: 2, DisableDueNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { quiet.Close() })
	storetest.Stock(t, s, 10, "tee")
	h := listen(t, s)
	storetest.Create(t, quiet, "quiet", "tee")
	if _, err := quiet.Extend(ctx, store.ExtendParams{OrderID: "quiet", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, s, "told", "tee")
	h.waitHeard(t, "told")
	if got := h.of("quiet"); len(got) != 0 {
		t.Fatalf("a store with DisableDueNotify was heard: %v", got)
	}
}
