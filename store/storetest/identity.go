package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
)

// testIdentity: a store that names its data (store.Identified, which
// fences RabbitMQ timer prefixes by deployment) names it the same way every
// time, and another database gets another name.
func testIdentity(t *testing.T, newStore Factory) {
	ctx := context.Background()
	a, ok := newStore(t, clock.Real{}).(store.Identified)
	if !ok {
		t.Skip("the store does not name its data")
	}
	first, err := a.Identity(ctx)
	if err != nil || first == "" || !strings.Contains(first, ":") {
		t.Fatalf("Identity: %q, %v; want kind:time", first, err)
	}
	if again, err := a.Identity(ctx); err != nil || again != first {
		t.Fatalf("Identity again: %q, %v; want %q", again, err, first)
	}
	b := newStore(t, clock.Real{}).(store.Identified)
	if other, err := b.Identity(ctx); err != nil || other == first {
		t.Fatalf("another database's Identity: %q, %v; want one of its own (not %q)", other, err, first)
	}
}
