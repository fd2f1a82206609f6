package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// ---- an operator's actions on one order: extend, force-check, operator-cancel

// canForceCheck: the gateway check has something to decide about o.
func canForceCheck(svc *lapse.Service, o order.Order) bool {
	return svc.HasGateway() && (o.Status == order.Paying || (o.Status == order.Pending && o.PaymentAttempts > 0))
}

// canOperatorCancel: o is PAYING past its deadline, and lapse owns its
// status (not order-service mode).
func canOperatorCancel(svc *lapse.Service, o order.Order, now time.Time) bool {
	return !svc.HasOrderService() && o.Status == order.Paying && !o.CancelAfter.After(now)
}

// canExtend: o is PENDING with its payment window open.
func canExtend(o order.Order, now time.Time) bool {
	return o.Status == order.Pending && o.ExpiresAt.After(now)
}

// extend moves the order's deadline to the form's timeout from now
// (lapse.Service.Extend, as POST /v1/orders/{id}/extend).
func (h *Handler) extend(w http.ResponseWriter, r *http.Request, s session, id, back string) error {
	d, err := time.ParseDuration(strings.TrimSpace(r.PostForm.Get("timeout")))
	if err != nil || d <= 0 {
		h.fail(w, r, s, http.StatusBadRequest, "the new payment window: want a duration such as 30m or 2h")
		return nil
	}
	_, err = h.svc.Extend(r.Context(), id, time.Now().Add(d))
	var inv *lapse.InvalidError
	switch {
	case errors.As(err, &inv):
		h.fail(w, r, s, http.StatusBadRequest, inv.Error())
		return nil
	case errors.Is(err, store.ErrNotFound):
		h.fail(w, r, s, http.StatusNotFound, "no such order")
		return nil
	case errors.Is(err, store.ErrOrderExpired):
		http.Redirect(w, r, back+"?done=expired", http.StatusSeeOther)
		return nil
	case errors.Is(err, store.ErrNotPending):
		http.Redirect(w, r, back+"?done=not-pending-extend", http.StatusSeeOther)
		return nil
	case err != nil:
		return err
	}
	http.Redirect(w, r, back+"?done=extended", http.StatusSeeOther)
	return nil
}

// operatorCancel cancels the order as an operator (lapse.Service.
// CancelAsOperator), closing its trade at the gateway first unless the
// form says it was closed by hand.
func (h *Handler) operatorCancel(w http.ResponseWriter, r *http.Request, s session, id, back string) error {
	var oc lapse.OperatorCancel
	switch r.PostForm.Get("close") {
	case "close":
	case "no-close":
		oc.NoClose = true
	default:
		h.fail(w, r, s, http.StatusBadRequest, "choose whether lapse closes the trade at the gateway, or you closed it by hand")
		return nil
	}
	_, err := h.svc.CancelAsOperator(r.Context(), id, oc)
	done := "operator-cancelled"
	switch {
	case errors.Is(err, store.ErrNotFound):
		h.fail(w, r, s, http.StatusNotFound, "no such order")
		return nil
	case errors.Is(err, lapse.ErrOrderServiceOwnsStatus):
		done = "order-service-owns-status"
	case errors.Is(err, lapse.ErrNotOpen):
		done = "not-open"
	case errors.Is(err, lapse.ErrNoGateway):
		done = "no-gateway"
	case errors.Is(err, lapse.ErrAlreadyPaid):
		done = "already-paid"
	case errors.Is(err, lapse.ErrCloseFailed):
		h.log.Warn("dashboard operator's cancel: the close failed", "order_id", id, "err", err)
		done = "close-failed"
	case err != nil:
		return err
	}
	http.Redirect(w, r, back+"?done="+done, http.StatusSeeOther)
	return nil
}

// ---- retry of the dead: events, stock tasks, cancel commands, refunds

// retryKind is one list whose dead entries the dashboard sends again.
type retryKind struct {
	path, noun string
	retry      func(h *Handler, r *http.Request, ids []string, sink string, all bool) (int64, error)
}

var retryKinds = map[string]retryKind{
	"events": {"/ui/events", "event deliveries", func(h *Handler, r *http.Request, ids []string, sink string, all bool) (int64, error) {
		return h.svc.RetryEvents(r.Context(), store.RetryEventsParams{IDs: ids, Sink: sink, AllDead: all})
	}},
	"tasks": {"/ui/tasks", "stock tasks", func(h *Handler, r *http.Request, ids []string, _ string, all bool) (int64, error) {
		return h.svc.RetryTasks(r.Context(), store.RetryTasksParams{IDs: ids, AllDead: all})
	}},
	"commands": {"/ui/commands", "cancel commands", func(h *Handler, r *http.Request, ids []string, _ string, all bool) (int64, error) {
		return h.svc.RetryCommands(r.Context(), store.RetryTasksParams{IDs: ids, AllDead: all})
	}},
	"refunds": {"/ui/refunds", "refunds", func(h *Handler, r *http.Request, ids []string, _ string, all bool) (int64, error) {
		return h.svc.RetryRefunds(r.Context(), store.RetryTasksParams{IDs: ids, AllDead: all})
	}},
}

type retryView struct {
	base
	Kind, Noun string
	ID, Sink   string
	All        bool
	Back       string
}

// retrySelection reads what a retry names: one id (with its sink, for an
// event), or all=1 for every dead one; ok false when it names neither or
// both.
func retrySelection(v url.Values) (id, sink string, all, ok bool) {
	id, sink, all = v.Get("id"), v.Get("sink"), v.Get("all") == "1"
	return id, sink, all, (id != "") != all
}

// retryConfirm is the confirmation of a retry: GET /ui/{kind}/retry?id=…
// (&sink=… for an event) or ?all=1.
func (h *Handler) retryConfirm(kind string) func(w http.ResponseWriter, r *http.Request, s session) error {
	k := retryKinds[kind]
	return func(w http.ResponseWriter, r *http.Request, s session) error {
		id, sink, all, ok := retrySelection(r.URL.Query())
		if !ok {
			h.fail(w, r, s, http.StatusBadRequest, "name one dead entry (id) or all of them (all=1)")
			return nil
		}
		v := retryView{base: h.base(r, s, "Retry"), Kind: kind, Noun: k.noun, ID: id, Sink: sink, All: all, Back: k.path + "?dead=1"}
		v.Nav = map[string]string{"events": "Events", "tasks": "Stock tasks", "commands": "Cancel commands", "refunds": "Refunds"}[kind]
		return h.render(w, "retry", v)
	}
}

// retry sends dead entries again: POST /ui/{kind}/retry with the
// confirmation's form. The list then says how it went.
func (h *Handler) retry(kind string) func(w http.ResponseWriter, r *http.Request, s session) error {
	k := retryKinds[kind]
	return func(w http.ResponseWriter, r *http.Request, s session) error {
		id, sink, all, ok := retrySelection(r.PostForm)
		if !ok {
			h.fail(w, r, s, http.StatusBadRequest, "name one dead entry (id) or all of them (all=1)")
			return nil
		}
		var ids []string
		if id != "" {
			ids = []string{id}
		}
		n, err := k.retry(h, r, ids, sink, all)
		var inv *lapse.InvalidError
		switch {
		case errors.As(err, &inv):
			h.fail(w, r, s, http.StatusBadRequest, inv.Error())
			return nil
		case err != nil:
			return err
		}
		done := "retried"
		if n == 0 {
			done = "retried-none"
		}
		http.Redirect(w, r, k.path+"?dead=1&done="+done, http.StatusSeeOther)
		return nil
	}
}
