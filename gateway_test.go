package lapse_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/store/storetest"
)

// scripted is a gateway whose answers the test sets per order: the decision
// rules are pure logic over its answers (the end-to-end tests in cmd/lapse run
// the same rules against `lapse mockpay`).
type scripted struct {
	mu      sync.Mutex
	state   map[string]payment.Status
	closeFn func(id string) error
	queries map[string]int
	closes  map[string]int
}

func newScripted() *scripted {
	return &scripted{state: map[string]payment.Status{}, queries: map[string]int{}, closes: map[string]int{}}
}

func (g *scripted) set(id string, st payment.Status) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state[id] = st
}

func (g *scripted) Query(_ context.Context, id string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queries[id]++
	st, ok := g.state[id]
	if !ok {
		return payment.Status{State: payment.StateNotPaid}, nil
	}
	return st, nil
}

func (g *scripted) Close(_ context.Context, id string) error {
	g.mu.Lock()
	g.closes[id]++
	fn := g.closeFn
	g.mu.Unlock()
	if fn != nil {
		if err := fn(id); err != nil {
			return err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state[id].State == payment.StatePaid {
		return payment.ErrAlreadyPaid
	}
	g.state[id] = payment.Status{State: payment.StateClosed}
	return nil
}

func (g *scripted) count(id string) (int, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queries[id], g.closes[id]
}

func gatewayService(t *testing.T, gw payment.Gateway) *lapse.Service {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Gateway: gw, ConfirmAfter: 100 * time.Millisecond,
		GatewayPendingMax: 300 * time.Millisecond})
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	return svc
}

// Cancelled after a payment attempt, then the confirmation query finds the
// payment went through after all: refund_required.
func TestConfirmationAfterCancelFlagsRefund(t *testing.T) {
	t.Parallel()
	gw := newScripted()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	create(t, svc, "late-pay", 300*time.Millisecond)
	if _, err := svc.Pay(ctx, "late-pay"); err != nil {
		t.Fatal(err)
	}
	// The trade is closed and the order cancelled; then the payment lands at
	// the gateway anyway (a gateway whose close raced a payment).
	waitFor(t, 5*time.Second, "the cancel", func() bool { return status(t, svc, "late-pay") == order.Cancelled })
	gw.set("late-pay", payment.Status{State: payment.StatePaid, PaymentID: "p-late", AmountCents: 100})
	waitFor(t, 5*time.Second, "the refund flag", func() bool {
		o, _ := svc.Get(ctx, "late-pay")
		return o.RefundRequired
	})
	o, _ := svc.Get(ctx, "late-pay")
	if o.Status != order.Cancelled || !hasPayment(o, "p-late", order.PaymentRefundRequired) {
		t.Fatalf("after confirmation: %+v, want CANCELLED with payment p-late to refund", o)
	}
	if got := metric(t, svc, "lapse_refund_required_total"); got != 1 {
		t.Fatalf("lapse_refund_required_total = %v", got)
	}
	storetest.AuditOK(t, svc.Store())
}

// A close that finds the trade paid sends the order back to the query: PAID.
func TestCloseFindingAPaymentMarksPaid(t *testing.T) {
	t.Parallel()
	gw := newScripted()
	gw.closeFn = func(id string) error {
		gw.set(id, payment.Status{State: payment.StatePaid, PaymentID: "p-race", AmountCents: 100})
		return nil // Close then sees PAID and answers ErrAlreadyPaid
	}
	svc := gatewayService(t, gw)
	create(t, svc, "race", 300*time.Millisecond)
	if _, err := svc.Pay(context.Background(), "race"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "PAID", func() bool { return status(t, svc, "race") == order.Paid })
	if q, c := gw.count("race"); q < 2 || c != 1 {
		t.Fatalf("queries %d, closes %d; want a second query after the close found the payment", q, c)
	}
	storetest.AuditOK(t, svc.Store())
}

// The gateway reports a payment of another amount (or currency) at the
// deadline: it cannot pay the order, so its money is flagged for refund and
// the order is cancelled with its stock released — never left PAYING
// forever, never marked paid, and the paid trade is not closed.
func TestGatewayAmountMismatchCancelsAndFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		st   payment.Status
	}{
		{"another amount", payment.Status{State: payment.StatePaid, PaymentID: "p-odd", AmountCents: 99}},
		{"another currency", payment.Status{State: payment.StatePaid, PaymentID: "p-odd", AmountCents: 100, Currency: "JPY"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			gw := newScripted()
			gw.set("odd", c.st)
			svc := gatewayService(t, gw)
			create(t, svc, "odd", 300*time.Millisecond)
			if _, err := svc.Pay(context.Background(), "odd"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the cancel", func() bool { return status(t, svc, "odd") == order.Cancelled })
			o, err := svc.Get(context.Background(), "odd")
			if err != nil || !o.RefundRequired || !hasPayment(o, "p-odd", order.PaymentRefundRequired) {
				t.Fatalf("after the check: %+v %v, want p-odd to refund", o, err)
			}
			if _, c := gw.count("odd"); c != 0 {
				t.Fatal("closed a trade the gateway says is paid")
			}
			if sku, _ := svc.Store().GetSKU(context.Background(), "sku"); sku.Locked != 0 || sku.Sold != 0 {
				t.Fatalf("stock %+v, want released", sku)
			}
			storetest.AuditOK(t, svc.Store())
		})
	}
}

// A PENDING order with no attempt is cancelled by the batch, never asked about,
// even while the gateway hangs on the others.
func TestGatewayDownNeverStallsPlainCancels(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	gw := &hanging{block: block}
	svc := gatewayService(t, gw)
	for i := range 20 { // more than the checker's concurrency
		id := "stuck-" + string(rune('a'+i))
		create(t, svc, id, 500*time.Millisecond)
		if _, err := svc.Pay(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	create(t, svc, "plain", 600*time.Millisecond)
	waitFor(t, 5*time.Second, "the plain order cancelled", func() bool { return status(t, svc, "plain") == order.Cancelled })
	if status(t, svc, "stuck-a") != order.Paying {
		t.Fatal("an order was cancelled while its gateway check hung")
	}
}

// hanging is a gateway that never answers until the test ends.
type hanging struct{ block chan struct{} }

func (h *hanging) Query(ctx context.Context, _ string) (payment.Status, error) {
	select {
	case <-h.block:
	case <-ctx.Done():
	}
	return payment.Status{}, context.DeadlineExceeded
}

func (h *hanging) Close(ctx context.Context, _ string) error {
	_, err := h.Query(ctx, "")
	return err
}

// Shutting down with gateway retries and confirmations waiting on their timers
// returns promptly: waiting checks are dropped, not waited for.
func TestShutdownWithChecksWaiting(t *testing.T) {
	t.Parallel()
	gw := newScripted()
	gw.set("waiting", payment.Status{State: payment.StatePending})
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Gateway: gw, GatewayPendingMax: time.Hour})
	storetest.Stock(t, st, 10, "sku")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	create(t, svc, "waiting", 200*time.Millisecond)
	if _, err := svc.Pay(context.Background(), "waiting"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a gateway query", func() bool { q, _ := gw.count("waiting"); return q >= 1 })
	cancel() // the check now waits on its backoff timer
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s with a gateway check waiting to retry")
	}
}

// hasPayment reports whether o lists the payment attempt id in status st.
func hasPayment(o order.Order, id string, st order.PaymentStatus) bool {
	for _, p := range o.Payments {
		if p.PaymentID == id {
			return p.Status == st
		}
	}
	return false
}

// attempts is a gateway that keeps one trade per payment attempt (Alipay's
// out_trade_no, a PaymentIntent): asked about "the order" it knows nothing.
type attempts struct {
	mu     sync.Mutex
	state  map[string]payment.Status // by payment id
	closed map[string]int            // closes by payment id
	whole  int                       // queries and closes of the order as a whole
}

func newAttempts() *attempts {
	return &attempts{state: map[string]payment.Status{}, closed: map[string]int{}}
}

func (g *attempts) set(pid string, st payment.Status) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state[pid] = st
}

func (g *attempts) Query(context.Context, string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.whole++
	return payment.Status{State: payment.StateNotPaid}, nil
}

func (g *attempts) Close(context.Context, string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.whole++
	return nil
}

func (g *attempts) QueryAttempt(_ context.Context, _, pid string) (payment.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.state[pid]; ok {
		return st, nil
	}
	return payment.Status{State: payment.StateNotPaid}, nil
}

func (g *attempts) CloseAttempt(_ context.Context, _, pid string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed[pid]++
	if g.state[pid].State == payment.StatePaid {
		return payment.ErrAlreadyPaid
	}
	g.state[pid] = payment.Status{State: payment.StateClosed}
	return nil
}

func (g *attempts) closes(pid string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed[pid]
}

// The check asks a per-attempt gateway about each open attempt, not about
// "the order": the current attempt paid at the deadline marks the order
// PAID by it. Asked about the order as a whole, such a gateway knows no
// payment, and the order was closed and cancelled with the money taken.
func TestCheckAsksEachOpenAttempt(t *testing.T) {
	t.Parallel()
	gw := newAttempts()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	// The deadline leaves room for both attempts on a loaded machine: an
	// attempt started after it is refused, which is not this test.
	create(t, svc, "two-cards", 1500*time.Millisecond)
	if _, err := svc.PayAttempt(ctx, "two-cards", "card-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PayAttempt(ctx, "two-cards", "card-2"); err != nil {
		t.Fatal(err)
	}
	// The buyer pays with card-2 and no notification arrives: only the
	// check at the deadline can learn it.
	gw.set("card-2", payment.Status{State: payment.StatePaid, PaymentID: "card-2", AmountCents: 100})
	// The buyer switched cards: card-1 is closed at the gateway at once.
	waitFor(t, 5*time.Second, "the superseded attempt closed", func() bool { return gw.closes("card-1") >= 1 })
	waitFor(t, 10*time.Second, "the order paid by card-2", func() bool { return status(t, svc, "two-cards") == order.Paid })
	o, err := svc.Get(ctx, "two-cards")
	if err != nil || o.PaymentID != "card-2" || !hasPayment(o, "card-2", order.PaymentSucceeded) {
		t.Fatalf("after the check: %+v %v", o, err)
	}
	storetest.AuditOK(t, svc.Store())
}

// An attempt superseded after the buyer paid it is money: closing it finds
// it paid, and the payment is recorded (the order PAID by it).
func TestSupersededAttemptPaidAfterAllIsRecorded(t *testing.T) {
	t.Parallel()
	gw := newAttempts()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	create(t, svc, "paid-first", time.Minute)
	if _, err := svc.PayAttempt(ctx, "paid-first", "card-1"); err != nil {
		t.Fatal(err)
	}
	gw.set("card-1", payment.Status{State: payment.StatePaid, PaymentID: "card-1", AmountCents: 100})
	if _, err := svc.PayAttempt(ctx, "paid-first", "card-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the order paid by card-1", func() bool { return status(t, svc, "paid-first") == order.Paid })
	if o, _ := svc.Get(ctx, "paid-first"); o.PaymentID != "card-1" {
		t.Fatalf("paid by %q, want card-1", o.PaymentID)
	}
	storetest.AuditOK(t, svc.Store())
}

// No attempt paid: every open attempt is closed at the gateway, then the
// order cancelled; "the order" is never asked about.
func TestEveryOpenAttemptClosedBeforeTheCancel(t *testing.T) {
	t.Parallel()
	gw := newAttempts()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	create(t, svc, "unpaid", 300*time.Millisecond)
	for _, pid := range []string{"card-1", "card-2"} {
		if _, err := svc.PayAttempt(ctx, "unpaid", pid); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the cancel", func() bool { return status(t, svc, "unpaid") == order.Cancelled })
	if gw.closes("card-2") < 1 || gw.closes("card-1") < 1 {
		t.Fatalf("closes: card-1 %d, card-2 %d; want both closed", gw.closes("card-1"), gw.closes("card-2"))
	}
	gw.mu.Lock()
	whole := gw.whole
	gw.mu.Unlock()
	if whole != 0 {
		t.Fatalf("the order as a whole was asked about or closed %d times", whole)
	}
	storetest.AuditOK(t, svc.Store())
}

// cnyOnly is a scripted gateway that takes only CNY (as Alipay's and WeChat
// Pay's domestic trades do).
type cnyOnly struct{ *scripted }

func (cnyOnly) AcceptsCurrency(c string) bool { return c == "CNY" }

// An order in a currency the gateway cannot take is refused at create
// (currency_unsupported, nothing written), and a default currency it cannot
// take is refused at start.
func TestCurrencyTheGatewayCannotTake(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	if _, err := lapse.New(lapse.Config{Store: st, Gateway: cnyOnly{newScripted()}, Logger: quiet}); err == nil {
		t.Fatal("a CNY-only gateway with the default currency USD started")
	}
	svc := newService(t, lapse.Config{Store: st, Gateway: cnyOnly{newScripted()}, DefaultCurrency: "CNY"})
	storetest.Stock(t, st, 1, "sku")
	_, err := svc.CreateOrder(context.Background(), lapse.CreateOrderRequest{
		ID: "usd", Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100, Currency: "USD"})
	var inv *lapse.InvalidError
	if !errors.As(err, &inv) || inv.Code != "currency_unsupported" {
		t.Fatalf("a USD order at a CNY-only gateway: %v, want currency_unsupported", err)
	}
	if _, err := svc.Get(context.Background(), "usd"); !errors.Is(err, lapse.ErrNotFound) {
		t.Fatalf("the refused order exists: %v", err)
	}
	if _, err := svc.CreateOrder(context.Background(), lapse.CreateOrderRequest{
		ID: "cny", Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100}); err != nil {
		t.Fatalf("a CNY order: %v", err)
	}
}

// A success for an attempt lapse never started (the callback names pay_1
// while /pay opened its own) pays the order; the attempt that was open is
// SUPERSEDED and closed at a per-attempt gateway, never left PENDING on a
// PAID order for the buyer to pay a second time.
func TestPaymentOfAnotherAttemptClosesTheOpenOne(t *testing.T) {
	t.Parallel()
	gw := newAttempts()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	create(t, svc, "o-2", time.Minute)
	o, err := svc.Pay(ctx, "o-2")
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Notify(ctx, lapse.Notification{OrderID: "o-2", PaymentID: "pay_1", Status: lapse.PaymentSucceeded, AmountCents: 100})
	if err != nil || res.Order.Status != order.Paid || res.Order.PaymentID != "pay_1" {
		t.Fatalf("pay_1: %+v %v", res, err)
	}
	waitFor(t, 5*time.Second, "the open attempt closed at the gateway", func() bool { return gw.closes(o.PaymentID) >= 1 })
	got, err := svc.Get(ctx, "o-2")
	if err != nil || !hasPayment(got, o.PaymentID, order.PaymentSuperseded) || !hasPayment(got, "pay_1", order.PaymentSucceeded) {
		t.Fatalf("after pay_1: %+v %v", got, err)
	}
	storetest.AuditOK(t, svc.Store())
}

// A success of another amount on the current attempt at a per-attempt
// gateway, learnt by the deadline's query: the attempt ends (money flagged),
// no attempt is left open, and the order is cancelled with its stock back —
// "the order" is never asked about.
func TestWrongAmountAtTheDeadlineCancels(t *testing.T) {
	t.Parallel()
	gw := newAttempts()
	svc := gatewayService(t, gw)
	ctx := context.Background()
	create(t, svc, "short", 300*time.Millisecond)
	if _, err := svc.PayAttempt(ctx, "short", "card-1"); err != nil {
		t.Fatal(err)
	}
	gw.set("card-1", payment.Status{State: payment.StatePaid, PaymentID: "card-1", AmountCents: 99})
	waitFor(t, 5*time.Second, "the cancel", func() bool { return status(t, svc, "short") == order.Cancelled })
	o, err := svc.Get(ctx, "short")
	if err != nil || !o.RefundRequired || !hasPayment(o, "card-1", order.PaymentRefundRequired) {
		t.Fatalf("after the check: %+v %v", o, err)
	}
	gw.mu.Lock()
	whole := gw.whole
	gw.mu.Unlock()
	if whole != 0 || gw.closes("card-1") != 0 {
		t.Fatalf("asked about the order as a whole %d times, closed the paid attempt %d times", whole, gw.closes("card-1"))
	}
	storetest.AuditOK(t, svc.Store())
}
