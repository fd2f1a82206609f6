package httpapi

import (
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
)

// The operators' view of the refunds (--auto-refund, and the refunds an
// operator asked for): the money lapse has not given back yet, and the
// DEAD refunds that wait for an operator to send them again — or to give
// the money back by hand and record it (POST /v1/payments/{payment_id}/
// refund with "manual"). Like the stock tasks' and the cancel commands'.

// listRefunds is GET /v1/refunds?dead=&order_id=&limit=&after=.
func (s *server) listRefunds(w http.ResponseWriter, r *http.Request) error {
	p, err := listParams(r, lapse.MaxRefundsLimit)
	if err != nil {
		return err
	}
	page, err := s.svc.ListRefunds(r.Context(), p)
	if err != nil {
		return err
	}
	out := struct {
		Refunds []order.Refund `json:"refunds"`
		// NextAfter is left out on the last page.
		NextAfter string `json:"next_after,omitempty"`
	}{Refunds: page.Refunds, NextAfter: page.NextAfter}
	if out.Refunds == nil {
		out.Refunds = []order.Refund{}
	}
	return writeJSON(w, http.StatusOK, out)
}

// retryRefunds is POST /v1/refunds/retry: {"ids": […]} (payment ids) or
// {"dead": true}.
func (s *server) retryRefunds(w http.ResponseWriter, r *http.Request) error {
	p, err := decodeDead(r, "retry", "refund")
	if err != nil {
		return err
	}
	n, err := s.svc.RetryRefunds(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"retried": n})
}
