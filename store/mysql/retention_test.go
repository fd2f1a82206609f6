package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
)

// One instance at a time: while another transaction holds the retention
// turn, a batch does nothing and says so (Turn false), and takes the turn
// once it is free.
func TestRetentionTakesTheTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := open(t, clock.Real{})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id int
	if err := tx.QueryRowContext(ctx, `SELECT id FROM lapse_retention_turn FOR UPDATE`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for name, prune := range map[string]func() (store.PruneResult, error){
		"orders": func() (store.PruneResult, error) {
			return s.PruneOrders(ctx, store.PruneOrdersParams{Age: time.Hour, Limit: 10})
		},
		"tasks": func() (store.PruneResult, error) {
			return s.PruneTasks(ctx, store.PruneTasksParams{Age: time.Hour, Limit: 10})
		},
	} {
		if res, err := prune(); err != nil || res.Turn {
			t.Errorf("prune %s while another holds the turn: %+v, %v; want no turn", name, res, err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.PruneOrders(ctx, store.PruneOrdersParams{Age: time.Hour, Limit: 10}); err != nil || !res.Turn {
		t.Errorf("prune once the turn is free: %+v, %v", res, err)
	}
}
