package lapse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store"
)

// Errors of the operator's actions (CheckNow, CancelAsOperator).
var (
	// ErrNotCheckable: the order is neither PAYING nor PENDING with a
	// payment attempt, so the gateway check has nothing to decide.
	ErrNotCheckable = errors.New("lapse: the order is neither PAYING nor PENDING with a payment attempt")
	// ErrNotOpen: the order is neither PENDING nor PAYING.
	ErrNotOpen = errors.New("lapse: the order is neither PENDING nor PAYING")
	// ErrOrderServiceOwnsStatus: in order-service mode the order service
	// decides an order's status; lapse only commands its cancel.
	ErrOrderServiceOwnsStatus = errors.New("lapse: the order service owns the order's status (order-service mode)")
	// ErrGateway wraps what the gateway answered when it could not be asked.
	ErrGateway = errors.New("lapse: the payment gateway did not answer")
	// ErrCloseFailed wraps the gateway's answer to a close that failed:
	// nothing was changed.
	ErrCloseFailed = errors.New("lapse: closing the trade at the payment gateway failed")
	// ErrAlreadyPaid: the close found the trade paid; the payment is
	// recorded (the order PAID, or its money flagged) and the order is not
	// cancelled.
	ErrAlreadyPaid = errors.New("lapse: the trade was paid at the gateway: the payment is recorded, the order not cancelled")
)

// CheckNow runs the gateway check of a PAYING order, or of a PENDING one
// with a payment attempt, at once — the check its deadline runs, with its
// rules (gateway.go): past its deadline a PAID answer is recorded, NOT_PAID
// closes the trade and cancels the order, CLOSED cancels it, PENDING and
// errors leave it to the background checks. Before its deadline the
// buyer's window is open: the gateway is only asked, and a PAID answer
// recorded (CheckPayment), nothing closed. Errors: ErrNoGateway,
// ErrNotFound, ErrNotCheckable, ErrGateway.
func (s *Service) CheckNow(ctx context.Context, id string) (PaymentCheck, error) {
	if s.checks == nil {
		return PaymentCheck{}, ErrNoGateway
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return PaymentCheck{}, err
	}
	if o.Status != order.Paying && (o.Status != order.Pending || o.PaymentAttempts == 0) {
		return PaymentCheck{Order: o}, fmt.Errorf("check order %s (%s): %w", id, o.Status, ErrNotCheckable)
	}
	if o.CancelAfter.After(time.Now()) {
		return s.CheckPayment(ctx, id)
	}
	st, err := s.checks.checkNow(ctx, id)
	if err != nil {
		return PaymentCheck{}, fmt.Errorf("check order %s: %w: %w", id, ErrGateway, err)
	}
	after, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return PaymentCheck{}, err
	}
	res := PaymentCheck{Gateway: st, Order: after}
	switch {
	case o.Status != order.Paid && after.Status == order.Paid:
		res.Outcome = store.OutcomePaid
	case !o.RefundRequired && after.RefundRequired:
		res.Outcome = store.OutcomeRefundRequired
	}
	return res, nil
}

// OperatorCancel is how an operator cancels an order (CancelAsOperator).
type OperatorCancel struct {
	// NoClose skips closing the trade at the gateway: the operator
	// acknowledges it was closed by hand (or that there is none). The
	// order.cancelled event says so (cancel_detail closed_by_hand).
	NoClose bool
}

// CancelAsOperator cancels a PENDING or PAYING order on an operator's word,
// past its deadline or not: for an order stuck past its deadline with a
// gateway that cannot answer. Its open trades are closed at the gateway
// first (each open attempt at a gateway that keeps a trade per attempt,
// else the order's trade), and the order is cancelled only if every close
// succeeded — unless NoClose. The cancel is the store's confirmed cancel
// with cancel_reason operator: stock released, open attempts ended FAILED,
// order.cancelled written; the confirmation query follows, as after the
// deadline's check, so a payment that slipped through is flagged.
//
// Errors, each leaving the order as it was: ErrOrderServiceOwnsStatus
// (order-service mode), ErrNotFound, ErrNotOpen, ErrNoGateway (a close
// asked without a gateway), ErrCloseFailed; ErrAlreadyPaid when a close
// found the trade paid — the payment is then recorded, as the checker
// records it.
func (s *Service) CancelAsOperator(ctx context.Context, id string, c OperatorCancel) (order.Order, error) {
	if s.commands != nil {
		return order.Order{}, ErrOrderServiceOwnsStatus
	}
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return o, err
	}
	if !o.Status.HoldsStock() {
		return o, fmt.Errorf("cancel order %s (%s): %w", id, o.Status, ErrNotOpen)
	}
	why := ""
	if c.NoClose {
		why = "closed_by_hand"
	} else {
		if s.checks == nil {
			return o, fmt.Errorf("close the trade of order %s: %w", id, ErrNoGateway)
		}
		if err := s.closeForOperator(ctx, o); err != nil {
			return o, err
		}
	}
	res, err := s.store.CancelDue(ctx, store.CancelDueParams{IDs: []string{id}, Confirmed: true, Reason: order.ReasonOperator, Why: why})
	if err != nil {
		return o, fmt.Errorf("cancel order %s as an operator: %w", id, err)
	}
	if len(res.HookFailed) > 0 {
		return o, fmt.Errorf("cancel order %s as an operator: %w", id, res.HookFailed[0])
	}
	after, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return after, err
	}
	if len(res.Cancelled) == 0 {
		// Paid, or cancelled, since it was read.
		return after, fmt.Errorf("cancel order %s (%s): %w", id, after.Status, ErrNotOpen)
	}
	s.metrics.cancelled.WithLabelValues(string(order.ReasonOperator)).Inc()
	s.log.Warn("an operator cancelled the order", "order_id", id, "was", o.Status, "trade_closed_by_hand", c.NoClose)
	s.unschedule(ctx, id)
	if s.checks != nil {
		s.checks.confirmLater(id)
	}
	return after, nil
}

// closeForOperator closes o's open trades at the gateway: each open attempt
// (PENDING, SUPERSEDED, or FAILED: a failure leaves the trade open at such a
// gateway) at one that keeps a trade per attempt, else the order's trade. A
// close that finds the trade paid records the payment as the checker does
// (asked again, then recorded) and answers ErrAlreadyPaid.
func (s *Service) closeForOperator(ctx context.Context, o order.Order) error {
	gw := s.checks.gw
	closeOne := func(close func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
		defer cancel()
		return close(cctx)
	}
	var err error
	if ag, ok := gw.(payment.AttemptGateway); ok && len(o.Payments) > 0 {
		for _, p := range o.Payments {
			if p.Status != order.PaymentPending && p.Status != order.PaymentSuperseded && p.Status != order.PaymentFailed {
				continue
			}
			if err = closeOne(func(ctx context.Context) error { return ag.CloseAttempt(ctx, o.ID, p.PaymentID) }); err != nil {
				break
			}
		}
	} else {
		err = closeOne(func(ctx context.Context) error { return gw.Close(ctx, o.ID) })
	}
	switch {
	case errors.Is(err, payment.ErrAlreadyPaid):
		s.log.Warn("an operator's cancel found the trade paid: recording the payment, not cancelling", "order_id", o.ID)
		qctx, cancel := context.WithTimeout(ctx, s.cfg.GatewayTimeout)
		ans, qerr := s.checks.query(qctx, o.ID)
		cancel()
		if qerr == nil && ans.State == payment.StatePaid {
			if _, rerr := s.recordPaid(ctx, o.ID, ans.Status); rerr != nil {
				return fmt.Errorf("record the payment of order %s a close found: %w", o.ID, rerr)
			}
		} else {
			s.checks.enqueue(o.ID) // the background check records it
		}
		return fmt.Errorf("close the trade of order %s: %w", o.ID, ErrAlreadyPaid)
	case err != nil:
		s.metrics.gatewayChecks.WithLabelValues("close_error").Inc()
		return fmt.Errorf("close the trade of order %s: %w: %w", o.ID, ErrCloseFailed, err)
	}
	return nil
}

// Refund errors.
var (
	// ErrNotRefundable: the payment attempt owes no money back — it is not
	// REFUND_REQUIRED (it paid its order, failed, or is still open).
	ErrNotRefundable = errors.New("lapse: the payment attempt owes no money back (not REFUND_REQUIRED)")
	// ErrNoRefunder: the configured gateway cannot refund (none, or one
	// without payment.Refunder); the refund can be marked done by hand.
	ErrNoRefunder = errors.New("lapse: the payment gateway cannot refund (none configured, or no payment.Refunder)")
)

// Bounds of a RefundRequest's text.
const (
	// MaxRefundNote is the longest note of a refund, in bytes.
	MaxRefundNote = 1000
	// MaxRefundIDLen is the longest gateway refund id recorded by hand.
	MaxRefundIDLen = 255
)

// RefundRequest is an operator's refund of one payment attempt
// (RefundPayment).
type RefundRequest struct {
	// Manual: the money went back outside lapse (the gateway's console):
	// record it, ask the gateway nothing. Note (required then) says how;
	// RefundID names the gateway's refund when known.
	Manual   bool
	Note     string
	RefundID string
	// Actor is who asked (the dashboard's user, "api"), for the event.
	Actor string
}

// RefundOutcome is what became of an operator's refund.
type RefundOutcome struct {
	// Order is the order after it, with its attempts.
	Order order.Order
	// Pending: the gateway accepted the refund and is still processing it;
	// the refund task stays PENDING and is asked again with the same key
	// (by the refund dispatcher, with AutoRefund), and the attempt stays
	// REFUND_REQUIRED until the gateway says it is done.
	Pending bool
	// RefundID is the gateway's id of the refund.
	RefundID string
}

// RefundPayment gives back the money of one REFUND_REQUIRED payment
// attempt now: its refund task is written (or found: one per attempt), the
// gateway is asked with the attempt's key (payment.RefundKey) — the key
// the refund dispatcher uses, so the two together make one refund — and
// the refund is recorded: the attempt REFUNDED, order.refunded written,
// refund_required cleared once no attempt owes money. With r.Manual the
// gateway is not asked: the refund made by hand is recorded so. A refund
// already recorded answers the order as it is. Errors: ErrNotFound (no
// such attempt), ErrNotRefundable, ErrNoRefunder, ErrGateway (the gateway
// did not refund: nothing is recorded, the task stays for a retry), and an
// *InvalidError for a request validRefund refuses.
func (s *Service) RefundPayment(ctx context.Context, paymentID string, r RefundRequest) (RefundOutcome, error) {
	if err := validRefund(r); err != nil {
		return RefundOutcome{}, err
	}
	if r.Manual {
		o, err := s.store.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: paymentID, RefundID: r.RefundID, Manual: true, Note: r.Note, Actor: r.Actor})
		if err != nil {
			return RefundOutcome{}, refundError(paymentID, err)
		}
		s.relay.Notify()
		return RefundOutcome{Order: o, RefundID: r.RefundID}, nil
	}
	refunder, ok := s.cfg.Gateway.(payment.Refunder)
	if !ok {
		return RefundOutcome{}, ErrNoRefunder
	}
	task, err := s.store.EnqueueRefund(ctx, paymentID)
	if err != nil {
		if o, done := s.alreadyRefunded(ctx, paymentID, err); done {
			return RefundOutcome{Order: o}, nil
		}
		return RefundOutcome{}, refundError(paymentID, err)
	}
	res, err := refunder.Refund(ctx, payment.Refund{OrderID: task.OrderID, PaymentID: paymentID, AmountCents: task.AmountCents,
		Currency: task.Currency, Key: payment.RefundKey(paymentID), Reason: cmpOr(r.Note, "lapse: refunded by an operator")})
	if err != nil {
		return RefundOutcome{}, fmt.Errorf("refund %s: %w: %w", paymentID, ErrGateway, err)
	}
	if res.State != payment.RefundSucceeded {
		o, _ := s.store.GetOrder(ctx, task.OrderID)
		return RefundOutcome{Order: o, Pending: true, RefundID: res.RefundID}, nil
	}
	o, err := s.store.MarkRefunded(ctx, store.MarkRefundedParams{PaymentID: paymentID, RefundID: res.RefundID, Note: r.Note, Actor: r.Actor})
	if err != nil {
		return RefundOutcome{}, refundError(paymentID, err)
	}
	s.relay.Notify()
	return RefundOutcome{Order: o, RefundID: res.RefundID}, nil
}

// validRefund checks an operator's refund before anything is written or
// asked: a refund made by hand says how (a note: the event and the audit
// trail keep it, with who and when), a gateway's refund id is given only
// for one (lapse's own refund has the id the gateway answers), and the
// texts have sane lengths.
func validRefund(r RefundRequest) error {
	switch {
	case len(r.Note) > MaxRefundNote || !plainText(r.Note):
		return invalid("note", "at most %d bytes of UTF-8 text", MaxRefundNote)
	case r.Manual && strings.TrimSpace(r.Note) == "":
		return invalid("note", "a refund made by hand needs a note saying how (the gateway's console, a bank transfer, …)")
	case r.RefundID != "" && !r.Manual:
		return invalid("refund_id", "only with manual (a refund lapse makes has the gateway's id)")
	case len(r.RefundID) > MaxRefundIDLen || !plainText(r.RefundID):
		return invalid("refund_id", "at most %d bytes of UTF-8 text", MaxRefundIDLen)
	}
	return nil
}

// alreadyRefunded reports, for EnqueueRefund's ErrNotRefundable, whether
// the attempt is REFUNDED already (a second click): the order as it is.
func (s *Service) alreadyRefunded(ctx context.Context, paymentID string, err error) (order.Order, bool) {
	if !errors.Is(err, store.ErrNotRefundable) {
		return order.Order{}, false
	}
	id, gerr := s.store.OrderOfPayment(ctx, paymentID)
	if gerr != nil {
		return order.Order{}, false
	}
	o, gerr := s.store.GetOrder(ctx, id)
	if gerr != nil {
		return order.Order{}, false
	}
	for _, p := range o.Payments {
		if p.PaymentID == paymentID && p.Status == order.PaymentRefunded {
			return o, true
		}
	}
	return order.Order{}, false
}

func refundError(paymentID string, err error) error {
	if errors.Is(err, store.ErrNotRefundable) {
		return fmt.Errorf("refund %s: %w", paymentID, ErrNotRefundable)
	}
	return fmt.Errorf("refund %s: %w", paymentID, err)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
