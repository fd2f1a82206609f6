package lapse

import (
	"context"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Bounds of the operators' view of order-service mode's cancel commands
// (GET /v1/commands, POST /v1/commands/retry, POST /v1/commands/purge), as
// for stock tasks.
const (
	// DefaultCommandsLimit is the page size of ListCommands when none is given.
	DefaultCommandsLimit = 100
	// MaxCommandsLimit is the largest page ListCommands serves.
	MaxCommandsLimit = 500
	// MaxCommandIDs is the most command ids one RetryCommands or
	// PurgeCommands names.
	MaxCommandIDs = 1000
)

// CommandPage is one page of cancel commands, in id order.
type CommandPage struct {
	Commands []order.Command
	// NextAfter is the After of the next page; "" when this page is the last.
	NextAfter string
}

// ListCommands returns a page of the cancel commands not DONE — with p.Dead
// only the DEAD ones, with p.OrderID every command of that order — for
// operators looking at what the order service has not answered for good
// (GET /v1/commands). It reads whatever the store holds, whether or not
// this service runs with an order service. A zero p.Limit is
// DefaultCommandsLimit; p.After is the NextAfter of the previous page.
func (s *Service) ListCommands(ctx context.Context, p store.ListTasksParams) (CommandPage, error) {
	if err := validPage(p, MaxCommandsLimit, maxIDLen); err != nil {
		return CommandPage{}, err
	}
	return PageCommands(ctx, s.store, p)
}

// PageCommands reads one page of st's cancel commands. ListCommands serves
// it after checking p; `lapse commands list`, which opens the store itself,
// calls it directly.
func PageCommands(ctx context.Context, st store.Commands, p store.ListTasksParams) (CommandPage, error) {
	cs, next, err := pageByID(ctx, p, DefaultCommandsLimit, st.ListCommands, func(c order.Command) string { return c.ID })
	return CommandPage{Commands: cs, NextAfter: next}, err
}

// RetryCommands makes DEAD cancel commands PENDING and due at once — those
// p.IDs names, or with p.AllDead every DEAD one — their failures and age
// counted afresh, and returns how many. A retried command goes out with its
// own id again, so the order service answers it as the same command. An id
// that names no DEAD command is not an error: the count tells. This
// instance's dispatcher, if it runs one, is woken.
func (s *Service) RetryCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	return s.retryDead(ctx, p, deadWork{noun: "command", maxIDs: MaxCommandIDs, idLen: maxIDLen, retry: s.store.RetryCommands,
		wake: func() {
			if s.commands != nil {
				s.commands.Notify()
			}
		},
		logged: "order service: dead cancel commands retried"})
}

// PurgeCommands deletes DEAD cancel commands — those p.IDs names, or with
// p.AllDead every DEAD one — and returns how many. Purging gives up asking:
// the orders stay CANCELLING (lapse does not decide an order the order
// service owns), and the audit goes on reporting each as a deadline with no
// final answer (commanded_unanswered). RetryCommands is what sends them
// again. An id that names no DEAD command is not an error: the count tells.
func (s *Service) PurgeCommands(ctx context.Context, p store.RetryTasksParams) (int64, error) {
	if err := validDead("purge", "command", p.IDs, p.AllDead, MaxCommandIDs, maxIDLen, ""); err != nil {
		return 0, err
	}
	n, err := s.store.PurgeCommands(ctx, p)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.log.Warn("order service: dead cancel commands purged; their orders stay CANCELLING", "commands", n, "all_dead", p.AllDead, "ids", len(p.IDs))
	}
	return n, nil
}

// HasOrderService reports whether the service runs in order-service mode
// (Config.OrderService).
func (s *Service) HasOrderService() bool { return s.commands != nil }
