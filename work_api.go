package lapse

import (
	"context"

	"github.com/lapsehq/lapse/store"
)

// The steps the operators' views of dead work share — stock tasks, cancel
// commands and refunds, each a store table keyed by id with a dispatcher
// that sends it: a page in id order, and a retry of the DEAD ones that
// wakes the dispatcher. Each kind supplies its words and its store
// methods; the steps are written here once.

// validPage checks a page request of a listing keyed by id: a limit up to
// max, an after of at most idLen bytes (the longest id of the kind), an
// order id that can be one.
func validPage(p store.ListTasksParams, max, idLen int) error {
	if p.Limit < 0 || p.Limit > max {
		return invalid("limit", "must be between 1 and %d", max)
	}
	if len(p.After) > idLen || !plainText(p.After) {
		return invalid("after", "want the next_after of the previous page")
	}
	if p.OrderID != "" && (len(p.OrderID) > maxIDLen || !idRE.MatchString(p.OrderID)) {
		return invalid("order_id", "want an order id")
	}
	return nil
}

// pageByID reads one page of a listing keyed by id: p.Limit items (def
// when zero) and the After of the next page, "" when this one is the last.
func pageByID[T any](ctx context.Context, p store.ListTasksParams, def int,
	list func(context.Context, store.ListTasksParams) ([]T, error), id func(T) string) ([]T, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = def
	}
	p.Limit = limit + 1 // one more says whether another page follows
	items, err := list(ctx, p)
	if err != nil {
		return nil, "", err
	}
	if len(items) <= limit {
		return items, "", nil
	}
	return items[:limit], id(items[limit-1]), nil
}

// deadWork is one kind of work whose DEAD items an operator retries.
type deadWork struct {
	noun   string // "task": in messages, and the log's count ("tasks")
	maxIDs int    // the most ids one retry names
	idLen  int    // the longest id of the kind
	retry  func(context.Context, store.RetryTasksParams) (int64, error)
	wake   func() // wakes this instance's dispatcher, if it runs one
	logged string // the log line of a retry that found some
}

// retryDead checks what p names, retries those DEAD items in the store,
// and when some were, wakes the dispatcher and logs it.
func (s *Service) retryDead(ctx context.Context, p store.RetryTasksParams, w deadWork) (int64, error) {
	if err := validRetry(w.noun, p.IDs, p.AllDead, w.maxIDs, w.idLen, ""); err != nil {
		return 0, err
	}
	n, err := w.retry(ctx, p)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		w.wake()
		s.log.Info(w.logged, w.noun+"s", n, "all_dead", p.AllDead, "ids", len(p.IDs))
	}
	return n, nil
}
