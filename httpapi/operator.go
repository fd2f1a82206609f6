package httpapi

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
)

// operatorError maps the errors of the operator's actions (lapse.CheckNow,
// lapse.CancelAsOperator) to statuses and stable codes; nil for any other.
func operatorError(err error) *apiError {
	switch {
	case errors.Is(err, lapse.ErrOrderServiceOwnsStatus):
		return &apiError{http.StatusConflict, "order_service_owns_status",
			"the order service owns this order's status (order-service mode): cancel it there; nothing was changed"}
	case errors.Is(err, lapse.ErrNoGateway):
		return &apiError{http.StatusConflict, "no_gateway",
			"no payment gateway is configured: nothing can be asked or closed there (an operator's cancel takes no_close: true)"}
	case errors.Is(err, lapse.ErrNotCheckable):
		return &apiError{http.StatusConflict, "order_not_checkable", "the order is neither PAYING nor PENDING with a payment attempt"}
	case errors.Is(err, lapse.ErrNotOpen):
		return &apiError{http.StatusConflict, "order_not_open", "the order is neither PENDING nor PAYING; nothing was changed"}
	case errors.Is(err, lapse.ErrAlreadyPaid):
		return &apiError{http.StatusConflict, "already_paid",
			"closing the trade found it paid at the gateway: the payment is recorded and the order was not cancelled"}
	case errors.Is(err, lapse.ErrCloseFailed):
		return &apiError{http.StatusBadGateway, "close_failed",
			"closing the trade at the payment gateway failed; nothing was changed (retry, or cancel with no_close: true once it is closed by hand)"}
	case errors.Is(err, lapse.ErrNotRefundable):
		return &apiError{http.StatusConflict, "not_refundable", "the payment attempt owes no money back (it is not REFUND_REQUIRED); nothing was changed"}
	case errors.Is(err, lapse.ErrNoRefunder):
		return &apiError{http.StatusConflict, "no_refunder",
			"the payment gateway cannot refund (none configured, or one without refunds): record a refund made by hand with {\"manual\": true, \"note\": …}"}
	case errors.Is(err, lapse.ErrGateway):
		return &apiError{http.StatusBadGateway, "gateway_unavailable", "the payment gateway did not answer; nothing was changed"}
	}
	return nil
}

// checkAnswer is the answer of POST /v1/orders/{id}/check.
type checkAnswer struct {
	Gateway gatewayAnswer `json:"gateway"`
	Order   order.Order   `json:"order"`
}

// gatewayAnswer is what the gateway said.
type gatewayAnswer struct {
	State       payment.State `json:"state"`
	PaymentID   string        `json:"payment_id,omitempty"`
	AmountCents int64         `json:"amount_cents,omitempty"`
	Currency    string        `json:"currency,omitempty"`
}

// check runs the gateway check of one order now (lapse.Service.CheckNow).
func (s *server) check(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "id")
	if err != nil {
		return err
	}
	res, err := s.svc.CheckNow(r.Context(), id)
	if err != nil {
		return err
	}
	g := res.Gateway
	return writeJSON(w, http.StatusOK, checkAnswer{
		Gateway: gatewayAnswer{State: g.State, PaymentID: g.PaymentID, AmountCents: g.AmountCents, Currency: g.Currency},
		Order:   res.Order,
	})
}

// cancelBody is the optional body of POST /v1/orders/{id}/cancel: none (or
// {}) is the buyer's cancel; {"reason": "operator", "force": true} an
// operator's.
type cancelBody struct {
	Reason  *string `json:"reason"`
	Force   *bool   `json:"force"`
	NoClose *bool   `json:"no_close"`
}

// cancel is the buyer's cancel of a PENDING order, or with a body an
// operator's cancel (lapse.Service.CancelAsOperator).
func (s *server) cancel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "id")
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b cancelBody
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &b); err != nil {
			return err
		}
	}
	if b.Reason == nil {
		if b.Force != nil || b.NoClose != nil {
			return badRequest("invalid_field", `reason: force and no_close go with "reason": "operator"`)
		}
		o, err := s.svc.Cancel(r.Context(), id)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, o)
	}
	switch {
	case *b.Reason != string(order.ReasonOperator):
		return badRequest("invalid_field", `reason: want "operator" (or no body: the buyer's cancel), got %s`, echo(*b.Reason))
	case b.Force == nil || !*b.Force:
		return badRequest("invalid_field", `force: an operator's cancel needs "force": true`)
	}
	o, err := s.svc.CancelAsOperator(r.Context(), id, lapse.OperatorCancel{NoClose: b.NoClose != nil && *b.NoClose})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}

// refundBody is the optional body of POST /v1/payments/{payment_id}/refund.
type refundBody struct {
	Manual   *bool   `json:"manual"`
	Note     *string `json:"note"`
	RefundID *string `json:"refund_id"`
}

// refundAnswer is its answer.
type refundAnswer struct {
	Order    order.Order `json:"order"`
	Pending  bool        `json:"pending"`
	RefundID string      `json:"refund_id,omitempty"`
}

// refund gives back one REFUND_REQUIRED attempt's money now, or records a
// refund made by hand (lapse.Service.RefundPayment).
func (s *server) refund(w http.ResponseWriter, r *http.Request) error {
	id, err := pathText(r, "payment_id")
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b refundBody
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &b); err != nil {
			return err
		}
	}
	// The service checks the note and the refund id (lapse.RefundRequest).
	req := lapse.RefundRequest{Manual: b.Manual != nil && *b.Manual, Actor: "api"}
	if b.Note != nil {
		req.Note = *b.Note
	}
	if b.RefundID != nil {
		req.RefundID = *b.RefundID
	}
	res, err := s.svc.RefundPayment(r.Context(), id, req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.Pending {
		status = http.StatusAccepted
	}
	return writeJSON(w, status, refundAnswer{Order: res.Order, Pending: res.Pending, RefundID: res.RefundID})
}
