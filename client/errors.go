package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is an answer of the API other than the operation's success: its
// HTTP status and the error envelope's code and message. An answer without
// the envelope (a proxy's error page) has an empty Code and a piece of its
// text as Message.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Is makes errors.Is match e against a pattern *Error: every field the
// pattern sets (Status, Code) must be e's. The sentinels below are such
// patterns, and so is any &client.Error{Code: client.CodeOrderExpired}.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || (t.Status == 0 && t.Code == "") {
		return false
	}
	return (t.Status == 0 || t.Status == e.Status) && (t.Code == "" || t.Code == e.Code)
}

// The API's error codes (openapi.yaml).
const (
	CodeInvalidJSON          = "invalid_json"
	CodeInvalidField         = "invalid_field"
	CodeInvalidCursor        = "invalid_cursor"
	CodeReservationRequired  = "reservation_required"
	CodeUnauthorized         = "unauthorized"
	CodeForeignOrigin        = "foreign_origin"
	CodeNotFound             = "not_found"
	CodeOrderNotFound        = "order_not_found"
	CodeSKUNotFound          = "sku_not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeInsufficientStock    = "insufficient_stock"
	CodeOrderExists          = "order_exists"
	CodeReservationUsed      = "reservation_used"
	CodeReservationReleased  = "reservation_released"
	CodeReservationNotHeld   = "reservation_not_held"
	CodeReservationMismatch  = "reservation_mismatch"
	CodeOrderExpired         = "order_expired"
	CodeOrderNotPending      = "order_not_pending"
	CodePaymentIDUsed        = "payment_id_used"
	CodeStockRemote          = "stock_remote"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInvalidSignature     = "invalid_signature"
	CodeCallbacksDisabled    = "callbacks_disabled"
	CodeInternal             = "internal"
	CodeTimeout              = "timeout"
	CodeReservationUnknown   = "reservation_unknown"
	CodeNotReady             = "not_ready"
	// The operator's actions (CancelAsOperator, Check).
	CodeOrderNotOpen           = "order_not_open"
	CodeOrderNotCheckable      = "order_not_checkable"
	CodeNoGateway              = "no_gateway"
	CodeAlreadyPaid            = "already_paid"
	CodeCloseFailed            = "close_failed"
	CodeGatewayUnavailable     = "gateway_unavailable"
	CodeOrderServiceOwnsStatus = "order_service_owns_status"
	// An operator's refund (RefundPayment).
	CodePaymentNotFound = "payment_not_found"
	CodeNotRefundable   = "not_refundable"
	CodeNoRefunder      = "no_refunder"
)

// Sentinels for errors.Is. ErrNotFound matches any 404 (order_not_found,
// sku_not_found, not_found); the others match their code.
var (
	ErrNotFound             = &Error{Status: http.StatusNotFound}
	ErrUnauthorized         = &Error{Status: http.StatusUnauthorized}
	ErrInvalid              = &Error{Status: http.StatusBadRequest}
	ErrUnavailable          = &Error{Status: http.StatusServiceUnavailable}
	ErrInsufficientStock    = &Error{Code: CodeInsufficientStock}
	ErrOrderExists          = &Error{Code: CodeOrderExists}
	ErrOrderExpired         = &Error{Code: CodeOrderExpired}
	ErrOrderNotPending      = &Error{Code: CodeOrderNotPending}
	ErrPaymentIDUsed        = &Error{Code: CodePaymentIDUsed}
	ErrIdempotencyKeyReused = &Error{Code: CodeIdempotencyKeyReused}
	ErrStockRemote          = &Error{Code: CodeStockRemote}
)

// Code is the API's error code in err's chain, "" when there is none (a
// transport error, a success).
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
