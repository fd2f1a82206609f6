package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/store"
)

// StatementStore is a store that counts the SQL statements it sends (the
// optional capability bench.StatementCounter).
type StatementStore interface {
	store.Store
	Statements() int64
}

// CountsStatements checks a store's statement counter: it stands still while
// the store is idle or only pinged, grows by at least one for a read, and by
// at least 3 (BEGIN, a write, COMMIT) and fewer than 30 for one create of two
// items. It returns that create's statements.
func CountsStatements(t testing.TB, s StatementStore) int64 {
	t.Helper()
	ctx := context.Background()
	Stock(t, s, 10, "count-a", "count-b")

	idle := s.Statements()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing to wait for: a pause in which a background statement, if the
	// store sent one, would show.
	time.Sleep(50 * time.Millisecond)
	if n := s.Statements(); n != idle {
		t.Errorf("idle and pinged, the count went from %d to %d", idle, n)
	}

	before := s.Statements()
	if _, err := s.GetSKU(ctx, "count-a"); err != nil {
		t.Fatal(err)
	}
	if n := s.Statements() - before; n < 1 {
		t.Errorf("a read counted %d statements, want at least 1", n)
	}

	before = s.Statements()
	Create(t, s, "count-1", "count-a", "count-b")
	n := s.Statements() - before
	if n < 3 || n >= 30 {
		t.Errorf("one create of two items counted %d statements, want 3 to 29", n)
	}
	return n
}
