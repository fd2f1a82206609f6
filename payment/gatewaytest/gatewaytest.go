// Package gatewaytest is the conformance suite every payment.Gateway
// adapter runs — the generic HTTP gateway, Alipay, WeChat Pay, Stripe — each
// against a controllable fake of its gateway that the adapter's own test
// supplies (Fake). It checks what lapse's gateway check relies on
// (docs/architecture.md §2, §4):
//
//   - a PAID answer carries the payment id and the amount;
//   - NOT_PAID, PENDING and CLOSED are read as such, and a trade the gateway
//     never saw is NOT_PAID;
//   - closing an open trade closes it; closing a paid one is
//     payment.ErrAlreadyPaid; closing a closed or unknown one is nil;
//   - anything else — a state the adapter does not map, a 5xx, an answer that
//     is not the gateway's protocol, a response whose signature does not
//     verify, a gateway that hangs past the adapter's timeout — is an error,
//     never NOT_PAID or CLOSED (either would let lapse cancel an order whose
//     buyer may have paid).
//
// When the adapter is a payment.Refunder, its refunds are checked too (its
// Fake must then be a RefundFake):
//
//   - a paid payment is refunded, and a refund sent again with the same key
//     is the same refund: one refund at the gateway;
//   - a refund of a payment the gateway does not know is an error wrapping
//     payment.ErrUnknownPayment, never a success; of an unpaid one,
//     payment.ErrNotRefundable;
//   - a partial amount is refunded only by a gateway that declares it
//     (Harness.PartialRefunds), and is payment.ErrPartialRefund otherwise,
//     with nothing refunded;
//   - a 5xx, a hang, garbage or a bad signature is an error, and the refund
//     sent again with the same key once the gateway is back is one refund.
//
// It also has Lapse, a real lapse service on SQLite serving its HTTP API, for
// the adapters' end-to-end tests of their notifications and of the gateway
// check.
package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// Trade is a state a Fake holds a trade in.
type Trade int

// Trade states.
const (
	// TradePaid: the buyer paid (Fake.Set's amountCents).
	TradePaid Trade = iota + 1
	// TradeNotPaid: the trade is open, waiting for the buyer.
	TradeNotPaid
	// TradePending: a payment is in progress (WeChat Pay's USERPAYING).
	TradePending
	// TradeClosed: the trade is closed; the buyer can no longer pay.
	TradeClosed
	// TradeUnknown: the gateway never saw the trade.
	TradeUnknown
	// TradeUnmapped: the gateway answers a state the adapter has no mapping
	// for (a new state, a typo): the adapter must answer an error.
	TradeUnmapped
)

func (tr Trade) String() string {
	switch tr {
	case TradePaid:
		return "paid"
	case TradeNotPaid:
		return "not paid"
	case TradePending:
		return "pending"
	case TradeClosed:
		return "closed"
	case TradeUnknown:
		return "unknown"
	case TradeUnmapped:
		return "unmapped"
	}
	return fmt.Sprintf("Trade(%d)", int(tr))
}

// Fault is how a Fake fails every request while it is set.
type Fault int

// Faults.
const (
	// FaultNone: the fake answers as the gateway does.
	FaultNone Fault = iota
	// FaultServerError: a 5xx.
	FaultServerError
	// FaultHang: no answer until the request is abandoned (past the
	// adapter's timeout).
	FaultHang
	// FaultGarbage: a 2xx whose body is not the gateway's protocol (an HTML
	// page, truncated JSON).
	FaultGarbage
	// FaultBadSignature: a well-formed answer saying NOT_PAID (or closed),
	// signed with a key that is not the gateway's. Only tried when
	// Harness.SignedResponses.
	FaultBadSignature
)

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultServerError:
		return "5xx"
	case FaultHang:
		return "hang"
	case FaultGarbage:
		return "garbage"
	case FaultBadSignature:
		return "bad signature"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Fake is a controllable stand-in for a gateway, written by the adapter's
// test in the gateway's own wire format (it should also check the requests
// it receives — their signatures — and fail the test on a bad one). It must
// be safe for concurrent use.
type Fake interface {
	// Set puts a trade into st: the trade of one payment attempt of the
	// order (paymentID, what QueryAttempt and CloseAttempt name), or, with
	// paymentID "", the trade Query and Close speak of for the order as a
	// whole. amountCents is what was paid, for TradePaid. TradeUnknown
	// forgets the trade.
	Set(orderID, paymentID string, st Trade, amountCents int64)
	// Fail makes every request from now on answer with f; FaultNone
	// restores normal answers.
	Fail(f Fault)
}

// RefundFake is a Fake that counts refunds, for an adapter that is a
// payment.Refunder.
type RefundFake interface {
	Fake
	// Refunds is how many refunds the gateway holds of one payment attempt
	// (paymentID as Set names it): distinct refunds, each moving money —
	// not requests.
	Refunds(orderID, paymentID string) int
}

// Harness is what an adapter's test gives Run.
type Harness struct {
	// New returns an adapter pointed at a fresh Fake. The adapter's request
	// timeout should be Timeout, and it should not retry for long (the
	// suite's hanging gateway waits for each request to be abandoned).
	New func(t *testing.T) (payment.Gateway, Fake)
	// Timeout is the adapter's own request timeout: a hung gateway must
	// make a call fail within a few times of it. Defaults to 250 ms.
	Timeout time.Duration
	// NoPending: the gateway has no "payment in progress" state (Alipay):
	// TradePending is not tried.
	NoPending bool
	// SignedResponses: the adapter verifies the gateway's signature on
	// every answer, so FaultBadSignature is tried.
	SignedResponses bool
	// AttemptsOnly: the gateway knows payments, not orders (Stripe's
	// PaymentIntents), so the adapter is a payment.AttemptGateway whose
	// Query and Close of an order as a whole are errors. The suite checks
	// that they are — never NOT_PAID, never a nil Close — and runs the rest
	// on attempts only.
	AttemptsOnly bool
	// UnknownIsError: the adapter answers an error, not NOT_PAID, about a
	// trade the gateway never saw, and Close of one is an error too, never
	// nil nor ErrAlreadyPaid. For a gateway whose trade ids come from the
	// buyer's client (a PaymentIntent id), where "no such trade" means a
	// wrong key or account as often as a trade never opened: cancelling on
	// it could cancel an order paid under the right one.
	UnknownIsError bool
	// PaymentID is the payment attempt the suite asks about in QueryAttempt
	// and CloseAttempt, and refunds; it must be an id the adapter accepts.
	// Defaults to "pay-1".
	PaymentID string
	// PartialRefunds: the gateway refunds part of a payment (Stripe,
	// Alipay, WeChat Pay). Without it a partial amount must be
	// payment.ErrPartialRefund.
	PartialRefunds bool
	// Currency is the currency of the payments the Fake sets (what its
	// gateway answers for them), given in each refund. Defaults to "CNY".
	Currency string
}

// Run runs the conformance suite. Every subtest gets its own adapter and
// Fake (Harness.New) and runs in parallel with the others. When the adapter
// is a payment.AttemptGateway, QueryAttempt and CloseAttempt are checked as
// well as Query and Close.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("gatewaytest: Harness.New is nil")
	}
	if h.Timeout <= 0 {
		h.Timeout = 250 * time.Millisecond
	}
	if h.PaymentID == "" {
		h.PaymentID = "pay-1"
	}
	if h.Currency == "" {
		h.Currency = "CNY"
	}
	probe, probeFake := h.New(t)
	_, attempts := probe.(payment.AttemptGateway)
	if _, ok := probe.(payment.Refunder); ok {
		if _, ok := probeFake.(RefundFake); !ok {
			t.Fatalf("gatewaytest: %T is a payment.Refunder, but its Fake %T is not a RefundFake", probe, probeFake)
		}
		t.Run("refund", func(t *testing.T) {
			t.Parallel()
			h.refunds(t)
		})
	}
	if h.AttemptsOnly && !attempts {
		t.Fatalf("gatewaytest: Harness.AttemptsOnly, but %T is not a payment.AttemptGateway", probe)
	}
	var kinds []kind
	if h.AttemptsOnly {
		t.Run("order/query and close of an order as a whole are errors", func(t *testing.T) {
			t.Parallel()
			h.wholeOrderRefused(t)
		})
	} else {
		kinds = append(kinds, wholeOrder)
	}
	if attempts {
		kinds = append(kinds, kind{name: "attempt", payment: h.PaymentID})
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			h.run(t, k)
		})
	}
}

// kind is the two ways of asking: about the order, about one attempt.
type kind struct {
	name    string
	payment string // the payment id named ("" for the order as a whole)
}

var wholeOrder = kind{name: "order", payment: ""}

const theOrder = "order-1"

// query asks gw about theOrder (and k's attempt).
func (k kind) query(ctx context.Context, gw payment.Gateway) (payment.Status, error) {
	if k.payment == "" {
		return gw.Query(ctx, theOrder)
	}
	return gw.(payment.AttemptGateway).QueryAttempt(ctx, theOrder, k.payment)
}

// close closes theOrder's (or k's attempt's) trade at gw.
func (k kind) close(ctx context.Context, gw payment.Gateway) error {
	if k.payment == "" {
		return gw.Close(ctx, theOrder)
	}
	return gw.(payment.AttemptGateway).CloseAttempt(ctx, theOrder, k.payment)
}

func (h Harness) run(t *testing.T, k kind) {
	// bound is how long one call may take, however the gateway behaves.
	bound := 10*h.Timeout + 5*time.Second
	call := func(t *testing.T, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the call did not return within %s (took %s): the adapter has no timeout of its own (err %v)", bound, time.Since(start), err)
		}
	}
	query := func(t *testing.T, gw payment.Gateway) (st payment.Status, err error) {
		t.Helper()
		call(t, func(ctx context.Context) error { st, err = k.query(ctx, gw); return err })
		return st, err
	}
	closeTrade := func(t *testing.T, gw payment.Gateway) (err error) {
		t.Helper()
		call(t, func(ctx context.Context) error { err = k.close(ctx, gw); return err })
		return err
	}
	wantState := func(t *testing.T, gw payment.Gateway, want payment.State) {
		t.Helper()
		st, err := query(t, gw)
		if err != nil || st.State != want {
			t.Fatalf("query: %+v, %v; want %s", st, err, want)
		}
	}

	t.Run("paid carries the payment id and the amount", func(t *testing.T) {
		t.Parallel()
		gw, fake := h.New(t)
		fake.Set(theOrder, k.payment, TradePaid, 1234)
		st, err := query(t, gw)
		if err != nil || st.State != payment.StatePaid || st.AmountCents != 1234 || st.PaymentID == "" {
			t.Fatalf("query of a paid trade: %+v, %v; want PAID with a payment id and 1234 cents", st, err)
		}
		if k.payment != "" && st.PaymentID != k.payment {
			t.Fatalf("query of attempt %q: paid by %q", k.payment, st.PaymentID)
		}
	})
	states := []struct {
		trade Trade
		want  payment.State
	}{
		{TradeNotPaid, payment.StateNotPaid},
		{TradePending, payment.StatePending},
		{TradeClosed, payment.StateClosed},
	}
	if !h.UnknownIsError {
		states = append(states, struct {
			trade Trade
			want  payment.State
		}{TradeUnknown, payment.StateNotPaid})
	}
	for _, c := range states {
		if c.trade == TradePending && h.NoPending {
			continue
		}
		t.Run(fmt.Sprintf("%s is %s", c.trade, c.want), func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, c.trade, 0)
			wantState(t, gw, c.want)
		})
	}
	if h.UnknownIsError {
		t.Run("an unknown trade is an error", func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, TradeUnknown, 0)
			if st, err := query(t, gw); err == nil {
				t.Fatalf("query of a trade the gateway never saw: %+v, want an error", st)
			}
			if err := closeTrade(t, gw); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
				t.Fatalf("close of a trade the gateway never saw: %v, want an error other than ErrAlreadyPaid", err)
			}
		})
	}
	t.Run("an unmapped state is an error", func(t *testing.T) {
		t.Parallel()
		gw, fake := h.New(t)
		fake.Set(theOrder, k.payment, TradeUnmapped, 0)
		if st, err := query(t, gw); err == nil {
			t.Fatalf("query of a state the adapter does not map: %+v, want an error", st)
		}
	})

	t.Run("close of an open trade closes it", func(t *testing.T) {
		t.Parallel()
		gw, fake := h.New(t)
		fake.Set(theOrder, k.payment, TradeNotPaid, 0)
		if err := closeTrade(t, gw); err != nil {
			t.Fatalf("close: %v", err)
		}
		wantState(t, gw, payment.StateClosed)
		if err := closeTrade(t, gw); err != nil {
			t.Fatalf("close again: %v", err)
		}
	})
	t.Run("close of a paid trade is ErrAlreadyPaid", func(t *testing.T) {
		t.Parallel()
		gw, fake := h.New(t)
		fake.Set(theOrder, k.payment, TradePaid, 500)
		if err := closeTrade(t, gw); !errors.Is(err, payment.ErrAlreadyPaid) {
			t.Fatalf("close of a paid trade: %v, want ErrAlreadyPaid", err)
		}
		wantState(t, gw, payment.StatePaid)
	})
	nilCloses := []Trade{TradeClosed}
	if !h.UnknownIsError {
		nilCloses = append(nilCloses, TradeUnknown)
	}
	for _, tr := range nilCloses {
		t.Run(fmt.Sprintf("close of a %s trade is nil", tr), func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, tr, 0)
			if err := closeTrade(t, gw); err != nil {
				t.Fatalf("close: %v", err)
			}
		})
	}

	faults := []Fault{FaultServerError, FaultHang, FaultGarbage}
	if h.SignedResponses {
		faults = append(faults, FaultBadSignature)
	}
	for _, f := range faults {
		// The trade is open and unpaid: an adapter that read a failure as
		// "no answer, so not paid" would say NOT_PAID.
		t.Run(fmt.Sprintf("query answered %s is an error", f), func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, TradeNotPaid, 0)
			fake.Fail(f)
			if st, err := query(t, gw); err == nil {
				t.Fatalf("query: %+v, want an error", st)
			}
		})
		t.Run(fmt.Sprintf("close answered %s is an error", f), func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, TradeNotPaid, 0)
			fake.Fail(f)
			if err := closeTrade(t, gw); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
				t.Fatalf("close: %v, want an error other than ErrAlreadyPaid", err)
			}
		})
		t.Run(fmt.Sprintf("close of a paid trade answered %s is an error", f), func(t *testing.T) {
			t.Parallel()
			gw, fake := h.New(t)
			fake.Set(theOrder, k.payment, TradePaid, 500)
			fake.Fail(f)
			if err := closeTrade(t, gw); err == nil {
				t.Fatal("close: nil, want an error")
			}
		})
	}
	t.Run("the gateway recovers after a fault", func(t *testing.T) {
		t.Parallel()
		gw, fake := h.New(t)
		fake.Set(theOrder, k.payment, TradePaid, 700)
		fake.Fail(FaultServerError)
		if _, err := query(t, gw); err == nil {
			t.Fatal("query during the fault: nil error")
		}
		fake.Fail(FaultNone)
		st, err := query(t, gw)
		if err != nil || st.State != payment.StatePaid || st.AmountCents != 700 {
			t.Fatalf("query after the fault: %+v, %v", st, err)
		}
	})
}

// wholeOrderRefused checks an AttemptsOnly adapter: whatever the gateway
// holds for the order, Query and Close of the order as a whole are errors.
func (h Harness) wholeOrderRefused(t *testing.T) {
	for _, tr := range []Trade{TradeNotPaid, TradePaid, TradeClosed, TradeUnknown} {
		gw, fake := h.New(t)
		fake.Set(theOrder, "", tr, 100)
		fake.Set(theOrder, h.PaymentID, tr, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 10*h.Timeout+5*time.Second)
		if st, err := gw.Query(ctx, theOrder); err == nil {
			t.Errorf("%s trade: Query of the order: %+v, want an error", tr, st)
		}
		if err := gw.Close(ctx, theOrder); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
			t.Errorf("%s trade: Close of the order: %v, want an error other than ErrAlreadyPaid", tr, err)
		}
		cancel()
	}
}
