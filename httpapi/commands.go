package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The operators' view of order-service mode's cancel commands
// (docs/order-service.md): the commands the order service has not answered
// for good, and the DEAD ones that wait for an operator to send them again
// or give up on them. Like the stock tasks'.

// listCommands is GET /v1/commands?dead=&order_id=&limit=&after=.
func (s *server) listCommands(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := store.ListTasksParams{OrderID: q.Get("order_id"), After: q.Get("after")}
	var err error
	if p.Dead, err = deadParam(q); err != nil {
		return err
	}
	if p.Limit, err = limitParam(q, lapse.MaxCommandsLimit); err != nil {
		return err
	}
	page, err := s.svc.ListCommands(r.Context(), p)
	if err != nil {
		return err
	}
	out := struct {
		Commands []order.Command `json:"commands"`
		// NextAfter is left out on the last page.
		NextAfter string `json:"next_after,omitempty"`
	}{Commands: page.Commands, NextAfter: page.NextAfter}
	if out.Commands == nil {
		out.Commands = []order.Command{}
	}
	return writeJSON(w, http.StatusOK, out)
}

// deadCommandsBody is the body of POST /v1/commands/retry and
// /v1/commands/purge: {"ids": […]} or {"dead": true}, as the tasks' retry.
type deadCommandsBody struct {
	IDs  []string `json:"ids"`
	Dead *bool    `json:"dead"`
}

func decodeDeadCommands(r *http.Request, verb string) (store.RetryTasksParams, error) {
	body, err := readBody(r)
	if err != nil {
		return store.RetryTasksParams{}, err
	}
	var b deadCommandsBody
	if err := decodeStrict(body, &b); err != nil {
		return store.RetryTasksParams{}, err
	}
	if err := deadSelection(verb, "command", b.IDs, b.Dead); err != nil {
		return store.RetryTasksParams{}, err
	}
	return store.RetryTasksParams{IDs: b.IDs, AllDead: b.Dead != nil}, nil
}

// retryCommands is POST /v1/commands/retry: {"ids": […]} or {"dead": true}.
func (s *server) retryCommands(w http.ResponseWriter, r *http.Request) error {
	p, err := decodeDeadCommands(r, "retry")
	if err != nil {
		return err
	}
	n, err := s.svc.RetryCommands(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"retried": n})
}

// purgeCommands is POST /v1/commands/purge: {"ids": […]} or {"dead": true}.
func (s *server) purgeCommands(w http.ResponseWriter, r *http.Request) error {
	p, err := decodeDeadCommands(r, "purge")
	if err != nil {
		return err
	}
	n, err := s.svc.PurgeCommands(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"purged": n})
}
