package web

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// ---- refunds: the refunds page, and an operator's refund of one payment
// attempt from its order's page

// dashboardActor is who the dashboard names in order.refunded: the
// dashboard has one token, not users.
const dashboardActor = "dashboard"

type refundsView struct {
	base
	Refunds []order.Refund
	Dead    bool
	Next    string
}

// refunds lists the refunds not DONE (pending and dead), or with dead=1
// the DEAD ones, each DEAD one with its retry (lapse.Service.ListRefunds).
func (h *Handler) refunds(w http.ResponseWriter, r *http.Request, s session) error {
	q := workQuery(r)
	page, err := h.svc.ListRefunds(r.Context(), q)
	if h.refused(w, r, s, err) {
		return nil
	}
	if err != nil {
		return err
	}
	v := refundsView{base: h.base(r, s, "Refunds"), Refunds: page.Refunds, Dead: q.Dead, Next: nextWorkPage("/ui/refunds", q.Dead, page.NextAfter)}
	return h.render(w, "refunds", v)
}

// workQuery is the page a work list (stock tasks, commands, refunds) asks
// for: dead=1 for the DEAD ones alone, after the id it goes on from.
func workQuery(r *http.Request) store.ListTasksParams {
	return store.ListTasksParams{Dead: r.URL.Query().Get("dead") == "1", After: r.URL.Query().Get("after"), Limit: 100}
}

// nextWorkPage links a work list's next page, "" after its last.
func nextWorkPage(path string, dead bool, next string) string {
	if next == "" {
		return ""
	}
	return path + "?dead=" + map[bool]string{true: "1", false: "0"}[dead] + "&after=" + url.QueryEscape(next)
}

// refused answers a request the Service refused as invalid with a 400
// page, and reports whether it did.
func (h *Handler) refused(w http.ResponseWriter, r *http.Request, s session, err error) bool {
	var inv *lapse.InvalidError
	if !errors.As(err, &inv) {
		return false
	}
	h.fail(w, r, s, http.StatusBadRequest, inv.Error())
	return true
}

// owedAttempt finds o's payment attempt paymentID when it owes money back
// (REFUND_REQUIRED): what a refund's confirmation and form act on.
func owedAttempt(o order.Order, paymentID string) (order.Payment, bool) {
	for _, p := range o.Payments {
		if p.PaymentID == paymentID && p.Status == order.PaymentRefundRequired {
			return p, true
		}
	}
	return order.Payment{}, false
}

// refund gives back one attempt's money (POST /ui/orders/{id}/refund) or
// records a refund made by hand, with its required note (POST
// /ui/orders/{id}/mark-refunded), through lapse.Service.RefundPayment as
// the API does; the order's page then says how it went.
func (h *Handler) refund(w http.ResponseWriter, r *http.Request, s session, id, back string, manual bool) error {
	paymentID := r.PostForm.Get("payment")
	o, err := h.loadOrder(r.Context(), id)
	if errors.Is(err, errNotFound) {
		h.fail(w, r, s, http.StatusNotFound, "no such order")
		return nil
	}
	if err != nil {
		return err
	}
	if !hasAttempt(o, paymentID) {
		h.fail(w, r, s, http.StatusBadRequest, "name one payment attempt of this order (payment)")
		return nil
	}
	req := lapse.RefundRequest{Actor: dashboardActor}
	if manual {
		req.Manual, req.Note, req.RefundID = true, r.PostForm.Get("note"), r.PostForm.Get("refund_id")
	}
	res, err := h.svc.RefundPayment(r.Context(), paymentID, req)
	var inv *lapse.InvalidError
	done := "refunded"
	switch {
	case errors.As(err, &inv):
		h.fail(w, r, s, http.StatusBadRequest, inv.Error())
		return nil
	case errors.Is(err, lapse.ErrNotRefundable):
		done = "not-refundable"
	case errors.Is(err, lapse.ErrNoRefunder):
		done = "no-refunder"
	case errors.Is(err, lapse.ErrGateway):
		h.log.Warn("dashboard refund: the gateway did not refund", "order_id", id, "payment_id", paymentID, "err", err)
		done = "refund-failed"
	case err != nil:
		return err
	case res.Pending:
		done = "refund-pending"
	case manual:
		done = "marked-refunded"
	}
	http.Redirect(w, r, back+"?done="+done+"&payment="+url.QueryEscape(paymentID), http.StatusSeeOther)
	return nil
}

func hasAttempt(o order.Order, paymentID string) bool {
	for _, p := range o.Payments {
		if p.PaymentID == paymentID {
			return true
		}
	}
	return false
}
