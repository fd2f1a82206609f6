package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
)

// The operators' view of the stock tasks (docs/sagas.md): the commands the
// remote inventory has not applied yet, and the DEAD ones that wait for an
// operator. `lapse tasks` does the same from the command line.

// listTasks is GET /v1/tasks?dead=&order_id=&limit=&after=.
func (s *server) listTasks(w http.ResponseWriter, r *http.Request) error {
	p, err := listParams(r, lapse.MaxTasksLimit)
	if err != nil {
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

// retryTasks is POST /v1/tasks/retry: {"ids": […]} or {"dead": true}.
func (s *server) retryTasks(w http.ResponseWriter, r *http.Request) error {
	p, err := decodeDead(r, "retry", "task")
	if err != nil {
		return err
	}
	n, err := s.svc.RetryTasks(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"retried": n})
}
