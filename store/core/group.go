package core

// Group commit of creates.
//
// What a create costs a database with durable commits is mostly per
// transaction (BEGIN, round trips, a COMMIT that waits for its flush), not
// per row. So creates that arrive while others are being committed are
// committed together. Groups form in internal/group: one group commits at a
// time, the next takes everything that arrived meanwhile, up to
// Config.CreateGroup; under light load a group holds one order and nothing
// waits for a timer.
//
// Three ways to run a group, one outcome:
//   - savepoints (any driver): each create of the group runs createIn behind
//     a savepoint of its own, in arrival order, so each sees what the ones
//     before it wrote and an order that fails is rolled back alone;
//   - pipelined (a driver whose ExecutorTx is a GroupExecutor, PostgreSQL):
//     one round trip takes the keys, finds the existing ids and locks the SKU
//     rows; Admit decides in Go with the checks of createIn, in its order;
//     a second round trip writes every accepted order set-based;
//   - a group of one, under light load, on a driver that sends a create in
//     one round trip (CreateExecutor, PostgreSQL): createIn behind the
//     savepoint that round trip carries — BEGIN and the create in one round
//     trip, then COMMIT, where a pipelined group takes five.
//
// No guarantee of a lone create is weakened: a caller gets its order only
// after the COMMIT that holds it; a refused order writes nothing (its key is
// given back, as a rollback would); a key another request holds, a key or
// id repeated within the group, and any statement the server refuses send
// the orders concerned through the lone path, which gives each its own answer.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/lapsehq/lapse/internal/group"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// createCall is one CreateOrder waiting for its group.
type createCall struct {
	ctx  context.Context
	p    store.CreateOrderParams // Items in SKU order
	res  store.CreateOrderResult
	err  error
	done chan struct{}
}

func (c *createCall) finish(res store.CreateOrderResult, err error) {
	if err != nil {
		err = fmt.Errorf("create order %s: %w", c.p.ID, err)
	}
	c.res, c.err = res, err
	close(c.done)
}

// grouper queues creates and commits them in groups.
type grouper struct {
	s     *Store
	queue *group.Queue[*createCall]

	groups, grouped, fallbacks atomic.Int64
}

func newGrouper(s *Store, size int) *grouper {
	g := &grouper{s: s}
	g.queue = group.New(size, g.run)
	return g
}

func (g *grouper) create(ctx context.Context, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	c := &createCall{ctx: ctx, p: p, done: make(chan struct{})}
	g.queue.Add(c)
	// Not also on ctx.Done(): the group may already be committing this
	// order, and a caller must not be told "failed" of an order that exists.
	// A group ends within group.Timeout.
	<-c.done
	return c.res, c.err
}

// run commits one group and answers its callers.
func (g *grouper) run(calls []*createCall) {
	var batch, alone []*createCall
	keys, ids := map[string]bool{}, map[string]bool{}
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.finish(store.CreateOrderResult{}, err)
			continue
		}
		k := c.p.IdempotencyKey
		if ids[c.p.ID] || (k != "" && keys[k]) {
			// A retry of a request in this group: it replays (or is refused)
			// once the first has committed.
			alone = append(alone, c)
			continue
		}
		ids[c.p.ID] = true
		if k != "" {
			keys[k] = true
		}
		batch = append(batch, c)
	}
	if len(batch) > 0 {
		ctx, cancel := group.Context(batch[0].ctx)
		out, err := g.commit(ctx, batch)
		cancel()
		switch {
		case err == nil:
			g.groups.Add(1)
			g.grouped.Add(int64(len(batch)))
			for i, c := range batch {
				if out[i].alone {
					alone = append(alone, c)
					continue
				}
				c.finish(out[i].res, out[i].err)
			}
		case g.s.d.Class(err) == ClassRefused || errors.Is(err, ErrGroupMismatch):
			// The transaction was rolled back and wrote nothing: a duplicate
			// order id, a value a constraint refuses… Each order alone gets
			// the answer that concerns it.
			g.fallbacks.Add(1)
			alone = append(batch, alone...)
		default:
			// The connection or the context failed: whether the COMMIT
			// happened is unknown, as it would be for a lone create.
			for _, c := range batch {
				c.finish(store.CreateOrderResult{}, err)
			}
		}
	}
	for _, c := range alone {
		go func() {
			res, err := g.s.createOne(c.ctx, c.p)
			c.res, c.err = res, err // createOne names the order already
			close(c.done)
		}()
	}
}

// outcome is what a group decided for one of its orders.
type outcome struct {
	res   store.CreateOrderResult
	err   error // refused, nothing of it written: the caller's answer
	alone bool  // take the lone path
}

// commit creates the orders of calls (ids and keys unique among them) in one
// transaction. An error means nothing was written.
func (g *grouper) commit(ctx context.Context, calls []*createCall) ([]outcome, error) {
	var out []outcome
	err := g.s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		var err error
		_, oneTrip := tx.ExecutorTx.(CreateExecutor)
		switch ge, ok := tx.ExecutorTx.(GroupExecutor); {
		case oneTrip && len(calls) == 1:
			out, err = g.one(ctx, tx, calls[0])
		case ok:
			out, err = g.pipelined(ctx, tx, ge, calls)
		default:
			out, err = g.savepoints(ctx, tx, calls)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// savepoints runs each create of the group behind a savepoint of its own.
func (g *grouper) savepoints(ctx context.Context, tx *Tx, calls []*createCall) ([]outcome, error) {
	out := make([]outcome, len(calls))
	for i, c := range calls {
		if err := tx.Savepoint(ctx); err != nil {
			return nil, fmt.Errorf("savepoint: %w", err)
		}
		out[i].res, out[i].err = g.s.createIn(ctx, tx, c.p)
		if out[i].err != nil && g.s.d.Class(out[i].err) == ClassRetry {
			// A deadlock or a serialization failure: the database may have
			// rolled back more than this create. The whole group runs again.
			return nil, out[i].err
		}
		if out[i].err != nil {
			if err := tx.RollbackToSavepoint(ctx); err != nil {
				return nil, fmt.Errorf("roll back to savepoint: %w", err)
			}
		}
		if err := tx.ReleaseSavepoint(ctx); err != nil {
			return nil, fmt.Errorf("release savepoint: %w", err)
		}
	}
	return out, nil
}

// one creates a group of one in one round trip (createSent), guarded as in
// a caller's transaction: a refusal is undone to the savepoint the round trip
// carried, answered as the order's own, and the empty transaction commits,
// as with savepoints. An error the server sent fails the group as a
// pipelined group's does: refused (a lock wait past a group's bound
// included), the order goes down the lone path for its own answer; a lost
// conflict runs the group again.
func (g *grouper) one(ctx context.Context, tx *Tx, c *createCall) ([]outcome, error) {
	tx.guard, tx.group = true, true
	res, err := g.s.createIn(ctx, tx, c.p)
	if err != nil && g.s.d.Class(err) != ClassUnknown {
		return nil, err
	}
	return []outcome{{res: res, err: err}}, nil
}

// pipelined creates the group in two round trips, deciding with Admit.
func (g *grouper) pipelined(ctx context.Context, tx *Tx, ge GroupExecutor, calls []*createCall) ([]outcome, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, err
	}
	ps := make([]store.CreateOrderParams, len(calls))
	la := LockGroupArgs{Now: now, IDs: make([]string, len(calls))}
	skus := map[string]bool{}
	for i, c := range calls {
		ps[i], la.IDs[i] = c.p, c.p.ID
		if k := c.p.IdempotencyKey; k != "" {
			la.Keys = append(la.Keys, Key{Key: k, RequestHash: c.p.RequestHash, OrderID: c.p.ID})
		}
		for _, it := range c.p.Items {
			skus[it.SKU] = true
		}
	}
	// Keys in byte order, so two groups sharing keys take them in one order.
	slices.SortFunc(la.Keys, func(a, b Key) int { return strings.Compare(a.Key, b.Key) })
	la.SKUs = slices.Sorted(maps.Keys(skus))
	st, err := ge.LockGroup(ctx, la)
	if err != nil {
		return nil, fmt.Errorf("lock the group's keys and SKUs: %w", err)
	}

	vs, take := Admit(ps, st)
	out := make([]outcome, len(calls))
	wa := WriteGroupArgs{Now: now}
	for i, v := range vs {
		switch {
		case v.Alone:
			out[i].alone = true
		case v.Err != nil:
			out[i].err = v.Err
			if k := ps[i].IdempotencyKey; k != "" {
				wa.GiveBack = append(wa.GiveBack, k)
			}
		default:
			o := ps[i].NewOrder(now)
			wa.Orders = append(wa.Orders, o)
			out[i].res = store.CreateOrderResult{Order: o}
		}
	}
	if len(wa.Orders) == 0 && len(wa.GiveBack) == 0 {
		return out, nil
	}
	wa.SKUs = slices.Sorted(maps.Keys(take))
	wa.Qtys = make([]int64, len(wa.SKUs))
	for i, sku := range wa.SKUs {
		wa.Qtys[i] = take[sku]
	}
	if len(wa.Orders) > 0 {
		if wa.Effects, err = NewEffects(now, MoveReserve, order.EventCreated, wa.Orders...); err != nil {
			return nil, err
		}
		wa.Effects = tx.s.told(wa.Effects)
	}
	if err := ge.WriteGroup(ctx, wa); err != nil {
		return nil, fmt.Errorf("write a group of %d orders: %w", len(wa.Orders), err)
	}
	return out, nil
}
