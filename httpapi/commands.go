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
	p, err := listParams(r, lapse.MaxCommandsLimit)
	if err != nil {
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

// deadBody is the body of an operators' verb on dead work (POST
// /v1/tasks/retry, /v1/commands/retry and /purge, /v1/refunds/retry):
// {"ids": […]} or {"dead": true}.
type deadBody struct {
	IDs  []string `json:"ids"`
	Dead *bool    `json:"dead"`
}

// decodeDead reads a deadBody and checks it names ids or every dead one.
func decodeDead(r *http.Request, verb, what string) (store.RetryTasksParams, error) {
	body, err := readBody(r)
	if err != nil {
		return store.RetryTasksParams{}, err
	}
	var b deadBody
	if err := decodeStrict(body, &b); err != nil {
		return store.RetryTasksParams{}, err
	}
	if err := deadSelection(verb, what, b.IDs, b.Dead); err != nil {
		return store.RetryTasksParams{}, err
	}
	return store.RetryTasksParams{IDs: b.IDs, AllDead: b.Dead != nil}, nil
}

// listParams reads the query of a listing of dead work (GET /v1/tasks,
// /v1/commands, /v1/refunds): dead=&order_id=&limit=&after=.
func listParams(r *http.Request, maxLimit int) (store.ListTasksParams, error) {
	q := r.URL.Query()
	p := store.ListTasksParams{OrderID: q.Get("order_id"), After: q.Get("after")}
	var err error
	if p.Dead, err = deadParam(q); err != nil {
		return p, err
	}
	p.Limit, err = limitParam(q, maxLimit)
	return p, err
}

// retryCommands is POST /v1/commands/retry: {"ids": […]} or {"dead": true}.
func (s *server) retryCommands(w http.ResponseWriter, r *http.Request) error {
	p, err := decodeDead(r, "retry", "command")
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
	p, err := decodeDead(r, "purge", "command")
	if err != nil {
		return err
	}
	n, err := s.svc.PurgeCommands(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"purged": n})
}
