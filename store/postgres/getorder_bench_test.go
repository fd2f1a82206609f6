package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// A read of one order asks for its commands too (one probe of the
// lapse_order_commands_order index) unless it is PENDING without a failed
// attempt: "get" is the whole read of a commanded order, "commands probe"
// that probe alone, on a table of 10,000 commands, and "get pending" the
// read of a PENDING order, which skips it.
func BenchmarkGetOrder(b *testing.B) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, _ := open(b, clk)
	ctx := context.Background()
	const n = 10000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("g-%05d", i)
		storetest.CreateCommanded(b, s, ids[i])
	}
	storetest.CreateCommanded(b, s, "g-pending")
	clk.Advance(time.Hour)
	for i := 0; i < n; i += 500 {
		if _, err := s.CancelDue(ctx, store.CancelDueParams{IDs: ids[i : i+500], Command: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("get", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			o, err := s.GetOrder(ctx, ids[i%n])
			if err != nil || len(o.Commands) != 1 {
				b.Fatalf("%+v, %v", o.Commands, err)
			}
		}
	})
	b.Run("get pending", func(b *testing.B) {
		for b.Loop() {
			if o, err := s.GetOrder(ctx, "g-pending"); err != nil || o.Commands != nil {
				b.Fatalf("%+v, %v", o.Commands, err)
			}
		}
	})
	b.Run("commands probe", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if cs, err := s.ListCommands(ctx, store.ListTasksParams{OrderID: ids[i%n], Limit: 20}); err != nil || len(cs) != 1 {
				b.Fatalf("%+v, %v", cs, err)
			}
		}
	})
}
