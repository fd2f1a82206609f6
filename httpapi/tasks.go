package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The operators' view of the stock tasks (docs/sagas.md): the commands the
// remote inventory has not applied yet, and the DEAD ones that wait for an
// operator. `lapse tasks` does the same from the command line.

// listTasks is GET /v1/tasks?dead=&order_id=&limit=&after=.
func (s *server) listTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := store.ListTasksParams{OrderID: q.Get("order_id"), After: q.Get("after")}
	var err error
	if p.Dead, err = deadParam(q); err != nil {
		return err
	}
	if p.Limit, err = limitParam(q, lapse.MaxTasksLimit); err != nil {
		return err
	}
	page, err := s.svc.ListTasks(r.Context(), p)
	if err != nil {
		return err
	}
	out := struct {
		Tasks []order.StockTask `json:"tasks"`
		// NextAfter is left out on the last page.
		NextAfter string `json:"next_after,omitempty"`
	}{Tasks: page.Tasks, NextAfter: page.NextAfter}
	if out.Tasks == nil {
		out.Tasks = []order.StockTask{}
	}
	return writeJSON(w, http.StatusOK, out)
}

type retryTasksBody struct {
	IDs  []string `json:"ids"`
	Dead *bool    `json:"dead"`
}

// retryTasks is POST /v1/tasks/retry: {"ids": […]} or {"dead": true}.
func (s *server) retryTasks(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b retryTasksBody
	if err := decodeStrict(body, &b); err != nil {
		return err
	}
	if err := retrySelection("task", b.IDs, b.Dead); err != nil {
		return err
	}
	n, err := s.svc.RetryTasks(r.Context(), store.RetryTasksParams{IDs: b.IDs, AllDead: b.Dead != nil})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"retried": n})
}
