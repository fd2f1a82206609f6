package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Bounds of the operators' view of the stock tasks (GET /v1/tasks, POST
// /v1/tasks/retry), as for events.
const (
	// DefaultTasksLimit is the page size of ListTasks when none is given.
	DefaultTasksLimit = 100
	// MaxTasksLimit is the largest page ListTasks serves.
	MaxTasksLimit = 500
	// MaxRetryTaskIDs is the most task ids one RetryTasks names.
	MaxRetryTaskIDs = 1000
)

// TaskPage is one page of stock tasks, in id order.
type TaskPage struct {
	Tasks []order.StockTask
	// NextAfter is the After of the next page; "" when this page is the last.
	NextAfter string
}

// ListTasks returns a page of the stock tasks not DONE — with p.Dead only
// the DEAD ones, with p.OrderID every task of that order — for operators
// looking at what the inventory has not applied (GET /v1/tasks). A zero
// p.Limit is DefaultTasksLimit; p.After is the NextAfter of the previous page.
func (s *Service) ListTasks(ctx context.Context, p store.ListTasksParams) (TaskPage, error) {
	if err := validPage(p, MaxTasksLimit, maxIDLen); err != nil {
		return TaskPage{}, err
	}
	return PageTasks(ctx, s.store, p)
}

// PageTasks reads one page of st's stock tasks. ListTasks serves it after
// checking p; `lapse tasks list`, which opens the store itself, calls it
// directly.
func PageTasks(ctx context.Context, st store.Tasks, p store.ListTasksParams) (TaskPage, error) {
	ts, next, err := pageByID(ctx, p, DefaultTasksLimit, st.ListTasks, func(t order.StockTask) string { return t.ID })
	return TaskPage{Tasks: ts, NextAfter: next}, err
}

// RetryTasks makes DEAD stock tasks PENDING and due at once — those p.IDs
// names, or with p.AllDead every DEAD one — their failures and age counted
// afresh, and returns how many. An id that names no DEAD task is not an
// error: the count tells. The dispatcher is woken.
func (s *Service) RetryTasks(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return s.retryDead(ctx, p, deadWork{noun: "task", maxIDs: MaxRetryTaskIDs, idLen: maxIDLen, retry: s.store.RetryTasks,
		wake: func() {
			if s.dispatch != nil {
				s.dispatch.Notify()
			}
		},
		logged: "inventory: dead stock tasks retried"})
}
