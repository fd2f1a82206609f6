package store

import (
	"context"
	"time"
)

// Retention bounds the tables (lapse serve --order-retention,
// --task-retention): finished orders are deleted with every row that
// belongs to them, and finished tasks that no order needs any more, in
// small transactions, one instance at a time.
//
// An order is finished when it is PAID or CANCELLED, no attempt of it owes
// money (refund_required false, no attempt REFUND_REQUIRED or still
// PENDING), none of its stock tasks, order-service commands or refunds is
// not DONE, every one of its events was fanned out and delivered to every
// sink (no delivery row left, dead ones included), and no hook failure is
// recorded for it. Open, flagged or undelivered orders are never deleted,
// however old.
//
// The stock counters (available, locked, sold) are never touched: the
// units of the ledger rows deleted are added to per-SKU carried totals in
// the deleting transaction, which the audit adds to the ledger rows left.
type Retention interface {
	// PruneOrders deletes up to Limit orders finished (paid_at or
	// cancelled_at) before Before, by the store's clock Now - Age, with
	// their rows, in one transaction. Turn=false: another instance holds
	// the retention turn, and nothing was done.
	PruneOrders(ctx context.Context, p PruneOrdersParams) (PruneResult, error)
	// PruneTasks deletes up to Limit DONE rows finished (done_at) more
	// than Age ago, by the store's clock, of each of the stock tasks,
	// order-service commands and refunds that no order reads any more:
	// a stock task or refund whose order is gone (the audit checks the
	// others against their orders), and any DONE command. DEAD rows are
	// never deleted. Turn=false as for PruneOrders.
	PruneTasks(ctx context.Context, p PruneTasksParams) (PruneResult, error)
	// OldestFinished reads the earliest finish time (paid_at, cancelled_at)
	// of an order still kept; ok=false when no finished order is kept.
	OldestFinished(ctx context.Context) (oldest, now time.Time, ok bool, err error)
}

// PruneOrdersParams is one batch of PruneOrders.
type PruneOrdersParams struct {
	// Age: orders finished more than Age ago go. More than 0.
	Age time.Duration
	// Limit is the most orders deleted (1 to 10000).
	Limit int
	// AttemptedAge, when longer than Age, is how long an order cancelled
	// after a payment attempt is kept at least: the service queries the
	// gateway about it once more ConfirmAfter after the cancel (a payment
	// that succeeded after all is owed back), and an order deleted before
	// that would take the news of the money with it.
	AttemptedAge time.Duration
}

// PruneTasksParams is one batch of PruneTasks.
type PruneTasksParams struct {
	// Age: DONE rows finished more than Age ago go. More than 0.
	Age time.Duration
	// Limit is the most rows deleted per table (1 to 10000).
	Limit int
}

// PruneResult is what a batch of retention deleted.
type PruneResult struct {
	// Turn is false when another instance held the retention turn: the
	// batch did nothing.
	Turn bool
	// Orders is how many orders were deleted (PruneOrders).
	Orders int
	// Deleted counts the rows deleted per table, named without the lapse_
	// prefix (order_items, stock_ledger, payments, …, orders).
	Deleted map[string]int64
}

// Rows is the total of Deleted.
func (r PruneResult) Rows() int64 {
	var n int64
	for _, k := range r.Deleted {
		n += k
	}
	return n
}
