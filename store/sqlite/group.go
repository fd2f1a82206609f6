package sqlite

// Group commit of creates. With synchronous=FULL every commit waits for an
// fsync, and SQLite has one writer: creates that arrive while others commit
// are run together in one transaction, each behind a savepoint of its own, in
// arrival order — so each sees what the ones before it wrote (a repeated
// idempotency key replays, a repeated id is refused, the stock left is the
// stock left) and an order that fails is rolled back to its savepoint alone.
// Every caller is answered after the one COMMIT. Groups form in
// internal/group: one at a time, the next taking all that arrived meanwhile.

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lapsehq/lapse/internal/group"
	"github.com/lapsehq/lapse/store"
)

// createCall is one CreateOrder waiting for its group.
type createCall struct {
	ctx  context.Context
	p    store.CreateOrderParams
	res  store.CreateOrderResult
	err  error
	done chan struct{}
}

func (s *Store) createGrouped(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	c := &createCall{ctx: ctx, p: p, done: make(chan struct{})}
	s.groups.Add(c)
	// Not also on ctx.Done(): the group may be committing this order, and a
	// caller must not be told "failed" of an order that exists.
	<-c.done
	if c.err != nil {
		return store.CreateOrderResult{}, fmt.Errorf("create order %s: %w", p.ID, c.err)
	}
	return c.res, nil
}

// createGroup commits the creates of calls in one transaction and answers
// every caller.
func (s *Store) createGroup(calls []*createCall) {
	var live []*createCall
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := group.Context(live[0].ctx)
	defer cancel()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		for _, c := range live {
			if _, err := tx.ExecContext(ctx, q.Get("savepoint")); err != nil {
				return fmt.Errorf("savepoint: %w", err)
			}
			c.res, c.err = s.createIn(ctx, tx, c.p)
			if c.err != nil {
				if _, err := tx.ExecContext(ctx, q.Get("rollback_to_savepoint")); err != nil {
					return fmt.Errorf("roll back to savepoint: %w", err)
				}
			}
			if _, err := tx.ExecContext(ctx, q.Get("release_savepoint")); err != nil {
				return fmt.Errorf("release savepoint: %w", err)
			}
		}
		return nil
	})
	if err == nil {
		s.groupsRun.Add(1)
		s.grouped.Add(int64(len(live)))
	}
	for _, c := range live {
		if err != nil { // nothing of the group was written
			c.res, c.err = store.CreateOrderResult{}, err
		}
		close(c.done)
	}
}
