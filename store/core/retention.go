package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Retention (store.Retention): finished orders are deleted with every row
// that belongs to them, a batch per transaction. What is decided here is the
// order of the steps; each statement is the driver's (RetentionExecutor).
//
// A batch's transaction takes the retention turn (one batch at a time
// across instances, as the relay's fan-out turn), then locks the orders it
// will delete, skipping rows other transactions hold — it never waits on an
// order row. Every transition that could make a finished order unfinished
// again (a late payment success, a refund) holds the order's row first, so
// once the batch holds it the order stays finished. Then the units of the
// orders' ledger rows are added to the per-SKU carried totals, their SKU
// rows in byte order (the stock counters are never touched), and the rows
// of each table go, children first, the order rows last.
//
// Payment callback ids (lapse_payment_callbacks) are left to their own
// purge, an hour after they were seen (store.CallbackMemory): a payment
// report records its callback id before it locks the order, so deleting
// them here could wait on a report that waits on the batch's order row.

// RetentionExecutor is what a driver adds for retention: one statement per
// method.
type RetentionExecutor interface {
	// LockRetention takes the retention turn for the transaction, skipping
	// (false) if another transaction holds it.
	LockRetention(ctx context.Context) (bool, error)
	// LockFinished locks up to limit finished orders (store.Retention) of
	// status (PAID or CANCELLED) whose paid_at (cancelled_at) is before
	// before — a CANCELLED one with a payment attempt before
	// attemptedBefore too — the oldest first, skipping rows other
	// transactions hold, and returns their ids.
	LockFinished(ctx context.Context, status order.Status, before, attemptedBefore time.Time, limit int) ([]string, error)
	// CarryLedger adds the units of the ledger rows of the orders ids to
	// the carried totals of their SKUs, by action, and counts the orders
	// per SKU; the carried rows are written in SKU byte order, updated_at now.
	CarryLedger(ctx context.Context, ids []string, now time.Time) error
	// DeleteOwned deletes the rows of table (one of OwnedTables) that
	// belong to the orders ids and returns how many.
	DeleteOwned(ctx context.Context, table string, ids []string) (int64, error)
	// DeleteDone deletes up to limit DONE rows of table (one of
	// DoneTables) finished (done_at) before before that no order reads
	// (store.Retention.PruneTasks) and returns how many.
	DeleteDone(ctx context.Context, table string, before time.Time, limit int) (int64, error)
	// OldestFinished reads the earliest paid_at or cancelled_at of an order
	// still kept; ok=false when there is none.
	OldestFinished(ctx context.Context) (time.Time, bool, error)
}

// OwnedTables are the tables whose rows belong to an order, named without
// the lapse_ prefix, in the order a batch deletes them: children first
// (order_items and payments refer to the order), the order rows last. The
// outbox deliveries of a deleted order are none (it is finished only when
// every event was delivered), and its payment callbacks are left to their
// own purge (see above).
var OwnedTables = []string{
	"order_items", "stock_ledger", "payments", "stock_tasks", "order_commands",
	"refunds", "hook_failures", "outbox", "idempotency_keys", "orders",
}

// DoneTables are the tables of work rows PruneTasks trims (store.Retention).
var DoneTables = []string{"stock_tasks", "order_commands", "refunds"}

// ErrNoRetention: the store's driver does not implement retention.
var ErrNoRetention = errors.New("store: this store does not support retention")

func retentionOf(e any) (RetentionExecutor, error) {
	re, ok := e.(RetentionExecutor)
	if !ok {
		return nil, ErrNoRetention
	}
	return re, nil
}

// maxPrune bounds a batch.
const maxPrune = 10000

// onTurn validates a batch (what: "orders", "tasks"), then runs prune in
// one transaction on the store's clock holding the retention turn; an
// instance that finds the turn held returns Turn false and deletes nothing.
func (s *Store) onTurn(ctx context.Context, what string, age time.Duration, limit int,
	prune func(re RetentionExecutor, now time.Time, res *store.PruneResult) error) (store.PruneResult, error) {
	if age <= 0 || limit < 1 || limit > maxPrune {
		return store.PruneResult{}, fmt.Errorf("prune %s: age %s, limit %d: %w", what, age, limit, store.ErrInvalid)
	}
	var res store.PruneResult
	err := s.onClock(ctx, func(tx *Tx, now time.Time) error {
		res = store.PruneResult{} // fresh on every retry
		re, err := retentionOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		if res.Turn, err = re.LockRetention(ctx); err != nil || !res.Turn {
			if err != nil {
				err = fmt.Errorf("take the retention turn: %w", err)
			}
			return err
		}
		return prune(re, now, &res)
	})
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune %s: %w", what, err)
	}
	return res, nil
}

// PruneOrders implements store.Retention.
func (s *Store) PruneOrders(ctx context.Context, p store.PruneOrdersParams) (store.PruneResult, error) {
	return s.onTurn(ctx, "orders", p.Age, p.Limit, func(re RetentionExecutor, now time.Time, res *store.PruneResult) error {
		var ids []string
		for _, st := range []order.Status{order.Paid, order.Cancelled} {
			if len(ids) == p.Limit {
				break
			}
			some, err := re.LockFinished(ctx, st, now.Add(-p.Age), now.Add(-max(p.Age, p.AttemptedAge)), p.Limit-len(ids))
			if err != nil {
				return fmt.Errorf("lock finished %s orders: %w", st, err)
			}
			ids = append(ids, some...)
		}
		if len(ids) == 0 {
			return nil
		}
		slices.Sort(ids)
		if err := re.CarryLedger(ctx, ids, now); err != nil {
			return fmt.Errorf("carry the ledger of %d orders: %w", len(ids), err)
		}
		res.Deleted = make(map[string]int64, len(OwnedTables))
		for _, t := range OwnedTables {
			n, err := re.DeleteOwned(ctx, t, ids)
			if err != nil {
				return fmt.Errorf("delete the %s of %d orders: %w", t, len(ids), err)
			}
			res.Deleted[t] = n
		}
		res.Orders = int(res.Deleted["orders"])
		return nil
	})
}

// PruneTasks implements store.Retention: one transaction holding the
// retention turn (two instances' deletes of the same rows could otherwise
// lock them in different orders), a statement per table.
func (s *Store) PruneTasks(ctx context.Context, p store.PruneTasksParams) (store.PruneResult, error) {
	return s.onTurn(ctx, "tasks", p.Age, p.Limit, func(re RetentionExecutor, now time.Time, res *store.PruneResult) error {
		res.Deleted = make(map[string]int64, len(DoneTables))
		for _, t := range DoneTables {
			n, err := re.DeleteDone(ctx, t, now.Add(-p.Age), p.Limit)
			if err != nil {
				return fmt.Errorf("delete DONE %s: %w", t, err)
			}
			res.Deleted[t] = n
		}
		return nil
	})
}

// OldestFinished implements store.Retention.
func (s *Store) OldestFinished(ctx context.Context) (oldest, now time.Time, ok bool, err error) {
	err = s.withTx(ctx, TxOptions{ReadOnly: true}, func(tx *Tx) error {
		re, err := retentionOf(tx.ExecutorTx)
		if err != nil {
			return err
		}
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		oldest, ok, err = re.OldestFinished(ctx)
		return err
	})
	if err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("oldest finished order: %w", err)
	}
	return oldest, now, ok, nil
}
